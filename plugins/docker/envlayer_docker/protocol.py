"""The wire protocol shared by session and one-shot commands.

A command runs under a small POSIX ``sh`` wrapper that, when the command ends, writes a
per-call random marker to the exec's stdout and stderr::

    stdout: <command output> M <rc> <shell pid> <pwd> M
    stderr: <command output> M

The wrapper keeps the exec's real stdout/stderr on fds 7 and 8 (closed for the command),
so a command that redirects its own fds (``exec 2>&1``) cannot swallow the markers. The
reader demultiplexes Docker's attach stream (8-byte frame headers), strips the markers
(also when they arrive split across reads) and knows the command is over when both have
been seen, without waiting for EOF: background jobs that keep the pipe open never block
a call. A stream that ends (EOF) before the markers means the shell itself exited
(``exit N``, a syntax error, a kill); the exit code then comes from ``exec_inspect``.

Everything here is pure logic on bytes; nothing imports the Docker SDK.
"""

from __future__ import annotations

import secrets
import select
import shlex
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from envlayer.output import CappedBuffer
from envlayer.proctree import EXEC_ID_VAR

STDOUT, STDERR = 1, 2
STREAM_NAMES = {STDOUT: "stdout", STDERR: "stderr"}
SESSION_VAR = "ENVLAYER_SESSION"
LEASE_PATH = "/tmp/.envlayer-lease"
_RECV = 262144

OutputCallback = Callable[[str, bytes], None]


class FrameDemux:
    """Splits Docker's multiplexed (non-TTY) attach stream into ``(stream, payload)`` frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add raw bytes; return every complete frame they finish."""
        self._buf += data
        frames = []
        buf = self._buf
        while len(buf) >= 8:
            size = int.from_bytes(buf[4:8], "big")
            end = 8 + size
            if len(buf) < end:
                break
            frames.append((buf[0], bytes(buf[8:end])))
            del buf[:end]
        return frames


class MarkerScanner:
    """Finds the end-of-command marker in one stream and passes through what precedes it.

    With ``trailer=True`` (stdout) the marker is followed by ``<rc> <pid> <pwd>`` and a
    second marker; :attr:`trailer` then holds those bytes.
    """

    def __init__(self, marker: bytes, *, trailer: bool) -> None:
        self.marker = marker
        self._want_trailer = trailer
        self._pending = b""
        self._in_trailer = False
        self.trailer = b""
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Consume ``data``; return the command-output bytes that are now certain."""
        if self.done:
            return b""
        buf = self._pending + data if self._pending else data
        if self._in_trailer:
            return self._scan_trailer(buf)
        idx = buf.find(self.marker)
        if idx < 0:
            keep = len(self.marker) - 1
            cut = max(len(buf) - keep, 0)
            # hold back a tail that could be the start of a split marker
            while cut < len(buf) and not self.marker.startswith(buf[cut:]):
                cut += 1
            if cut == 0:
                self._pending = buf
                return b""
            self._pending = buf[cut:]
            return buf[:cut]
        out = buf[:idx]
        rest = buf[idx + len(self.marker) :]
        if self._want_trailer:
            self._in_trailer = True
            self._pending = b""
            self._scan_trailer(rest)
        else:
            self.done = True
            self._pending = b""
        return out

    def _scan_trailer(self, buf: bytes) -> bytes:
        idx = buf.find(self.marker)
        if idx < 0:
            self._pending = buf
            return b""
        self.trailer = buf[:idx]
        self.done = True
        self._pending = b""
        return b""

    def flush(self) -> bytes:
        """Bytes held back when the stream ended without a marker."""
        data, self._pending = (b"", b"") if self._in_trailer else (self._pending, b"")
        return data


@dataclass
class Trailer:
    """What the wrapper reported after the command: exit code, shell pid, working dir."""

    exit_code: int
    pid: int
    pwd: str


def parse_trailer(raw: bytes) -> Trailer:
    """Parse ``<rc> <pid> <pwd>``. Raises ``ValueError`` on anything else."""
    rc, pid, pwd = raw.split(b" ", 2)
    return Trailer(int(rc), int(pid), pwd.decode("utf-8", "surrogateescape"))


class Outcome:
    """How reading a command's output ended."""

    DONE = "done"
    EOF = "eof"
    TIMEOUT = "timeout"


class Reader:
    """Reads one command's output from an attached exec socket into capped buffers."""

    def __init__(
        self,
        sock: socket.socket,
        demux: FrameDemux,
        marker: bytes,
        *,
        limit: int | None,
        policy: str,
        on_output: OutputCallback | None = None,
    ) -> None:
        self.sock = sock
        self.demux = demux
        self.scanners = {
            STDOUT: MarkerScanner(marker, trailer=True),
            STDERR: MarkerScanner(marker, trailer=False),
        }
        self.buffers = {STDOUT: CappedBuffer(limit, policy), STDERR: CappedBuffer(limit, policy)}  # type: ignore[arg-type]
        self.on_output = on_output

    def _deliver(self, stream: int, data: bytes) -> None:
        if data:
            self.buffers[stream].write(data)
            if self.on_output is not None:
                self.on_output(STREAM_NAMES[stream], data)

    def read(self, deadline: float | None) -> str:
        """Read until both markers (``DONE``), the stream ends (``EOF``) or ``deadline``
        (a ``time.monotonic()`` value; ``TIMEOUT``). Socket errors count as ``EOF``."""
        out, err = self.scanners[STDOUT], self.scanners[STDERR]
        sock = self.sock
        while not (out.done and err.done):
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return Outcome.TIMEOUT
                ready, _, _ = select.select([sock], [], [], wait)
                if not ready:
                    continue
            try:
                data = sock.recv(_RECV)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                for stream, scanner in self.scanners.items():
                    self._deliver(stream, scanner.flush())
                return Outcome.EOF
            for stream, payload in self.demux.feed(data):
                target = self.scanners.get(stream)
                if target is not None:
                    self._deliver(stream, target.feed(payload))
        return Outcome.DONE

    def trailer(self) -> Trailer:
        """The parsed trailer; only valid after ``DONE``."""
        return parse_trailer(self.scanners[STDOUT].trailer)


# --- script text ----------------------------------------------------------------------


def quote(value: str) -> str:
    """Single-quote ``value`` for POSIX sh."""
    return shlex.quote(value)


def command_text(command: str | Sequence[str]) -> str:
    """Shell text for ``command``: a string as is, an argv list quoted word by word (so
    nothing in it is expanded: it runs exactly as the argv would)."""
    if isinstance(command, str):
        return command
    if not command:
        raise ValueError("empty argv")
    return " ".join(quote(str(arg)) for arg in command)


def end_markers(marker: str, rc: str = "$__el_rc") -> str:
    """The shell lines that report the end of a command on fds 7 (stdout) and 8 (stderr)."""
    return f'printf \'%s%s %s %s%s\' {marker} "{rc}" "$$" "$PWD" {marker} >&7; printf \'%s\' {marker} >&8\n'


def session_script(
    command: str | Sequence[str],
    *,
    exec_id: str,
    marker: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin_path: str | None = None,
    touch_lease: bool = False,
) -> bytes:
    """The text sent to a session shell to run one command.

    Per-call ``env`` is exported for the command and restored afterwards (values travel
    on the shell's stdin, never in argv). With ``cwd`` the command runs there and the
    session's directory is restored afterwards; without it, a ``cd`` in the command
    persists. The command's stdin is ``stdin_path`` (removed afterwards) or /dev/null.
    """
    lines = [f"{EXEC_ID_VAR}={exec_id}; export {EXEC_ID_VAR}"]
    if touch_lease:
        lines.append(f": > {LEASE_PATH} 2>/dev/null")
    names = sorted(env) if env else []
    for i, name in enumerate(names):
        lines.append(
            f'if [ -n "${{{name}+x}}" ]; then __el_o{i}=${name}; __el_s{i}=1; else __el_s{i}=; fi; '
            f"{name}={quote(env[name])}; export {name}"  # type: ignore[index]
        )
    redirect = f"< {quote(stdin_path)}" if stdin_path else "< /dev/null"
    run = f"eval {quote(command_text(command))} {redirect} 7>&- 8>&-; __el_rc=$?"
    if cwd is not None:
        lines.append(
            f'__el_d=$PWD; if cd -- {quote(cwd)} 2>/dev/null; then {run}; cd -- "$__el_d" 2>/dev/null; '
            f"else printf 'envlayer: working directory does not exist: %s\\n' {quote(cwd)} >&8; __el_rc=126; fi"
        )
    else:
        lines.append(run)
    for i, name in enumerate(names):
        lines.append(
            f'if [ -n "$__el_s{i}" ]; then {name}=$__el_o{i}; export {name}; else unset {name}; fi; '
            f"unset __el_o{i} __el_s{i}"
        )
    if stdin_path:
        lines.append(f"rm -f -- {quote(stdin_path)}")
    lines.append(f"unset {EXEC_ID_VAR}")
    lines.append(end_markers(marker))
    return "\n".join(lines).encode("utf-8", "surrogateescape")


ONESHOT_STRING = (
    'exec 7>&1 8>&2; m=__EL$(($1*7919+13))__; d=$2; t=$3; shift 3; [ -n "$t" ] && : > ' + LEASE_PATH + " 2>/dev/null; "
    'if cd -- "$d" 2>/dev/null; then eval "$1" 7>&- 8>&-; __el_rc=$?; '
    "else printf 'envlayer: working directory does not exist: %s\\n' \"$d\" >&8; __el_rc=126; fi; "
    'printf \'%s%s %s %s%s\' "$m" "$__el_rc" "$$" "$PWD" "$m" >&7; printf \'%s\' "$m" >&8'
)
"""``sh -c`` program for a one-shot string command: ``$1`` marker seed (the marker is
computed from it, so its text never appears in any process's argv), ``$2`` cwd, ``$3``
non-empty to refresh the lease, ``$4`` the command (run by ``eval``, as ``sh -c`` would)."""

ONESHOT_ARGV = ONESHOT_STRING.replace('eval "$1"', '"$@"')
"""Same, for an argv command: ``$4...`` are the argv, run without shell interpretation."""


def oneshot_marker() -> tuple[int, str]:
    """(seed, marker) for a one-shot command: the wrapper derives the marker from the seed."""
    seed = secrets.randbelow(2**40) + 2**39
    return seed, f"__EL{seed * 7919 + 13}__"


def oneshot_argv(shell: str, command: str | Sequence[str], *, seed: int, cwd: str, touch_lease: bool) -> list[str]:
    """The exec argv of a one-shot command (the command text itself is in argv; per-call
    environment values are not: they go in the exec's environment)."""
    lease = "1" if touch_lease else ""
    if isinstance(command, str):
        return [shell, "-c", ONESHOT_STRING, "envlayer", str(seed), cwd, lease, command]
    return [shell, "-c", ONESHOT_ARGV, "envlayer", str(seed), cwd, lease, *[str(a) for a in command]]
