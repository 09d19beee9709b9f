"""Starting and stopping the fake Daytona API, and running child interpreters, for the tests.

Shared by ``conftest.py`` and the test modules (imported by name: the tests directory is
put on ``sys.path`` by ``conftest.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlayer.testing import fixtures

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
FAKE = Path(__file__).with_name("fake_daytona.py")
FAKE_KEY = "envlayer-fake-key"


@dataclass
class FakeDaytona:
    """A running fake: its URL, PID, instance label and route log."""

    url: str
    pid: int
    instance: str
    route_log: Path
    proc: subprocess.Popen[bytes]

    def mark(self) -> int:
        """A position in the route log (after its last whole line); pass it to :meth:`routes_since`."""
        data = self.route_log.read_bytes()
        return data.rfind(b"\n") + 1

    def entries_since(self, mark: int) -> list[dict[str, Any]]:
        """Every request logged since ``mark`` (a last line still being written is left out)."""
        with self.route_log.open("rb") as fh:
            fh.seek(mark)
            lines = fh.read().decode().split("\n")[:-1]
            return [json.loads(line) for line in lines if line.strip()]

    def routes_since(self, mark: int) -> set[str]:
        """The names of the routes requested since ``mark`` (``unknown`` for unserved ones),
        without the SDK's event websocket attempts (``socket.io``), which its background
        thread retries at its own pace whatever the plugin does."""
        return {e["route"] for e in self.entries_since(mark)} - {"socket.io"}

    def _post(self, route: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            self.url.removesuffix("/api") + route,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {FAKE_KEY}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=120) as answer:
            assert answer.status == 200, answer.read()

    def advance_clock(self, minutes: float) -> None:
        """Move a ``manual_clock`` fake's lifecycle clock ``minutes`` Daytona minutes forward;
        auto-stop, auto-delete and TTL have been applied at the new time when this returns."""
        self._post("/fake/clock", {"advanceMinutes": minutes})

    def hold(
        self,
        sandbox: str,
        state: str,
        *,
        then: str | None = None,
        seconds: float | None = None,
        refusals: int = 0,
        **extra: Any,
    ) -> None:
        """Put ``sandbox`` (id or name) in ``state`` now; with ``then``, a state change to
        ``then`` is under way (the API answers 409 to start, stop and delete) until
        ``seconds`` have passed or ``refusals`` requests were refused, whichever is first
        (neither: until the next hold). ``extra`` sets ``recoverable`` / ``errorReason``."""
        body = {"sandbox": sandbox, "state": state, "then": then, "seconds": seconds, "refusals": refusals, **extra}
        self._post("/fake/hold", body)

    def build_next(self, seconds: float, count: int = 1) -> None:
        """The next ``count`` creates from an image stay ``pending_build`` for ``seconds``."""
        self._post("/fake/build", {"seconds": seconds, "count": count})

    def set_snapshot_created(self, snapshot: str, created: str) -> None:
        """Set snapshot ``snapshot``'s (id or name) creation time, ``createdAt``, to
        ``created`` (ISO 8601), as if it had been taken then."""
        self._post("/fake/snapshot-created", {"snapshot": snapshot, "createdAt": created})

    def fail_next(self, route: str, count: int, status: int = 429, retry_after: float | None = None) -> None:
        """Answer the next ``count`` requests of ``route`` (a route-log name: ``create``,
        ``get``, ``list``, ``delete``...) with ``status`` (429, 502, 503 or 504), with a
        ``Retry-After`` header when ``retry_after`` is given."""
        self._post("/fake/faults", {"route": route, "count": count, "status": status, "retryAfter": retry_after})

    def delay_next(self, route: str, count: int, seconds: float) -> None:
        """Serve the next ``count`` requests of ``route`` only after ``seconds`` (a stalled
        network or proxy: the client's own timeout decides whether it waits)."""
        self._post("/fake/faults", {"route": route, "count": count, "delay": seconds})


def start_fake(tmp: Path, *, minute_seconds: float = 60.0, max_cpu: int = 0, manual_clock: bool = False) -> FakeDaytona:
    """Start a fake Daytona API process; the caller stops it with :func:`stop_fake`. With
    ``manual_clock`` its lifecycle clock moves only through :meth:`FakeDaytona.advance_clock`."""
    instance = uuid.uuid4().hex[:12]
    port_file, route_log = tmp / f"port-{instance}", tmp / f"routes-{instance}.jsonl"
    route_log.touch()
    argv = [
        sys.executable,
        str(FAKE),
        "--port-file",
        str(port_file),
        "--route-log",
        str(route_log),
        "--minute-seconds",
        str(minute_seconds),
        "--max-cpu",
        str(max_cpu),
        "--instance",
        instance,
        "--parent-pid",
        str(os.getpid()),
        *(["--manual-clock"] if manual_clock else []),
    ]
    log = (tmp / f"fake-{instance}.log").open("wb")
    # Its own session: a SIGKILL of the test run's process group leaves it alive to see its
    # parent gone (--parent-pid) and remove its containers.
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    deadline = time.monotonic() + 120  # a loaded machine imports slowly; a crash is seen at once
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the fake Daytona API did not start: {(tmp / f'fake-{instance}.log').read_text()}")
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port_file.read_text()}/api"
    return FakeDaytona(url=url, pid=proc.pid, instance=instance, route_log=route_log, proc=proc)


def stop_fake(fake: FakeDaytona) -> None:
    """Stop the fake by its PID (SIGTERM, then SIGKILL after 20 s) and remove any container
    it left behind."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(fake.pid, signal.SIGTERM)
    try:
        fake.proc.wait(20)
    except subprocess.TimeoutExpired:
        os.kill(fake.pid, signal.SIGKILL)
        fake.proc.wait(10)
    import docker

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    for summary in api.containers(all=True, filters={"label": f"envlayer-fake-daytona={fake.instance}"}):
        with contextlib.suppress(Exception):
            api.remove_container(summary["Id"], force=True)


def child_code(url: str, task: str, profile: str, **opts: Any) -> str:
    """Python source that builds ``env`` for (profile, task) in a child process."""
    opts.setdefault("api_url", url)
    opts.setdefault("snapshot", IMAGE)
    opts.setdefault("timeout", 60)
    opts.setdefault("cwd", "/workspace")
    return (
        "from envlayer_daytona.backend import DaytonaEnvironment\n"
        "from envlayer_daytona.options import DaytonaOptions\n"
        f"env = DaytonaEnvironment(DaytonaOptions(**{opts!r}), task_id={task!r}, profile={profile!r})\n"
    )


def run_python(code: str, *, timeout: float = 120, wait: bool = True) -> Any:
    """Run ``code`` in a new interpreter of this venv (with the fake's key in its environment).
    Returns its stdout (asserting exit 0), or the Popen with ``wait=False``."""
    env = {**os.environ, "DAYTONA_API_KEY": FAKE_KEY}
    return fixtures.run_in_new_interpreter(code, timeout=timeout, wait=wait, env=env)
