"""Fixtures for the Kubernetes backend tests: the real ``kubernetes`` client against the
fake API server of ``fake_apiserver.py``, whose pods are Docker containers.

* ``fake_apiserver`` (session): starts the fake as a separate process on a free loopback
  port (see ``fake_control.py``), writes a kubeconfig pointing at it, and at the end stops
  it by PID and removes every container it made (by its instance label), even when tests
  fail. ``routes()`` reads the routes it served; unknown routes are recorded as ``UNKNOWN``.
* No Docker daemon or no test image: with ``CI=true`` the tests fail saying what is
  missing; otherwise they are skipped with a hint.
* Every pod carries a profile starting with ``k8s-test-<uuid8>`` (unique per session).
"""

from __future__ import annotations

import functools
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.testing.fixtures import (
    EnvironmentFactory,
    import_by_path,
    options_factory,
    require_docker,
    run_in_new_interpreter,
)

fake_control: Any = import_by_path(Path(__file__).with_name("fake_control.py"), "envlayer_k8s_fake_control")
FakeApiServer = fake_control.FakeApiServer
IMAGE = fake_control.IMAGE
NAMESPACE = fake_control.NAMESPACE
PROFILE = f"k8s-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def fake_workdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="envlayer-k8s-fake-") as tmp:
        yield tmp


def _require_docker() -> None:
    require_docker(IMAGE, "the Kubernetes fake tests")


@pytest.fixture(scope="session")
def fake_apiserver(fake_workdir: str) -> Iterator[FakeApiServer]:
    """The session's fake API server (v5 and v4 offered; the client picks v5)."""
    _require_docker()
    server = fake_control.start_fake(fake_workdir)
    try:
        yield server
    finally:
        from envlayer_kubernetes.backend import KubernetesEnvironment

        KubernetesEnvironment.wait_for_all_cleanups(30)
        server.stop()


@pytest.fixture(scope="session")
def fake_apiserver_v4(fake_workdir: str) -> Iterator[FakeApiServer]:
    """A second fake that speaks only ``v4.channel.k8s.io`` (cannot close stdin)."""
    _require_docker()
    server = fake_control.start_fake(fake_workdir, protocols="v4.channel.k8s.io")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def profile(fake_apiserver: FakeApiServer) -> str:
    return PROFILE


@pytest.fixture
def options(fake_apiserver: FakeApiServer) -> Callable[..., Any]:
    """Build KubernetesOptions for the session's fake and the test image."""
    from envlayer_kubernetes.options import KubernetesOptions

    return options_factory(
        KubernetesOptions, image=IMAGE, timeout=60, kubeconfig=fake_apiserver.kubeconfig, startup_timeout=60
    )


@pytest.fixture
def make_env(profile: str, options: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``make_env(task=None, prof=None, from_snapshot=None, **options)``; every environment
    it made is deleted at the end of the test."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    factory = EnvironmentFactory(KubernetesEnvironment, options, profile)
    yield factory
    factory.remove_all()


def _child_env_code(kubeconfig: str, task: str, profile: str, **opts: Any) -> str:
    """Python source that builds ``env`` for (profile, task) in a child process."""
    opts.setdefault("image", IMAGE)
    opts.setdefault("timeout", 60)
    opts.setdefault("startup_timeout", 60)
    opts["kubeconfig"] = kubeconfig
    return (
        "from envlayer_kubernetes.backend import KubernetesEnvironment\n"
        "from envlayer_kubernetes.options import KubernetesOptions\n"
        f"env = KubernetesEnvironment(KubernetesOptions(**{opts!r}), task_id={task!r}, profile={profile!r})\n"
    )


@pytest.fixture
def run_python() -> Callable[..., Any]:
    """``run_python(code, timeout=120, wait=True)``: run code in a new venv interpreter
    (bytecode caching on, see ``fake_control.child_environ``)."""
    return functools.partial(run_in_new_interpreter, timeout=120, env=fake_control.child_environ())


@pytest.fixture
def child_env_code(fake_apiserver: FakeApiServer) -> Callable[..., str]:
    """``child_env_code(task, profile, **options)``: Python source building ``env`` in a child."""
    return lambda task, profile, **opts: _child_env_code(fake_apiserver.kubeconfig, task, profile, **opts)


@pytest.fixture(scope="session")
def control() -> Any:
    """The ``fake_control`` module (scale runs, starting extra fakes)."""
    return fake_control
