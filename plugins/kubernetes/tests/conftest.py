"""Fixtures for the Kubernetes backend tests: the real ``kubernetes`` client against the
fake API server of ``fake_apiserver.py``, whose pods are Docker containers.

* ``fake_apiserver`` (session): starts the fake as a separate process on a free loopback
  port, writes a kubeconfig pointing at it, and at the end stops it by PID (SIGTERM, then
  SIGKILL) and removes every container it made (by its instance label), even when tests
  fail. ``routes()`` reads the routes it served; unknown routes are recorded as ``UNKNOWN``.
* No Docker daemon or no test image: with ``CI=true`` the tests fail saying what is
  missing; otherwise they are skipped with a hint.
* Every pod carries a profile starting with ``k8s-test-<uuid8>`` (unique per session).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
PROFILE = f"k8s-test-{uuid.uuid4().hex[:8]}"
NAMESPACE = "envlayer-test"
SERVER = Path(__file__).with_name("fake_apiserver.py")
FAKE_LABEL = "envlayer-fake-apiserver"


def docker_problem() -> str | None:
    """Why the fake cannot run here (no daemon, no image), or None."""
    try:
        import docker
        from docker.errors import ImageNotFound

        api = docker.APIClient(version="auto", timeout=10, **docker.utils.kwargs_from_env())
        api.ping()
    except Exception as exc:
        return f"no Docker daemon answers ({type(exc).__name__}: {str(exc)[:200]})"
    try:
        api.inspect_image(IMAGE)
    except ImageNotFound:
        return f"the test image {IMAGE} is missing"
    return None


@dataclass
class FakeApiServer:
    """A running fake API server process."""

    proc: subprocess.Popen[bytes]
    instance: str
    port: int
    kubeconfig: str
    log_path: str
    stderr_path: str

    def routes(self) -> list[dict[str, Any]]:
        """Every request served so far: ``{"method", "route", "status", "path"}``."""
        with open(self.log_path) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def route_set(self) -> set[tuple[str, str]]:
        return {(r["method"], r["route"]) for r in self.routes()}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        remove_containers(self.instance)


def remove_containers(instance: str) -> list[str]:
    """Force-remove every container made by the fake ``instance``."""
    import docker

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    removed = []
    for summary in api.containers(all=True, filters={"label": f"{FAKE_LABEL}={instance}"}):
        try:
            api.remove_container(summary["Id"], force=True, v=True)
            removed.append(summary["Id"][:12])
        except Exception:
            pass
    return removed


def write_kubeconfig(path: str, port: int, namespace: str) -> None:
    text = textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Config
        clusters:
        - name: fake
          cluster:
            server: http://127.0.0.1:{port}
        users:
        - name: fake
          user:
            token: fake-token
        contexts:
        - name: fake
          context:
            cluster: fake
            user: fake
            namespace: {namespace}
        - name: other-namespace
          context:
            cluster: fake
            user: fake
            namespace: {namespace}-other
        current-context: fake
        """
    )
    with open(path, "w") as fh:
        fh.write(text)


def start_fake(workdir: str, *, protocols: str | None = None) -> FakeApiServer:
    """Start a fake API server process; wait until it listens (up to 30 s)."""
    instance = uuid.uuid4().hex[:10]
    port_file = os.path.join(workdir, f"port-{instance}")
    log_path = os.path.join(workdir, f"routes-{instance}.jsonl")
    stderr_path = os.path.join(workdir, f"stderr-{instance}.log")
    argv = [sys.executable, str(SERVER), "--instance", instance, "--port-file", port_file, "--log", log_path]
    if protocols:
        argv += ["--protocols", protocols]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=err, stderr=err, stdin=subprocess.DEVNULL)
    end = time.monotonic() + 30
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise RuntimeError(f"the fake API server did not start:\n{Path(stderr_path).read_text()[-2000:]}")
        time.sleep(0.05)
    port = int(Path(port_file).read_text())
    kubeconfig = os.path.join(workdir, f"kubeconfig-{instance}")
    write_kubeconfig(kubeconfig, port, NAMESPACE)
    return FakeApiServer(proc, instance, port, kubeconfig, log_path, stderr_path)


@pytest.fixture(scope="session")
def fake_workdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="envlayer-k8s-fake-") as tmp:
        yield tmp


def _require_docker() -> None:
    problem = docker_problem()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Kubernetes fake tests cannot run: {problem}. Run scripts/provision first.", pytrace=False)
        pytest.skip(f"{problem}; run scripts/provision (starts dockerd, builds {IMAGE}) to enable these tests")


@pytest.fixture(scope="session")
def fake_apiserver(fake_workdir: str) -> Iterator[FakeApiServer]:
    """The session's fake API server (v5 and v4 offered; the client picks v5)."""
    _require_docker()
    server = start_fake(fake_workdir)
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
    server = start_fake(fake_workdir, protocols="v4.channel.k8s.io")
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
    """``make_env(task=None, prof=None, **options)``; every environment it made is deleted
    at the end of the test."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    made: list[KubernetesEnvironment] = []

    def make(task: str | None = None, prof: str | None = None, **kw: Any) -> KubernetesEnvironment:
        env = KubernetesEnvironment(options(**kw), task_id=task or f"t-{uuid.uuid4().hex[:8]}", profile=prof or profile)
        made.append(env)
        return env

    yield make
    for env in made:
        env.cleanup(force_remove=True)
    for env in made:
        env.wait_for_cleanup(30)


def _run_python(code: str, *, timeout: float = 120, wait: bool = True) -> Any:
    """Run ``code`` in a new interpreter of this venv; its stdout (asserting exit 0), or
    the Popen with ``wait=False``."""
    argv = [sys.executable, "-c", textwrap.dedent(code)]
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
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


@pytest.fixture
def namespace() -> str:
    """The namespace of the kubeconfig's current context (``<namespace>-other`` is the
    namespace of its ``other-namespace`` context)."""
    return NAMESPACE


@pytest.fixture
def core(fake_apiserver: FakeApiServer) -> Any:
    """A plain ``CoreV1Api`` on the fake, for checking what the backend did."""
    from kubernetes import config
    from kubernetes.client import CoreV1Api

    return CoreV1Api(config.new_client_from_config(config_file=fake_apiserver.kubeconfig))
