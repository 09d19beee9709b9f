"""One command in its own ``Sandbox.exec`` (``exec_mode = "oneshot"``, and the overflow
path when another thread holds the session).

The exec runs a tiny ``sh`` wrapper (change to the working directory, refresh the lease,
then ``exec`` the command, so the command keeps the exec's pid) with ``ENVLAYER_EXEC_ID``
in its environment, passed as exec ``env`` (never in argv), so the killer finds the whole
tree. stdin bytes are written from a helper thread and then closed (EOF): a command that
reads stdin never waits for input that cannot come.

No exec ``timeout`` is passed to Modal: the deadline is envlayer's own, and on expiry
the tree is killed inside the sandbox (:mod:`envlayer_modal.killer`). Should Modal still
report its own timeout codes (-1 for a client-side exec deadline, 137 for a killed exec)
after the deadline, they are the core's timeout result (124, ``timed_out``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envlayer.output import CappedBuffer
from envlayer_modal.process import EXIT, STDERR, STDOUT, Process
from envlayer_modal.reaper import LEASE_PATH

OutputCallback = Callable[[str, bytes], None]
STREAM_NAMES = {STDOUT: "stdout", STDERR: "stderr"}
EXIT_GRACE = 0.5
"""Seconds to keep reading after the exit code arrived, for output still in flight."""

WRAPPER = (
    'd=$1; t=$2; shift 2; [ -n "$t" ] && : > ' + LEASE_PATH + " 2>/dev/null; "
    'cd -- "$d" 2>/dev/null || { printf \'envlayer: working directory does not exist: %s\\n\' "$d" >&2; exit 126; }; '
    'exec "$@"'
)


def oneshot_argv(shell: str, command: str | Sequence[str], *, cwd: str, touch_lease: bool) -> list[str]:
    """The exec argv: the wrapper, then ``shell -c <string>`` or the argv itself."""
    inner = [shell, "-c", command] if isinstance(command, str) else [str(a) for a in command]
    return [shell, "-c", WRAPPER, "envlayer", cwd, "1" if touch_lease else "", *inner]


@dataclass
class Outcome:
    """How a command ended: its exit code (None when unknown: the exec vanished), whether
    the deadline expired, and the captured streams."""

    code: int | None
    timed_out: bool
    stdout: CappedBuffer
    stderr: CappedBuffer


def collect(
    proc: Process,
    *,
    deadline: float | None,
    limit: int | None,
    policy: str,
    on_output: OutputCallback | None,
) -> Outcome:
    """Read ``proc`` until it exited and both streams ended (or ``EXIT_GRACE`` after the
    exit), or until ``deadline`` (``timed_out``; the command is still running)."""
    buffers = {STDOUT: CappedBuffer(limit, policy), STDERR: CappedBuffer(limit, policy)}  # type: ignore[arg-type]
    ended: set[int] = set()
    code: int | None = None
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if exited_at is not None and (len(ended) == 2 or now - exited_at >= EXIT_GRACE):
            return Outcome(code, False, buffers[STDOUT], buffers[STDERR])
        if deadline is not None and now >= deadline:
            return Outcome(code, True, buffers[STDOUT], buffers[STDERR])
        waits = [w for w in (None if deadline is None else deadline - now,) if w is not None]
        if exited_at is not None:
            waits.append(exited_at + EXIT_GRACE - now)
        event = proc.next_event(max(min(waits), 0) if waits else None)
        if event is None:
            continue
        fd, payload = event
        if fd == EXIT:
            code, exited_at = payload, time.monotonic()
        elif payload is None:
            ended.add(fd)
        else:
            buffers[fd].write(payload)
            if on_output is not None:
                on_output(STREAM_NAMES[fd], payload)


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
