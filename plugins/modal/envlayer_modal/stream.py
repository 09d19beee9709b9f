"""A long-lived ``Sandbox.exec`` as the core's :class:`~envlayer.execution.streams.ByteStream`, and
the session shell's exec with its idle watchdog.

:class:`ExecStream` turns the events of a :class:`~envlayer_modal.process.Process` (stdout
and stderr chunks from two reader threads, the exit code from a third) into the byte-stream
interface that :class:`envlayer.execution.shell_session.PersistentShell` drives: ``write`` is one
stdin write (one ``TaskExecStdinWrite`` RPC), ``read`` returns every chunk already
received.

:func:`session_argv` starts the session shell under a watchdog: Modal counts a running
exec as activity, so a session shell left behind by a process that died without
``cleanup()`` would keep its sandbox alive until ``sandbox_timeout``. The watchdog (a
background ``sh`` loop, its output sent to /dev/null so it never holds the exec's streams
open) ends the shell once it has read no input (``rchar`` in ``/proc/<pid>/io`` unchanged)
and had no child process for ``idle_exit`` seconds, and only while it waits for input (its
fd 0 is the exec's stdin: a command runs with ``/dev/null`` or a file there), so a command
blocked without children is left to its own timeout. To end it, the watchdog stops the shell,
checks that it read nothing meanwhile, writes the note :func:`idle_note` names and kills
it: a command sent at that moment was provably never started, and the session runs it in
a new shell (``ended_idle`` of :class:`~envlayer.execution.shell_session.PersistentShell`).
Then the exec ends, the sandbox goes idle, and Modal's ``idle_timeout`` terminates it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.execution.streams import WriteTimedOut, call_within
from envlayer_modal.process import EXIT, STDERR, STDOUT, Process

NAMES = {STDOUT: "stdout", STDERR: "stderr"}
WATCHDOG_PERIOD = 5

WATCHDOG = (
    's=$$; n=$1; note="${TMPDIR:-/tmp}/.envlayer-session-$2/$3"; shift 3\n'
    "t=" + str(WATCHDOG_PERIOD) + '; [ "$n" -lt $t ] && t=$n\n'
    "exec 3<&0\n"
    "( me=; read -r me _ < /proc/self/stat; idle=0; last=\n"
    "  while sleep $t; do\n"
    '    kill -0 "$s" 2>/dev/null || exit 0\n'
    '    io=$(grep rchar "/proc/$s/io" 2>/dev/null); kids=0\n'
    "    for f in /proc/[0-9]*/stat; do\n"
    '      st=; read -r st < "$f" 2>/dev/null || continue; set -- ${st##*) }\n'
    '      p=${f#/proc/}; p=${p%/stat}; [ "$2" = "$s" ] && [ "$p" != "$me" ] && { kids=1; break; }\n'
    "    done\n"
    '    if [ "$io" != "$last" ] || [ $kids = 1 ]; then idle=0; last=$io;'
    " else idle=$((idle + t)); fi\n"
    '    [ $idle -ge "$n" ] || continue\n'
    '    kill -STOP "$s" 2>/dev/null; idle=0\n'
    '    if [ "$(grep rchar "/proc/$s/io" 2>/dev/null)" = "$io" ] && [ "/proc/$s/fd/0" -ef /proc/self/fd/3 ]; then\n'
    '      [ -e "/proc/$s/fd/7" ] && : > "$note" 2>/dev/null\n'
    '      kill -KILL "$s"; exit 0\n'
    "    fi\n"
    '    kill -CONT "$s" 2>/dev/null\n'
    "  done ) < /dev/null > /dev/null 2>&1 &\n"
    "exec 3<&-\n"
    'exec "$@"\n'
)
"""``sh -c`` program: ``$1`` idle seconds, ``$2`` the session's id (naming its private
directory, as :func:`envlayer.execution.shell_script.init_script` does), ``$3`` the note's
file name, then the shell's argv (``exec``'d, so it keeps the exec's pid, and the watchdog
is its child). It looks every :data:`WATCHDOG_PERIOD` seconds, or every ``$1`` seconds when
that is shorter, so a shell idle since its last input ends within ``$1`` plus two periods
(its first look always sees the shell's start as input). The watchdog keeps the exec's
stdin as its fd 3: a shell whose fd 0 is that pipe waits for input (a command runs with
``/dev/null`` or a file there); only such a shell is ended, with the note once it has run
its first script (fd 7 open, the private directory made)."""


def session_argv(shell: str, idle_exit: int, session_id: str, note: str) -> list[str]:
    """The exec argv of a session shell that exits after ``idle_exit`` idle seconds, leaving
    the file ``note`` in the session's private directory when it ended between commands."""
    return [shell, "-c", WATCHDOG, "envlayer-session", str(idle_exit), session_id, note, shell]


def idle_note(token: str) -> str:
    """The name of the note the watchdog of the session exec with ``ENVLAYER_SESSION=token``
    leaves in the session's private directory when it ends the shell between commands."""
    return f"ended-idle-{token}"


class ExecStream:
    """:class:`~envlayer.execution.streams.ByteStream` over one ``Sandbox.exec`` (see the module)."""

    def __init__(
        self,
        process: Process,
        ended: Callable[[BaseException], BaseException | None] | None = None,
        guard: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """``ended(error)``, asked when a write fails, returns the exception meaning "the
        sandbox had ended, so nothing was sent" (or None): :meth:`exit_status` raises it.
        ``guard(send)``, when given, runs each write (e.g.
        :func:`envlayer_modal.ended_watch.unless_ended`: a write to a sandbox that ended
        fails once the control plane says so, not after the SDK's retries)."""
        self.process = process
        self._ended_check = ended
        self._guard = guard
        self._refused: BaseException | None = None
        self._broken = False
        self._ended: set[int] = set()
        self._code: int | None = None
        self._exited = False
        self._closed = False

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Send ``data`` to the exec's stdin; ``OSError`` when the exec or sandbox is gone.
        With ``deadline``, the send (whose SDK call takes no timeout) is waited for only
        until then (:func:`~envlayer.execution.streams.call_within`):
        :class:`~envlayer.execution.streams.WriteTimedOut`, and nothing more is sent on
        this stream (not even the EOF of :meth:`close`)."""
        if self._closed:
            raise BrokenPipeError("stream closed")

        def send() -> None:
            if self._guard is None:
                self.process.send(data)
            else:
                self._guard(lambda: self.process.send(data))

        try:
            if deadline is None:
                send()
            else:
                call_within(send, deadline)
        except WriteTimedOut:
            self._broken = True
            raise
        except Exception as exc:
            self._broken = True
            if self._ended_check is not None:
                self._refused = self._ended_check(exc)
            raise BrokenPipeError(f"the session exec no longer takes input: {exc}") from exc

    def _take(self, event: tuple[int, Any]) -> tuple[str, bytes] | None:
        fd, payload = event
        if fd == EXIT:
            self._exited, self._code = True, payload
        elif payload is None:
            self._ended.add(fd)
        elif payload:
            return NAMES[fd], payload
        return None

    def read(self, deadline: float | None) -> list[tuple[str, bytes]] | None:
        """See :meth:`envlayer.execution.streams.ByteStream.read`."""
        chunks: list[tuple[str, bytes]] = []
        while True:
            if len(self._ended) == 2 and not chunks:
                return None
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            event = self.process.next_event(0 if chunks else wait)
            if event is None:
                return chunks
            chunk = self._take(event)
            if chunk is not None:
                chunks.append(chunk)

    def exit_status(self, wait: float) -> int | None:
        """The exec's exit status once it ended (``None`` when Modal does not say within
        ``wait`` seconds). Raises :class:`BackendUnavailable` when the exec's status could
        not be read at all (the sandbox or the connection is gone), and the ``ended``
        exception when a write was refused because the sandbox had ended."""
        if self._refused is not None:
            raise self._refused
        end = time.monotonic() + wait
        while not self._exited:
            event = self.process.next_event(max(end - time.monotonic(), 0.0))
            if event is None:
                return None
            self._take(event)
        if self._code is None and self.process.errors:
            raise BackendUnavailable(
                f"lost the session's exec: {self.process.errors[-1]!r}",
                hint="check the sandbox (it may have been terminated); the next call starts afresh",
            )
        return self._code

    def close(self) -> None:
        """Close the exec's stdin (the shell sees EOF and exits). Idempotent; never raises.
        After a failed write nothing is sent: the SDK would resend the failed bytes and,
        for a router that answers UNAVAILABLE, retry for about 10 s."""
        if self._closed:
            return
        self._closed = True
        if self._broken:
            return
        try:
            self.process.send(b"", eof=True)
        except Exception:
            pass
