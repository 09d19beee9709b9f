"""Starting and stopping the fake API server (``fake_apiserver.py``) from tests and
benchmarks: a separate process on a free loopback port, a kubeconfig pointing at it, the
routes it served; stopped by PID (SIGTERM, then SIGKILL), its containers removed by label.

Also the certificates of an HTTPS fake (:func:`write_ca`, :func:`write_server_cert`), and the
multi-process scale run shared by the scale test and ``benchmarks/kubernetes_scale.py``.

Loaded by file path (``importlib``, from conftest and the benchmark): the tests directory
is not a package.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
NAMESPACE = "envlayer-test"
SERVER = Path(__file__).with_name("fake_apiserver.py")
FAKE_LABEL = "envlayer-fake-apiserver"


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
        """Every request served so far: ``{"method", "route", "status", "path"}`` (a last
        line the server is still writing, without its newline yet, is left for the next call)."""
        with open(self.log_path) as fh:
            return [json.loads(line) for line in fh if line.endswith("\n") and line.strip()]

    def route_set(self) -> set[tuple[str, str]]:
        return {(r["method"], r["route"]) for r in self.routes()}

    def set_faults(self, **faults: Any) -> None:
        """Make the fake fail its next requests (fields of ``fake_apiserver.Faults``:
        ``status``, ``count``, ``retry_after``, ``routes``, ``stall``); ``set_faults()``
        clears them."""
        self._control("faults", faults)

    def set_namespace(self, namespace: str, **policy: Any) -> None:
        """Admission policy of ``namespace``: ``pod_security="restricted"``, ``max_pods=N``;
        no arguments clear it."""
        self._control(f"namespaces/{namespace}", policy)

    def blackhole_open_execs(self) -> None:
        """Every exec websocket open now goes silent both ways (a dropped connection that
        nobody closed); new ones work."""
        self._control("blackhole", {})

    def age_pod(self, pod: str, seconds: float, namespace: str = NAMESPACE) -> None:
        """Move ``pod``'s clock ``seconds`` forward: an ``activeDeadlineSeconds`` that then
        has passed ends the pod now (the test, not the machine's speed, decides when)."""
        self._control(f"pods/{namespace}/{pod}/age", {"seconds": seconds})

    def _control(self, route: str, body: dict[str, Any]) -> None:
        import urllib.request

        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/_fake/{route}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as answer:
            answer.read()

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


def write_kubeconfig(
    path: str, port: int, namespace: str, *, token: str = "fake-token", ca_file: str | None = None
) -> None:
    """A kubeconfig for the fake on ``port``; with ``ca_file``, over HTTPS trusting that CA."""
    scheme = "https" if ca_file else "http"
    trust = f"\n            certificate-authority: {ca_file}" if ca_file else ""
    text = textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Config
        clusters:
        - name: fake
          cluster:
            server: {scheme}://127.0.0.1:{port}{trust}
        users:
        - name: fake
          user:
            token: {token}
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


def write_ca(directory: Path, name: str) -> tuple[Path, object, object]:
    """A self-signed CA: its certificate file, certificate and key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def write_server_cert(directory: Path, ca_cert: object, ca_key: object) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by the CA, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def start_fake(workdir: str, *, protocols: str | None = None, tls: tuple[str, str, str] | None = None) -> FakeApiServer:
    """Start a fake API server process; wait until it listens (up to 30 s). ``tls``:
    (certificate, key, CA file the kubeconfig trusts) to serve HTTPS."""
    instance = uuid.uuid4().hex[:10]
    port_file = os.path.join(workdir, f"port-{instance}")
    log_path = os.path.join(workdir, f"routes-{instance}.jsonl")
    stderr_path = os.path.join(workdir, f"stderr-{instance}.log")
    argv = [sys.executable, str(SERVER), "--instance", instance, "--port-file", port_file, "--log", log_path]
    argv += ["--parent-pid", str(os.getpid())]
    if protocols:
        argv += ["--protocols", protocols]
    if tls:
        argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=err, stderr=err, stdin=subprocess.DEVNULL)
    end = time.monotonic() + 120  # a loaded machine imports slowly; a crash is seen at once
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise RuntimeError(f"the fake API server did not start:\n{Path(stderr_path).read_text()[-2000:]}")
        time.sleep(0.05)
    port = int(Path(port_file).read_text())
    kubeconfig = os.path.join(workdir, f"kubeconfig-{instance}")
    write_kubeconfig(kubeconfig, port, NAMESPACE, ca_file=tls[2] if tls else None)
    return FakeApiServer(proc, instance, port, kubeconfig, log_path, stderr_path)


@contextmanager
def running_fake(**kw: Any) -> Iterator[FakeApiServer]:
    """A fake API server in a temporary directory for the block (benchmarks); stopped and
    its containers removed after, whatever happens. ``kw`` go to :func:`start_fake`."""
    with tempfile.TemporaryDirectory(prefix="envlayer-k8s-bench-") as tmp:
        server = start_fake(tmp, **kw)
        try:
            yield server
        finally:
            server.stop()


SCALE_WORKER = """
import sys, time
from envlayer.errors import BackendUnavailable, SandboxFileNotFound
from envlayer_kubernetes.backend import KubernetesEnvironment
from envlayer_kubernetes.options import KubernetesOptions
kubeconfig, profile, image, deadline = sys.argv[1:5]
opts = KubernetesOptions(image=image, kubeconfig=kubeconfig, timeout=60, startup_timeout=120,
                         active_deadline=int(deadline), exec_mode="oneshot")
expired = 0
for task in sys.argv[5:]:
    begun = time.monotonic()
    env = KubernetesEnvironment(opts, task_id=task, profile=profile)
    try:
        echoed = env.exec(["echo", task])
        assert echoed.stdout.decode() == task + "\\n", (task, echoed)
        env.write_file("task.txt", task)
        read = env.read_file("task.txt")
        assert read == task.encode(), (task, read)
    except (BackendUnavailable, SandboxFileNotFound) as exc:
        if time.monotonic() - begun < int(deadline):
            raise
        expired += 1
        print("deadline may have ended the pod of", task, "mid-task:", repr(exc)[:300], file=sys.stderr)
    env.cleanup()
print("done", len(sys.argv) - 5, "expired", expired)
"""
"""Child program of :func:`run_scale`: create, use (exec, write, read) and leave (persist
mode) the pods of the tasks named on its command line. The pods' ``active_deadline`` may
end one mid-task on a loaded machine: then, and only then (the task began at least that
long ago, so its pod may have reached it), the documented error of a command whose pod
ended (:class:`BackendUnavailable`, or :class:`SandboxFileNotFound` from the pod that
replaced it) is counted as ``expired`` instead of failing. Wrong output never is."""


def child_environ() -> dict[str, str]:
    """The environment for child interpreters: this one's, but with bytecode caching on
    (``PYTHONDONTWRITEBYTECODE`` removed), as in a normal installation. Without it every
    child compiles the ``kubernetes`` client from source: about 5 s of CPU each."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class ScaleRun:
    """What :func:`run_scale` measured (seconds) and counted."""

    tasks: int
    processes: int
    create_and_use: float
    until_ended: float
    reap: float
    until_gone: float
    reaped: int
    left: int
    expired: int


def run_scale(
    server: FakeApiServer, profile: str, *, tasks: int, processes: int, deadline: int, age_past_deadline: bool = False
) -> ScaleRun:
    """``tasks`` tasks created and used from ``processes`` processes (persist mode, pods
    with ``active_deadline = deadline``); then wait until every pod has ended, reap them
    all with ``reap_orphans(max_age=0)`` and wait until none is left. With
    ``age_past_deadline`` every pod's clock is moved ``deadline`` seconds forward once all
    are used (:meth:`FakeApiServer.age_pod`), so the deadline ends them now instead of
    after waiting it out (the benchmark measures the real wait)."""
    from envlayer_kubernetes import sweep
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.client import connect
    from envlayer_kubernetes.options import KubernetesOptions

    names = [f"scale-{i:03d}" for i in range(tasks)]
    shares = [names[i::processes] for i in range(processes)]
    start = time.monotonic()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SCALE_WORKER, server.kubeconfig, profile, IMAGE, str(deadline), *share],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_environ(),
        )
        for share in shares
        if share
    ]
    failures = []
    expired = 0
    for child in children:
        out, err = child.communicate(timeout=1800)
        if child.returncode != 0:
            failures.append(err[-2000:])
        else:
            expired += int(out.split()[-1])
    if failures:
        raise AssertionError("scale workers failed:\n" + "\n".join(failures))
    created = time.monotonic()
    opts = KubernetesOptions(image=IMAGE, kubeconfig=server.kubeconfig)
    cluster = connect(opts)
    if age_past_deadline:
        for pod in sweep.list_managed(cluster, opts, profile=profile):
            server.age_pod(pod.metadata.name, deadline, pod.metadata.namespace)
    while any(p.status.phase == "Running" for p in sweep.list_managed(cluster, opts, profile=profile)):
        time.sleep(0.5)
    ended = time.monotonic()
    reaped = KubernetesEnvironment.reap_orphans(profile=profile, max_age=0, dry_run=False, options=opts)
    reaped_at = time.monotonic()
    left = sweep.list_managed(cluster, opts, profile=profile)
    give_up = time.monotonic() + 120
    while left and time.monotonic() < give_up:
        time.sleep(0.2)
        left = sweep.list_managed(cluster, opts, profile=profile)
    return ScaleRun(
        tasks=tasks,
        processes=processes,
        create_and_use=created - start,
        until_ended=ended - created,
        reap=reaped_at - ended,
        until_gone=time.monotonic() - reaped_at,
        reaped=len(reaped),
        left=len(left),
        expired=expired,
    )


@dataclass
class ThreadStorm:
    """What :func:`run_thread_storm` counted: execs done, environments created and
    removed, and every error (``"<where>: <error>"``)."""

    execs: int
    lifecycles: int
    errors: list[str]
    seconds: float


def run_thread_storm(
    server: FakeApiServer,
    profile: str,
    *,
    exec_threads: int,
    execs_per_thread: int,
    lifecycle_threads: int,
    lifecycles_per_thread: int,
) -> ThreadStorm:
    """In THIS process: ``exec_threads`` threads each run ``execs_per_thread`` one-shot
    execs (``echo``, output checked) in one shared environment while ``lifecycle_threads``
    threads each create, use and force-remove ``lifecycles_per_thread`` private
    environments: every REST call of the lifecycle threads (create, status polls, delete)
    overlaps exec websocket handshakes on the same process's client. Every exception is
    counted as an error; nothing is left (the shared environment is removed at the end)."""
    import threading

    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.options import KubernetesOptions

    def opts(**kw: Any) -> KubernetesOptions:
        return KubernetesOptions(
            image=IMAGE, kubeconfig=server.kubeconfig, timeout=60, startup_timeout=120, exec_mode="oneshot", **kw
        )

    errors: list[str] = []
    counts = {"execs": 0, "lifecycles": 0}
    lock = threading.Lock()

    def failed(where: str, exc: BaseException) -> None:
        with lock:
            errors.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")

    shared = KubernetesEnvironment(opts(), task_id=f"storm-{uuid.uuid4().hex[:6]}", profile=profile)

    def execs(n: int) -> None:
        for i in range(execs_per_thread):
            try:
                result = shared.exec(["echo", f"{n}-{i}"])
                assert result.exit_code == 0 and result.stdout == f"{n}-{i}\n".encode(), result
                with lock:
                    counts["execs"] += 1
            except Exception as exc:
                failed(f"exec {n}-{i}", exc)

    def lifecycles(n: int) -> None:
        for i in range(lifecycles_per_thread):
            env = None
            try:
                env = KubernetesEnvironment(
                    opts(persist_across_processes=False), task_id=f"life-{n}-{i}", profile=profile
                )
                env.cleanup(force_remove=True)
                if not env.wait_for_cleanup(60):
                    raise AssertionError(f"pod {env.pod_name} still there 60 s after cleanup")
                with lock:
                    counts["lifecycles"] += 1
            except Exception as exc:
                failed(f"lifecycle {n}-{i}", exc)
                if env is not None:
                    env.cleanup(force_remove=True)

    start = time.monotonic()
    threads = [threading.Thread(target=execs, args=(n,)) for n in range(exec_threads)]
    threads += [threading.Thread(target=lifecycles, args=(n,)) for n in range(lifecycle_threads)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        shared.cleanup(force_remove=True)
        shared.wait_for_cleanup(60)
    return ThreadStorm(counts["execs"], counts["lifecycles"], errors, time.monotonic() - start)
