"""Hostile commands through the real ``envlayer`` command line, for any backend.

The conformance kit checks the API; these helpers run the installed ``envlayer exec`` as
a real process, the way an agent's harness does, so a backend can show that a flood
with a timeout and a real SIGINT during a flood end on time there too::

    from envlayer.testing.hostile import cli_flood, cli_interrupt_flood

    def test_cli_flood(tmp_path):
        run = cli_flood(["--backend", "mine"], cwd=tmp_path)
        assert run.returncode == 124

Both return a :class:`CliRun`; the flood's output is read and discarded as it comes. A
flood never ends by itself, so the documented exit code (124, or 130 after SIGINT) shows
the timeout or the signal ended it; a CLI that hangs is killed and returns -9.
``seconds`` is for reports and benchmarks: asserting a bound on it makes a test fail
whenever the machine is loaded.

Every flood runs at the lowest CPU priority (:data:`LOWEST_PRIORITY`): it still writes
without end, at full speed on an idle core, but it does not take the CPU from the tests
running beside it in a parallel run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENVLAYER = shutil.which("envlayer", path=os.path.dirname(sys.executable)) or "envlayer"
"""The ``envlayer`` script next to the running interpreter (else the one on PATH)."""


@dataclass(frozen=True)
class CliRun:
    """One CLI run: its exit code, how long it took (from the SIGINT, for
    :func:`cli_interrupt_flood`), the stdout bytes it wrote and the end of its stderr."""

    returncode: int
    seconds: float
    stdout_bytes: int
    stderr: str


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``ENVLAYER_*`` variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    env.update(extra or {})
    return env


LOWEST_PRIORITY = "renice -n 19 -p $$ >/dev/null 2>&1; "
"""Shell that gives the shell running it, and so every process it starts, the lowest CPU
priority (POSIX ``renice``; busybox has it). A flood then still never ends, and writes at
full speed on an idle core, which is all a flood check needs (a timeout, a cap or a signal
must end it), while the tests running beside it in a parallel run keep the CPU: at normal
priority a flood and its reader take two cores' fair share for as long as it lasts. Where
``renice`` is missing it says nothing and the flood runs at normal priority."""


def at_lowest_priority(flood: str) -> str:
    """``sh -c`` running the shell command ``flood`` at the lowest CPU priority (see
    :data:`LOWEST_PRIORITY`). Its own shell, so ``$$`` is the process reniced even where a
    backend runs commands in a subshell; ``exec`` it to keep the caller's pid."""
    return "sh -c " + shlex.quote(LOWEST_PRIORITY + flood)


_TAIL = 65536

HANG_SECONDS = 120.0
"""How long past its timeout (or after its SIGINT) a CLI run may take before it counts as
hung and is killed (exit -9). Far above any real figure (a few tenths of a second idle,
7 s for a SIGINT over SSH under 20 busy loops on 2 cores): only a hang reaches it."""


class _Drain:
    """Reads a pipe to its end on a thread, counting the bytes and keeping the last 64 KiB."""

    def __init__(self, pipe: object, started: threading.Event) -> None:
        self.count = 0
        self.tail = b""
        self.started = started
        self._pipe = pipe
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while chunk := os.read(self._pipe.fileno(), 1 << 20):  # type: ignore[attr-defined]
            self.count += len(chunk)
            self.tail = (self.tail + chunk)[-_TAIL:]
            self.started.set()
        self.started.set()


def make_sigint_deliverable() -> None:
    """Make SIGINT reach the processes this one starts from now on.

    A process started in the background by a non-interactive shell (``cmd &``, ``nohup
    cmd &``, many CI runners) inherits SIGINT *ignored*, its children too, and Python then
    leaves it ignored: a test's SIGINT would never reach the CLI and the run would end in
    a timeout instead of exit 130. If SIGINT is ignored here, this installs Python's
    default handler (KeyboardInterrupt), so children start with the default action;
    otherwise it changes nothing.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _spawn(
    options: Sequence[str], command: Sequence[str], *, env: Mapping[str, str] | None, cwd: Path | str | None
) -> tuple[subprocess.Popen[bytes], _Drain, _Drain]:
    proc = subprocess.Popen(
        [ENVLAYER, "exec", *options, "--", *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(env),
        cwd=cwd,
    )
    flowing = threading.Event()
    return proc, _Drain(proc.stdout, flowing), _Drain(proc.stderr, flowing)


def _finish(proc: subprocess.Popen[bytes], out: _Drain, err: _Drain, since: float, limit: float) -> CliRun:
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    seconds = time.monotonic() - since
    out.thread.join(5)
    err.thread.join(5)
    return CliRun(proc.returncode, seconds, out.count, err.tail.decode(errors="replace"))


def cli_flood(
    options: Sequence[str],
    *,
    flood: str = "yes",
    timeout: float = 1,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
) -> CliRun:
    """``envlayer exec OPTIONS --timeout T -- sh -c FLOOD``, FLOOD at the lowest CPU
    priority; ``seconds`` from the start. A process still running :data:`HANG_SECONDS`
    after its timeout is killed (exit -9)."""
    start = time.monotonic()
    proc, out, err = _spawn([*options, f"--timeout={timeout}"], ["sh", "-c", LOWEST_PRIORITY + flood], env=env, cwd=cwd)
    return _finish(proc, out, err, start, timeout + HANG_SECONDS)


def cli_interrupt_flood(
    options: Sequence[str],
    *,
    flood: str = "yes",
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    flooding_for: float = 0.5,
) -> CliRun:
    """Start ``envlayer exec OPTIONS -- sh -c FLOOD`` (FLOOD at the lowest CPU priority),
    wait until output flows and then ``flooding_for`` seconds more, send SIGINT;
    ``seconds`` counts from the signal. A process still running :data:`HANG_SECONDS` after
    the signal is killed (exit -9)."""
    make_sigint_deliverable()
    proc, out, err = _spawn(options, ["sh", "-c", LOWEST_PRIORITY + flood], env=env, cwd=cwd)
    if not out.started.wait(120):
        proc.kill()
        raise AssertionError("the flood produced no output within 120 s")
    time.sleep(flooding_for)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    return _finish(proc, out, err, sent, HANG_SECONDS)
