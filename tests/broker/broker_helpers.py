"""Helpers of the session broker's tests: run ``envlayer`` against a private runtime
directory, wait for conditions, inspect processes."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlayer.cli.broker.control import alive, running_brokers
from envlayer.testing.secrets import ENVLAYER_SCRIPT

__all__ = ["WAIT", "BrokerRun", "alive", "descendants", "processes_with", "wait_until"]

WAIT = 60.0
"""Seconds a test waits for a condition that must come (never a measured duration)."""


def wait_until(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``check`` until it returns something true; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s")
        time.sleep(0.05)


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line holds ``marker`` (any namespace)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read() and alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                continue
    return found


class BrokerRun:
    """``envlayer`` run as a real process against a private runtime directory."""

    def __init__(self, root: Path) -> None:
        self.runtime = tempfile.mkdtemp(prefix="elb-", dir="/tmp")
        self.profile = f"brokertest-{uuid.uuid4().hex[:8]}"
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
        self.env.update(ENVLAYER_RUNTIME_DIR=self.runtime, ENVLAYER_PROFILE=self.profile)

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self.env, **(extra or {})}

    def run(
        self, *args: str, stdin: bytes | str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``envlayer *args``; text output."""
        data = stdin.encode() if isinstance(stdin, str) else stdin
        proc = subprocess.run(
            [ENVLAYER_SCRIPT, *args],
            input=data,
            capture_output=True,
            timeout=120,
            cwd=cwd or self.workdir,
            env=self.environ(env),
        )
        return subprocess.CompletedProcess(
            proc.args, proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        )

    def popen(self, *args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[bytes]:
        """``envlayer *args`` started, stdout and stderr piped."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen([ENVLAYER_SCRIPT, *args], cwd=self.workdir, env=self.environ(env), **kw)

    def broker_pids(self) -> list[int]:
        """Pids of the brokers running in the runtime directory (from their locked pid files)."""
        return running_brokers(self.runtime)

    def sockets(self) -> list[str]:
        return glob.glob(os.path.join(self.runtime, "broker-*.sock"))

    def log(self) -> str:
        return "".join(Path(p).read_text(errors="replace") for p in glob.glob(os.path.join(self.runtime, "*.log")))

    def close(self) -> None:
        """Stop the brokers (``envlayer broker stop``), then kill any still running with
        everything below it (pids from locked pid files only: stale ones may be anyone's)."""
        if os.path.isdir(self.runtime) and self.broker_pids():
            subprocess.run([ENVLAYER_SCRIPT, "broker", "stop"], env=self.environ(), capture_output=True, timeout=120)
        for pid in self.broker_pids():
            for child in descendants(pid):
                _kill(child)
            _kill(pid)
        shutil.rmtree(self.runtime, ignore_errors=True)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
