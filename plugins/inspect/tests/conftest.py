"""Fixtures for the Inspect adapter's tests: the envlayer sandbox configs to run them on.

``sandbox_config(name)`` gives an ``EnvlayerSandboxConfig`` for ``local``, ``docker``
(root, the image's user), ``docker-nobody`` (uid 65534) or ``ssh`` (the SSH tests'
non-root user on a loopback sshd started here). A backend that cannot run here skips,
or fails under ``CI=true``, saying what is missing. Every Docker container these tests
make carries the profile of this session and is force-removed at the end.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from envlayer_inspect.config import EnvlayerSandboxConfig

SSH_TESTS = os.path.join(os.path.dirname(__file__), "..", "..", "ssh", "tests")
IMAGE = os.environ.get("ENVLAYER_TEST_DEBIAN_IMAGE", "")
"""A full distribution: Inspect's checks use `ls /usr/bin/env`, `adduser`, `ps aux`."""
PROFILE = f"envlayer-test-inspect-{uuid.uuid4().hex[:8]}"


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_profile() -> Iterator[str]:
    """The Docker profile of this session; its leftover containers are removed at the end."""
    yield PROFILE
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    options = DockerOptions()
    try:
        for info in DockerEnvironment.list_sandboxes(profile=PROFILE, options=options):
            DockerEnvironment.remove_sandbox(info.task, profile=PROFILE, options=options, force=True)
    except Exception:
        pass


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The image the Docker setups run."""
    return IMAGE


@pytest.fixture(scope="session")
def docker_ready(docker_profile: str) -> str:
    if not IMAGE:
        pytest.skip("needs the Debian test image: set ENVLAYER_TEST_DEBIAN_IMAGE (scripts/test does when it exists)")
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    from envlayer.errors import BackendUnavailable

    try:
        DockerEnvironment.check_available(DockerOptions(image=IMAGE))
    except BackendUnavailable as exc:
        unavailable(f"Docker is not usable ({exc.message}); run scripts/provision")
    return docker_profile


@pytest.fixture(scope="module")
def ssh_server() -> Iterator[Any]:
    """A loopback sshd with the SSH tests' non-root user (their helper module), stopped
    when the module that uses it ends."""
    sys.path.insert(0, os.path.abspath(SSH_TESTS))
    from ssh_testserver import running_sshd

    with running_sshd(lambda reason: unavailable(f"SSH cannot be tested: {reason}")) as server:
        yield server


@pytest.fixture(scope="module")
def sandbox_config(request: pytest.FixtureRequest) -> Callable[[str], EnvlayerSandboxConfig]:
    """``sandbox_config(name)``: the adapter config for one backend setup (see module doc)."""

    def make(name: str) -> EnvlayerSandboxConfig:
        if name == "local":
            return EnvlayerSandboxConfig(backend="local")
        if name in ("docker", "docker-nobody"):
            profile = request.getfixturevalue("docker_ready")
            options: dict[str, Any] = {"image": IMAGE}
            if name == "docker-nobody":
                options.update(user="65534:65534")
            return EnvlayerSandboxConfig(backend="docker", profile=profile, options=options)
        if name == "ssh":
            server = request.getfixturevalue("ssh_server")
            options = server.options(exec_mode="session")
            options.pop("timeout")
            return EnvlayerSandboxConfig(backend="ssh", options=options)
        raise ValueError(name)

    return make
