"""Test helper: many processes racing through the same code at the same moment.

:func:`race` runs ``prelude`` once in a new interpreter (imports: a backend's SDK can take
seconds to import), then forks ``count`` children from it. The children wait on one gate
and are released together, so they reach the backend at once instead of one import-time
apart; each runs ``body`` as a separate process with its own connections (a backend whose
clients are per process must build them after the fork, as ``os.register_at_fork`` does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

_DRIVER = r"""
import json, os, sys, tempfile, threading, traceback
shared = {"__name__": "__race__"}
exec(compile(sys.argv[1], "<prelude>", "exec"), shared)
if threading.active_count() != 1:
    sys.exit(f"the prelude started threads ({threading.enumerate()}); forking would copy their locks")
count, body = int(sys.argv[2]), compile(sys.argv[3], "<body>", "exec")
spool = tempfile.mkdtemp(prefix="envlayer-race-")
gate_read, gate_write = os.pipe()
sys.stdout.flush(); sys.stderr.flush()
pids = []
for n in range(count):
    pid = os.fork()
    if pid == 0:
        os.close(gate_write)
        for fd, name in ((1, "out"), (2, "err")):
            target = os.open(os.path.join(spool, f"{n}.{name}"), os.O_WRONLY | os.O_CREAT, 0o600)
            os.dup2(target, fd)
            os.close(target)
        status = 0
        try:
            os.read(gate_read, 1)  # returns b"" once the parent closes the gate: all go at once
            exec(body, {**shared, "RACER": n})
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(status)
    pids.append(pid)
os.close(gate_read)
os.close(gate_write)
results = []
for n, pid in enumerate(pids):
    _, wait_status = os.waitpid(pid, 0)
    texts = {}
    for name in ("out", "err"):
        path = os.path.join(spool, f"{n}.{name}")
        with open(path, errors="replace") as fh:
            texts[name] = fh.read()
        os.unlink(path)
    results.append({"status": os.waitstatus_to_exitcode(wait_status), "stdout": texts["out"], "stderr": texts["err"]})
os.rmdir(spool)
json.dump(results, sys.stdout)
"""


@dataclass(frozen=True)
class Racer:
    """One child's exit status (negative: killed by that signal) and output."""

    status: int
    stdout: str
    stderr: str


def race(
    prelude: str, body: str, count: int = 16, *, timeout: float = 300, env: Mapping[str, str] | None = None
) -> list[Racer]:
    """Run ``body`` in ``count`` processes released at the same moment, forked from one
    interpreter (this one's ``sys.executable``, environment ``env`` or this process's)
    that first ran ``prelude``. ``body`` sees the names ``prelude`` defined, and ``RACER``,
    the child's number.

    Returns every child's :class:`Racer` in order. Raises ``AssertionError`` (showing every
    failed child's stderr) when a child exits non-zero or the prelude fails or starts a
    thread, and ``subprocess.TimeoutExpired`` after ``timeout`` seconds (the driver and
    its children are killed first)."""
    argv = [sys.executable, "-c", _DRIVER, textwrap.dedent(prelude), str(count), textwrap.dedent(body)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise
    assert proc.returncode == 0, f"the race driver failed (exit {proc.returncode}):\n{err}"
    racers = [Racer(**fields) for fields in json.loads(out)]
    failed = [f"racer {n} exit {r.status}:\n{r.stderr}" for n, r in enumerate(racers) if r.status != 0]
    assert not failed, "\n".join(failed)
    return racers


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()
