"""Fixtures of the agent-integration tests: isolated settings, managers that are always
closed, and Docker (real daemon, real plugin) with a finalizer that removes every
container of the test's unique profile."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.agents.manager import EnvironmentManager
from envlayer.config import Settings, load_settings

IN_CI = os.environ.get("CI", "").lower() == "true"
TEST_IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Background-job tests on the local backend use the default (per-user) jobs dir,
    ``$XDG_CACHE_HOME/envlayer/jobs``: point XDG_CACHE_HOME at a temporary directory
    (removed by pytest) for the session, so nothing lands in the developer's home."""
    old = os.environ.get("XDG_CACHE_HOME")
    cache = tmp_path_factory.mktemp("xdg-cache")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    try:
        yield cache
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture
def profile() -> str:
    """A profile no other test (or earlier run) uses."""
    return f"agents-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_settings(tmp_path: Path, profile: str) -> Callable[..., Settings]:
    """Settings from an empty config file and no environment variables, so the
    developer's own configuration never leaks in. Keyword arguments as load_settings."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")

    def make(**kwargs: Any) -> Settings:
        kwargs.setdefault("profile", profile)
        return load_settings(config_path=kwargs.pop("config_path", empty), env=kwargs.pop("env", {}), **kwargs)

    return make


@pytest.fixture
def make_manager(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., EnvironmentManager]]:
    """Managers that are closed at teardown, whatever happened.
    ``make_manager(settings=None, **manager_kwargs, **settings_kwargs)``."""
    managers: list[EnvironmentManager] = []
    manager_keys = {"reap_interval", "exit_timeout", "backends"}

    def make(settings: Settings | None = None, **kwargs: Any) -> EnvironmentManager:
        mkw = {k: kwargs.pop(k) for k in list(kwargs) if k in manager_keys}
        manager = EnvironmentManager(settings if settings is not None else make_settings(**kwargs), **mkw)
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        manager.close(timeout=10)


@pytest.fixture
def local_settings(make_settings: Callable[..., Settings], tmp_path: Path) -> Settings:
    """The local backend, working in a private temp directory."""
    work = tmp_path / "work"
    work.mkdir()
    return make_settings(backend="local", backend_options={"cwd": str(work)})


# --- Docker --------------------------------------------------------------------------


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)


def docker_containers(profile: str, *, running_only: bool = False) -> list[str]:
    """Names of the managed containers of ``profile``."""
    args = [
        "ps",
        "--format",
        "{{.Names}}",
        "--filter",
        "label=envlayer.managed",
        "--filter",
        f"label=envlayer.profile={profile}",
    ]
    if not running_only:
        args.insert(1, "-a")
    out = _docker(*args)
    return [line for line in out.stdout.split() if line]


def _docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker CLI is not installed; run scripts/provision to install and start Docker"
    info = _docker("info", "--format", "{{.ServerVersion}}")
    if info.returncode != 0:
        return (
            f"the Docker daemon is not reachable: {info.stderr.strip()}; "
            "run scripts/provision (starts dockerd, builds the test image) to enable the Docker tests"
        )
    if _docker("image", "inspect", TEST_IMAGE).returncode != 0:
        return f"the test image {TEST_IMAGE} is missing (scripts/build-test-images makes it)"
    return None


@pytest.fixture
def containers() -> Callable[..., list[str]]:
    """``containers(profile, running_only=False)``: names of its managed containers."""
    return docker_containers


@pytest.fixture
def wait_until() -> Callable[..., bool]:
    """``wait_until(predicate, timeout)``: poll until true; returns the last value.
    For conditions reached by background threads, never for timing assertions."""

    def wait(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    return wait


@pytest.fixture
def docker_profile(profile: str) -> Iterator[str]:
    """The test's profile, after checking that Docker and the Docker plugin can run;
    every container and workspace volume of this profile is removed at teardown, even on
    failure.

    The plugin not being importable yet skips; Docker missing skips locally and fails
    under ``CI=true``."""
    try:
        importlib.import_module("envlayer_docker.backend")
    except ImportError as exc:
        pytest.skip(f"the Docker plugin is not importable yet: {exc}")
    problem = _docker_problem()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"Docker is required under CI=true: {problem}")
        pytest.skip(problem)
    try:
        yield profile
    finally:
        names = docker_containers(profile)
        if names:
            _docker("rm", "-f", *names)
        volumes = _docker("volume", "ls", "-q", "--filter", f"label=envlayer.profile={profile}").stdout.split()
        if volumes:
            _docker("volume", "rm", "-f", *volumes)


@pytest.fixture
def test_image(docker_profile: str) -> str:
    """The local Docker image the tests run (checked by ``docker_profile``)."""
    return TEST_IMAGE


@pytest.fixture
def docker_settings(make_settings: Callable[..., Settings], docker_profile: str) -> Settings:
    """The Docker backend on the test image, in the test's profile."""
    return make_settings(backend="docker", profile=docker_profile, backend_options={"image": TEST_IMAGE})
