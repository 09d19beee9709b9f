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

import importlib.util
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.testing.fixtures import EnvironmentFactory, require_docker


def _load_fake_control() -> Any:
    path = Path(__file__).with_name("fake_control.py")
    spec = importlib.util.spec_from_file_location("envlayer_k8s_fake_control", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fake_control = _load_fake_control()
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

    def make(**kw: Any) -> KubernetesOptions:
        kw.setdefault("image", IMAGE)
        kw.setdefault("timeout", 60)
        kw.setdefault("kubeconfig", fake_apiserver.kubeconfig)
        kw.setdefault("startup_timeout", 60)
        return KubernetesOptions(**kw)

    return make


@pytest.fixture
def make_env(profile: str, options: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``make_env(task=None, prof=None, from_snapshot=None, **options)``; every environment
    it made is deleted at the end of the test."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    factory = EnvironmentFactory(KubernetesEnvironment, options, profile)
    yield factory
    factory.remove_all()


def _run_python(code: str, *, timeout: float = 120, wait: bool = True) -> Any:
    """Run ``code`` in a new interpreter of this venv (bytecode caching on, see
    ``fake_control.child_environ``); its stdout (asserting exit 0), or the Popen with
    ``wait=False``."""
    argv = [sys.executable, "-c", textwrap.dedent(code)]
    env = fake_control.child_environ()
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


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
    """``run_python(code, timeout=120, wait=True)``: run code in a new venv interpreter."""
    return _run_python


@pytest.fixture
def child_env_code(fake_apiserver: FakeApiServer) -> Callable[..., str]:
    """``child_env_code(task, profile, **options)``: Python source building ``env`` in a child."""
    return lambda task, profile, **opts: _child_env_code(fake_apiserver.kubeconfig, task, profile, **opts)


@pytest.fixture(scope="session")
def control() -> Any:
    """The ``fake_control`` module (scale runs, starting extra fakes)."""
    return fake_control
