"""A :class:`~envlayer.execution.streams.ByteStream` to a shell in a Daytona sandbox, over the toolbox API.

Daytona's API has no raw byte stream to a process (its session logs and ``process/execute``
return text, and ``process/execute`` merges stderr into stdout), so envlayer makes one
(:func:`open_stream`, one ``process/execute``): in a private spool directory
``/tmp/.envlayer-daytona/<id>`` it starts ``sh`` in the background with stdin from a FIFO
``in`` (held open by a ``sleep`` so the shell never sees EOF between writes) and stdout and
stderr to the files ``out`` and ``err``; when the shell ends, its status goes to ``status``.

* :meth:`DaytonaStream.write`: one ``process/execute`` writing the bytes into the FIFO (a
  ``printf`` of an octal-escaped format; large data is uploaded as a file first and
  ``cat`` into it). Opened read-write, the FIFO never blocks the writer's ``open``.
* :meth:`DaytonaStream.read`: one ``process/execute`` per poll that waits *in the sandbox*
  (20 ms steps, up to ``max_wait``) for new output or the shell's end, and returns the next
  chunk of each file as hex, so every byte survives. The core's
  :class:`~envlayer.execution.shell_session.PersistentShell` runs its protocol over this stream.
* While reads wait, ``tick`` is called between polls (the backend refreshes the sandbox's
  activity there, so Daytona's auto-stop never fires mid-command).

The core's session protocol, its kill path (:func:`~envlayer.execution.streams.drain_while`) and the
output caps (:class:`~envlayer.execution.collector.OutputCollector`) do the rest.
"""

from __future__ import annotations

import math
import shlex
import time
import uuid
from collections.abc import Callable
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.execution.shell_script import SESSION_VAR, printf_format
from envlayer.execution.streams import Chunks, call_within
from envlayer.sandbox import teardown_threads

SPOOL = "/tmp/.envlayer-daytona"
MAX_CHUNK = 256 * 1024
TICK = 0.02
INLINE_WRITE_MAX = 16384
"""Writes up to this size travel inside the ``process/execute`` command (4x larger once
octal-escaped, well under the 128 KiB argument limit); larger ones are uploaded."""

_START = r"""
d=$1; shift
mkdir -p "$d" && mkfifo "$d/in" && : > "$d/out" && : > "$d/err" || exit 1
exec 3<>"$d/in"
sleep 2147483647 >&3 3>&- </dev/null 2>/dev/null &
echo $! > "$d/holder"
( "$@" <"$d/in" >"$d/out" 2>"$d/err"; echo $? > "$d/status.tmp"; mv "$d/status.tmp" "$d/status"
  kill "$(cat "$d/holder")" ) 3>&- </dev/null >/dev/null 2>&1 &
echo started
"""
"""Starts the shell (see the module docstring). The script opens the FIFO itself (fd 3)
before it forks the holder, which inherits that descriptor at the fork: the FIFO has an
open end from before ``started`` is printed until the holder is killed. (A FIFO whose every
end is closed drops its buffer: had the holder opened ``in`` on its own, a first write that
came before the holder ran would be lost.) The shell's subshell closes fd 3, so killing the
holder still gives the shell EOF."""

_WRITE = 'if [ -e "$1/status" ] || [ ! -p "$1/in" ]; then echo @notsent; exit 3; fi; '
CLOSE_TIMEOUT = 10
"""Seconds the call that ends a shell may take (it only signals and backgrounds a removal)."""
SDK_HTTP_MARGIN = 5
"""The SDK's ``process.exec`` gives its HTTP request the command's timeout plus 5 s
(``daytona/_sync/process.py`` ``Process.exec``: ``http_timeout(timeout + 5)``)."""
WRITE_POLL_WAIT = 0.5
"""How long the poll that follows a write (in the same API call) waits in the sandbox for
the first output: a short command is then written and answered in one round trip."""

_POLL = r"""
exec 2>/dev/null
d=$1; o=$2; e=$3; max=$4; w=$5; n=0
size() { stat -c %s "$1" || wc -c < "$1"; }
chunk() { dd if="$1" bs=4096 skip=$(($2 / 4096)) count=$(( ($2 % 4096 + max + 4095) / 4096 )) | od -An -v -tx1; }
while :; do
  [ -e "$d/status" ] && break
  so=$(size "$d/out"); se=$(size "$d/err")
  if [ "${so:-0}" -gt "$o" ] || [ "${se:-0}" -gt "$e" ]; then break; fi
  [ "$n" -ge "$w" ] && break
  sleep 0.02; n=$((n + 1))
done
[ -e "$d/status" ] || sleep 0.01  # let a write that is under way (a trailer's two parts) land
st=$(cat "$d/status")
[ -d "$d" ] || st=gone
echo "@state ${st:--}"
echo "@out"; chunk "$d/out" "$o"
echo "@err"; chunk "$d/err" "$e"
echo "@end"
"""
"""One poll: waits up to ``$5`` ticks for new output or the shell's end, then prints the
state and, as hex, the 4 KiB blocks holding the next ``$4`` bytes of each file from the
offsets ``$2``/``$3`` (``dd`` seeks, so a huge file costs nothing; the reader cuts the
block-aligned excess)."""


class ShellGoneBeforeSend(BackendUnavailable):
    """The shell had already ended when a command was to be written: the command did not
    run, and a new shell may take it."""


def _sh(script: str, *args: str) -> str:
    return "sh -c " + shlex.quote(script) + " envlayer " + " ".join(shlex.quote(a) for a in args)


def parse_poll(text: str, offsets: tuple[int, int] = (0, 0)) -> tuple[str, bytes, bytes]:
    """(state, stdout chunk, stderr chunk) from a poll's answer; state is ``-`` while the
    shell runs, its exit status once it ended, ``gone`` when the spool directory vanished.
    ``offsets`` are the byte offsets the poll read from (the answer starts at the 4 KiB
    block holding each; at most :data:`MAX_CHUNK` bytes are kept). Raises ``ValueError``
    for a cut or malformed answer."""
    lines = text.splitlines()
    if "@end" not in lines or not lines or not lines[0].startswith("@state "):
        raise ValueError(f"incomplete poll answer: {text[-300:]!r}")
    state = lines[0].split(" ", 1)[1].strip()
    sections: dict[str, list[str]] = {"out": [], "err": []}
    current = ""
    for line in lines[1:]:
        if line.startswith("@"):
            current = line[1:]
        elif current in sections:
            sections[current].append(line)
    out, err = (
        bytes.fromhex("".join(sections[k]).replace(" ", ""))[skip % 4096 :][:MAX_CHUNK]
        for k, skip in zip(("out", "err"), offsets, strict=True)
    )
    return state, out, err


class DaytonaStream:
    """A shell's stdin/stdout/stderr in a Daytona sandbox (see the module docstring).

    ``lost(exc, sent)`` turns an SDK failure into the :class:`BackendUnavailable` to raise
    from :meth:`exit_status` (the backend checks whether the sandbox stopped; ``sent`` is
    False when the failure happened while writing, before the shell could read anything)."""

    def __init__(
        self,
        sandbox: Any,
        directory: str,
        *,
        lost: Callable[[BaseException, bool], BackendUnavailable],
        tick: Callable[[], None],
        max_wait: float,
        request_timeout: float,
        first_write_prefix: bytes = b"",
    ) -> None:
        self.sandbox = sandbox
        self.directory = directory
        self.lost = lost
        self.tick = tick
        self.max_wait = max_wait
        self.request_timeout = request_timeout
        self._prefix = first_write_prefix
        self._offsets = {"stdout": 0, "stderr": 0}
        self._status: int | None = None
        self._ended = False
        self._failure: BaseException | None = None
        self._failed_writing = False
        self._pending: Chunks = []
        self._closed = False
        self._first_write_held = False

    def _seconds(self, wait: float, deadline: float | None) -> int:
        """Whole seconds (at least 1) a request that waits up to ``wait`` seconds may take:
        ``request_timeout`` more, or with ``deadline`` no more than ``wait`` past it."""
        seconds = int(wait + self.request_timeout)
        if deadline is not None:
            seconds = min(seconds, math.ceil(max(deadline - time.monotonic(), 0.0) + wait))
        return max(1, seconds)

    def _exec(self, command: str, wait: float, deadline: float | None = None) -> Any:
        """One ``process/execute`` of ``command``, which waits up to ``wait`` seconds in the
        sandbox. The daemon kills it (its process group) when :meth:`_seconds` have passed:
        a write blocked on the FIFO of a shell that stopped reading then ends in the sandbox
        (and its request on the client's thread) soon after the session gave up on it, not
        ``request_timeout`` later."""
        return self.sandbox.process.exec(command, timeout=self._seconds(wait, deadline))

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Send ``data`` to the shell's stdin, and in the same API call poll once (up to
        :data:`WRITE_POLL_WAIT` seconds) for its first output, which the next :meth:`read`
        returns. The stream's first write (the session's init script, which prints nothing)
        is held and sent with the next write or read: polling for its output would wait
        :data:`WRITE_POLL_WAIT` in vain. Raises ``OSError`` when the shell is gone or the
        API refused (the caller treats both as the shell being gone). With ``deadline``,
        the API call is waited for only until then
        (:func:`~envlayer.execution.streams.call_within`:
        :class:`~envlayer.execution.streams.WriteTimedOut`), and in the sandbox the write
        blocked on a full FIFO ends soon after (:meth:`_exec`)."""
        if self._closed or self._ended:
            raise BrokenPipeError("the session shell has ended")
        if not self._first_write_held:
            self._first_write_held = True
            self._prefix += data
            return
        if deadline is None:
            self._send(data)
        else:
            call_within(lambda: self._send(data, deadline), deadline)

    def _send(self, data: bytes, deadline: float | None = None) -> None:
        """One ``process/execute``: the held bytes and ``data`` into the FIFO, then a poll
        (see :meth:`write`), ended by the daemon soon after ``deadline`` (:meth:`_exec`);
        over :data:`INLINE_WRITE_MAX` bytes they are uploaded to a file first, an upload
        the SDK ends by ``deadline``."""
        data, self._prefix = self._prefix + data, b""
        fifo = f"{self.directory}/in"
        poll = [*self._poll_args(WRITE_POLL_WAIT)]
        try:
            if len(data) <= INLINE_WRITE_MAX:
                script = _WRITE + f'printf {printf_format(data)} 1<>"$1/in"\nshift\n' + _POLL
                answer = self._exec(_sh(script, self.directory, *poll), WRITE_POLL_WAIT, deadline)
            else:
                staged = f"{self.directory}/w-{uuid.uuid4().hex}"
                if deadline is None:
                    self.sandbox.fs.upload_file(data, staged)
                else:  # the SDK's own limit is 30 minutes: its thread would wait that long
                    self.sandbox.fs.upload_file(data, staged, timeout=self._seconds(0.0, deadline))
                script = _WRITE + 'cat "$2" 1<>"$1/in"; rm -f "$2"\nshift 2\n' + _POLL
                answer = self._exec(_sh(script, self.directory, staged, *poll), WRITE_POLL_WAIT, deadline)
        except Exception as exc:
            self._failure, self._failed_writing = exc, True
            raise BrokenPipeError(f"could not write to {fifo}: {exc}") from exc
        text = answer.result or ""
        if "@notsent" in text:
            self._failure = ShellGoneBeforeSend(
                f"the session shell had ended before the command was sent (exit {answer.exit_code})",
                hint="the next call starts a new shell",
            )
            raise BrokenPipeError(str(self._failure))
        try:
            self._take(text, poll)
        except ValueError as exc:  # written, but the answer was cut: the next read tells more
            self._failure, self._ended = exc, True

    def _poll_args(self, wait: float) -> list[str]:
        o, e = self._offsets["stdout"], self._offsets["stderr"]
        return [self.directory, str(o), str(e), str(MAX_CHUNK), str(max(0, int(wait / TICK)))]

    def _take(self, text: str, args: list[str]) -> None:
        """Record one poll's answer: new chunks to :attr:`_pending`, the shell's end."""
        state, out, err = parse_poll(text, (int(args[1]), int(args[2])))
        for name, chunk in (("stdout", out), ("stderr", err)):
            if chunk:
                self._offsets[name] += len(chunk)
                self._pending.append((name, chunk))
        if state != "-" and not self._pending:
            self._ended = True
            self._status = int(state) if state.isdigit() else None

    def read(self, deadline: float | None) -> Chunks | None:
        """See :class:`~envlayer.execution.streams.ByteStream`. Never raises for a broken transport."""
        if self._prefix and not (self._closed or self._ended):
            try:
                self._send(b"")  # held bytes (see :meth:`write`) go before any poll
            except OSError:
                self._ended = True
                return None
        while True:
            if self._pending:
                chunks, self._pending = self._pending, []
                return chunks
            if self._closed or self._ended:
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return []
            self.tick()
            wait = self.max_wait if deadline is None else min(self.max_wait, deadline - now)
            args = self._poll_args(wait)
            try:
                self._take(self._exec(_sh(_POLL, *args), wait).result or "", args)
            except Exception as exc:
                self._failure = exc
                self._ended = True
                return None

    def exit_status(self, wait: float) -> int | None:
        """The shell's exit status once :meth:`read` returned ``None``. Raises the
        backend's :class:`BackendUnavailable` when the API failed (the sandbox stopped, or
        the connection was lost)."""
        if isinstance(self._failure, ShellGoneBeforeSend):
            raise self._failure
        if self._failure is not None:
            raise self.lost(self._failure, not self._failed_writing)
        return self._status

    def close(self) -> None:
        """Stop the FIFO's holder (the shell sees EOF) and remove the spool directory
        (in the background in the sandbox: after a flood the output files can be large), in
        one call of at most :data:`CLOSE_TIMEOUT` seconds on a thread of
        :mod:`envlayer.sandbox.teardown_threads` (the process waits for it at exit). Idempotent;
        never raises."""
        if self._closed:
            return
        self._closed = True
        script = 'kill "$(cat "$1/holder")" 2>/dev/null; (rm -rf -- "$1" &) </dev/null >/dev/null 2>&1'

        def remove() -> None:
            try:
                self.sandbox.process.exec(_sh(script, self.directory), timeout=CLOSE_TIMEOUT)
            except Exception:
                pass  # the sandbox stopped or is unreachable: nothing is left to end

        teardown_threads.schedule(remove, "envlayer-daytona-stream-close", bound=CLOSE_TIMEOUT + SDK_HTTP_MARGIN)


def open_stream(
    sandbox: Any,
    *,
    shell: str,
    env: dict[str, str],
    lost: Callable[[BaseException, bool], BackendUnavailable],
    tick: Callable[[], None],
    max_wait: float,
    request_timeout: float,
) -> DaytonaStream:
    """Start a shell in the sandbox and return the stream to it (one ``process/execute``).

    ``env`` is exported by the first bytes written to the shell (never in an argv); the
    shell's initial environment holds ``ENVLAYER_SESSION``. SDK failures propagate."""
    directory = f"{SPOOL}/{uuid.uuid4().hex}"
    session = f"{SESSION_VAR}={uuid.uuid4().hex}"
    answer = sandbox.process.exec(_sh(_START, directory, "env", session, shell), timeout=int(request_timeout))
    if answer.exit_code != 0 or "started" not in (answer.result or ""):
        raise BackendUnavailable(
            f"could not start a shell in the sandbox (exit {answer.exit_code}): {(answer.result or '')[:300]}",
            hint="the sandbox needs sh, mkfifo, sleep, od, head, tail and wc (busybox has them) and a writable /tmp",
        )
    prefix = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items()).encode()
    return DaytonaStream(
        sandbox,
        directory,
        lost=lost,
        tick=tick,
        max_wait=max_wait,
        request_timeout=request_timeout,
        first_write_prefix=prefix,
    )
