"""Start and stop the fake Modal server (``server.py`` beside this file) as a separate
process, for the tests and the benchmark.

``start()`` picks a free 127.0.0.1 port (the server binds port 0 and reports it), waits
until it listens and returns a :class:`FakeModal`; ``stop()`` sends SIGTERM to its PID (the
server then removes every container and snapshot image it made), escalates to SIGKILL after
a grace period and, if it had to, removes them itself by the server's run label; then it removes
the fake's working directory (port file, RPC log, stderr).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
LABEL = "envlayer-fake-modal"


@dataclass
class FakeModal:
    """A running fake: its URL, PID, run id and the RPC log it appends to."""

    url: str
    pid: int
    run_id: str
    log_path: str
    workdir: str
    proc: subprocess.Popen[bytes]

    def env(self, token_id: str = "ak-envlayer-tests") -> dict[str, str]:
        """Variables that point the modal SDK at this fake (``token_id`` names the caller
        in the RPC log)."""
        return {
            "MODAL_SERVER_URL": self.url,
            "MODAL_TOKEN_ID": token_id,
            "MODAL_TOKEN_SECRET": "as-envlayer-tests",
            "MODAL_CONFIG_PATH": os.path.join(self.workdir, "modal.toml"),
        }

    def calls(self, who: str | None = None) -> list[dict[str, object]]:
        """Every RPC logged so far (of caller ``who`` when given)."""
        with open(self.log_path) as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        return [r for r in records if who is None or r["who"] == who]

    def rpcs(self, who: str) -> set[str]:
        """The set of RPC names caller ``who`` used."""
        return {str(r["rpc"]) for r in self.calls(who)}

    def unimplemented(self) -> list[dict[str, object]]:
        """Calls the fake answered UNIMPLEMENTED."""
        return [r for r in self.calls() if r["unimplemented"]]

    @property
    def faults_path(self) -> str:
        return os.path.join(self.workdir, "faults.json")

    def set_faults(self, **faults: object) -> None:
        """Switch failure modes on (see ``server.Faults``: ``ended_router_status``,
        ``fail_next``); ``set_faults()`` switches every one off. Atomic: the server
        reads the whole new text on its next RPC."""
        tmp = self.faults_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({**faults, "_set_at": time.monotonic_ns()}, fh)
        os.replace(tmp, self.faults_path)

    def containers(self) -> list[str]:
        """Ids of the containers this fake made that still exist."""
        out = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={LABEL}={self.run_id}"], capture_output=True, text=True
        ).stdout
        return out.split()

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, wait, SIGKILL if needed; then make sure no container of it is left and
        remove its working directory (read :meth:`calls` before this)."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(5)
        leftover = self.containers()
        if leftover:
            subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True)
        images = subprocess.run(
            ["docker", "images", "-aq", "--filter", f"label={LABEL}={self.run_id}"], capture_output=True, text=True
        ).stdout.split()
        if images:  # snapshot images of a server that had to be killed
            subprocess.run(["docker", "rmi", "-f", *set(images)], capture_output=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start(*, page_size: int = 5, extra_env: Iterable[tuple[str, str]] = (), timeout: float = 120.0) -> FakeModal:
    """Start a fake server; raises RuntimeError when it does not come up in ``timeout``."""
    workdir = tempfile.mkdtemp(prefix="envlayer-fake-modal-")
    port_file = os.path.join(workdir, "port.json")
    log_path = os.path.join(workdir, "rpc.log")
    open(log_path, "w").close()
    open(os.path.join(workdir, "modal.toml"), "w").close()
    stderr = open(os.path.join(workdir, "server.err"), "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [
            sys.executable,
            SERVER,
            "--port-file",
            port_file,
            "--log",
            log_path,
            "--page-size",
            str(page_size),
            "--parent-pid",
            str(os.getpid()),
            "--faults",
            os.path.join(workdir, "faults.json"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=stderr,
        stderr=stderr,
        env={**os.environ, **dict(extra_env)},
    )
    end = time.monotonic() + timeout
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            proc.wait()
            with open(os.path.join(workdir, "server.err"), errors="replace") as fh:
                err = fh.read()[-2000:]
            shutil.rmtree(workdir, ignore_errors=True)
            raise RuntimeError(f"the fake Modal server did not start: {err}")
        time.sleep(0.02)
    with open(port_file) as fh:
        info = json.load(fh)
    return FakeModal(f"http://127.0.0.1:{info['port']}", proc.pid, info["run_id"], log_path, workdir, proc)
