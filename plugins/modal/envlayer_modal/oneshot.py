"""One command in its own ``Sandbox.exec`` (``exec_mode = "oneshot"``, the overflow path
when another thread holds the session, and internal helpers).

The exec runs a tiny ``sh`` wrapper (change to the working directory, refresh the lease,
then ``exec`` the command, so the command keeps the exec's pid) with ``ENVLAYER_EXEC_ID``
in its environment, passed as exec ``env`` (never in argv), so the killer finds the whole
tree. stdin bytes are written from a helper thread and then closed (EOF): a command that
reads stdin never waits for input that cannot come.

No exec ``timeout`` is passed to Modal: the deadline is envlayer's own, and on expiry the
tree is killed inside the sandbox while the output keeps being read
(:func:`envlayer.execution.streams.drain_while`). Should Modal still report its own timeout codes
(-1 for a client-side exec deadline, 137 for a killed exec) after the deadline, they are the
core's timeout result (124, ``timed_out``).

The SDK refuses an exec whose arguments add up to more than 64 KiB (``ARG_MAX_BYTES`` and
``_validate_exec_args`` in ``modal/sandbox/_common.py``, an ``InvalidError`` before any RPC).
A longer command (a string, or an argv list, quoted) is written to a file in the sandbox
first (:func:`script_of`, :func:`script_argv`); the wrapper opens it, removes it and runs it
with the shell, so nothing of it stays behind and the command's stdin is still its own.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envlayer.execution.collector import OutputCollector
from envlayer.execution.streams import drain_while
from envlayer_modal.process import EXIT, Process
from envlayer_modal.reaper import LEASE_PATH
from envlayer_modal.stream import NAMES, ExecStream

EXIT_GRACE = 0.5
"""Once the exit code is in, how long the output may stay silent before the call returns
without its streams' end (a background child holding stdout open, ``server &``, never
hangs the call). Output still arriving keeps the call reading: the SDK reads the output and
the exit code over separate RPCs, so the exit code may come first by any amount."""
MODAL_TIMEOUT_CODES = (-1, 137)
"""Exit codes Modal reports for an exec cut by a deadline or killed: a timeout once
envlayer's own deadline has passed."""

WRAPPER = (
    'd=$1; t=$2; shift 2; [ -n "$t" ] && : > ' + LEASE_PATH + " 2>/dev/null; "
    'cd -- "$d" 2>/dev/null || { printf \'envlayer: working directory does not exist: %s\\n\' "$d" >&2; exit 126; }; '
    'exec "$@"'
)


ARG_LIMIT = 2**16
"""The SDK's limit on the total length of an exec's arguments (module docstring)."""
SCRIPT_WRAPPER = 'f=$3; exec 3< "$f" || exit 126; rm -f -- "$f"; a=$1; b=$2; shift 3; set -- "$a" "$b" "$@"; ' + WRAPPER
"""``WRAPPER`` for a command staged in file ``$3``: it runs as ``shell /proc/self/fd/3``."""


def oneshot_argv(shell: str, command: str | Sequence[str], *, cwd: str, touch_lease: bool) -> list[str]:
    """The exec argv: the wrapper, then ``shell -c <string>`` or the argv itself."""
    inner = [shell, "-c", command] if isinstance(command, str) else [str(a) for a in command]
    return [shell, "-c", WRAPPER, "envlayer", cwd, "1" if touch_lease else "", *inner]


def too_long(argv: Sequence[str]) -> bool:
    """Whether the SDK would refuse ``argv`` (it counts characters, as here)."""
    return sum(len(a) for a in argv) > ARG_LIMIT


def script_of(command: str | Sequence[str]) -> bytes:
    """The shell script that runs ``command``: the string itself, or the argv quoted."""
    text = command if isinstance(command, str) else "exec " + shlex.join(str(a) for a in command)
    return text.encode("utf-8", "surrogateescape")


def script_argv(shell: str, path: str, *, cwd: str, touch_lease: bool) -> list[str]:
    """The exec argv that runs the script staged at ``path`` (see :func:`script_of`)."""
    return [shell, "-c", SCRIPT_WRAPPER, "envlayer", cwd, "1" if touch_lease else "", path, shell, "/proc/self/fd/3"]


@dataclass(frozen=True)
class Outcome:
    """How a command ended: its exit code (None when unknown: the exec vanished), and
    whether the deadline expired first (the command still runs then)."""

    code: int | None
    timed_out: bool


def collect(proc: Process, collector: OutputCollector, deadline: float | None) -> Outcome:
    """Read ``proc`` into ``collector`` until it exited and both streams ended (or they
    stayed silent for ``EXIT_GRACE`` after the exit), or until ``deadline``. Exceptions from
    the output callback propagate (the caller kills the command)."""
    ended: set[int] = set()
    code: int | None = None
    exited_at: float | None = None  # then: when the exit or the latest output arrived
    while True:
        now = time.monotonic()
        if exited_at is not None and (len(ended) == 2 or now - exited_at >= EXIT_GRACE):
            return Outcome(code, False)
        if deadline is not None and now >= deadline:
            return Outcome(code, True)
        waits = [] if deadline is None else [deadline - now]
        if exited_at is not None:
            waits.append(exited_at + EXIT_GRACE - now)
        event = proc.next_event(max(min(waits), 0.0) if waits else None)
        if event is None:
            continue
        fd, payload = event
        if fd == EXIT:
            code, exited_at = payload, time.monotonic()
        elif payload is None:
            ended.add(fd)
        else:
            collector.write(NAMES[fd], payload)
            exited_at = None if exited_at is None else time.monotonic()


def run(proc: Process, collector: OutputCollector, deadline: float | None, *, kill: Callable[[], object]) -> Outcome:
    """Collect a started command; on a timeout or an exception (an interrupt, a failing
    callback) kill its tree with ``kill`` while its output keeps being drained.
    A timeout is ``Outcome(timed_out=True)``; exceptions propagate after the kill."""
    try:
        outcome = collect(proc, collector, deadline)
    except BaseException:
        drain_while(ExecStream(proc), collector, kill)
        raise
    expired = deadline is not None and time.monotonic() >= deadline
    if outcome.timed_out or (outcome.code in MODAL_TIMEOUT_CODES and expired):
        drain_while(ExecStream(proc), collector, kill)
        return Outcome(outcome.code, True)
    return outcome


def feed_stdin(proc: Process, data: bytes | None) -> threading.Thread:
    """Write ``data`` (or nothing) and close stdin, on a helper thread."""

    def work() -> None:
        try:
            proc.send(data or b"", eof=True)
        except Exception as exc:
            proc.errors.append(exc)

    thread = threading.Thread(target=work, name="envlayer-modal-stdin", daemon=True)
    thread.start()
    return thread
