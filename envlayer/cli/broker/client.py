"""The fast path of the ``envlayer`` command: hand ``envlayer exec`` to the broker.

:func:`exec_via_broker` returns the exit code of a command the broker ran, or None when
the command must run in-process: it was not for the broker (another command, ``--help``,
``--debug``, ``--no-broker``, ``ENVLAYER_BROKER=0``, ``broker = false``, a usage error),
or the broker could not be used; in that last case one ``envlayer: note: ...`` line on
stderr says why, and nothing ran. A broker that goes away after it started the command
is reported (exit 125) and the command is never run a second time.

Import cost is the point: this module imports nothing beyond the standard library's
built-in modules and the broker's own stdlib-only modules; :mod:`envlayer.cli.broker.spawn`
(``subprocess``, ``fcntl``) is imported only when a broker has to be started.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import errno
import os
import sys

from envlayer.cli.broker import protocol, runtime_dir

TYPE_CHECKING = False  # typing costs milliseconds to import; type checkers read this as True
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

BROKER_VAR = "ENVLAYER_BROKER"
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
IN_PROCESS_FLAGS = frozenset({"--no-broker", "--debug", "-h", "--help"})
# The exit codes of envlayer.cli.exec_plan and envlayer.result (too heavy to import here);
# tests/broker checks that they agree.
ENVLAYER_FAILURE = 125
BROKEN_PIPE_EXIT_CODE = 141
INTERRUPT_EXIT_CODE = 130
UNREACHABLE = (errno.ENOENT, errno.ECONNREFUSED)
"""connect() errors that mean "no broker listens there"."""


def note(text: str) -> None:
    """``envlayer: note: TEXT`` on stderr."""
    os.write(2, f"envlayer: note: {text}\n".encode())


def wanted(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """True when ``argv`` may go to the broker (the broker decides for good)."""
    if not argv or argv[0] != "exec":
        return False
    if environ.get(BROKER_VAR, "").strip().lower() in FALSE_WORDS:
        return False
    options = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    return not any(word in IN_PROCESS_FLAGS for word in options)


def connect(path: str) -> _socket.socket:
    """A connection to the broker listening at ``path``. Raises ``OSError``."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def reach(path: str) -> _socket.socket | None:
    """A connection to the broker at ``path``, or None when none listens there (no
    socket, or a dead broker's). Raises ``OSError`` for any other failure."""
    try:
        return connect(path)
    except OSError as exc:
        if exc.errno in UNREACHABLE:
            return None
        raise


def unreachable(path: str, exc: OSError) -> None:
    """Say that the broker at ``path`` cannot be reached (the command runs in-process)."""
    note(f"cannot reach the broker at {path}: {exc.strerror or exc}; running in-process")


def _open(argv: Sequence[str]) -> _socket.socket | None:
    """A connection to this context's broker, starting one when none listens; None
    (after a note) when that fails."""
    try:
        directory = runtime_dir.checked(runtime_dir.candidate(os.environ))
        digest = runtime_dir.context_digest(os.getcwd(), os.environ)
        path = runtime_dir.broker_path(directory, digest, "sock")
    except (ValueError, OSError) as exc:
        note(f"{exc}; running in-process")
        return None
    try:
        sock = reach(path)
    except OSError as exc:
        return unreachable(path, exc)
    if sock is not None:
        return sock
    from envlayer.cli.broker import spawn

    return spawn.start_and_connect(directory, digest, argv)


class _Relay:
    """Copies the broker's frames to this process's stdout/stderr, and Ctrl-C to the broker."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.started_by = ""
        self.stdout_open = True
        self.interrupted = False
        self.stdin_sent = False

    def tell(self, kind: bytes) -> None:
        try:
            protocol.send(self.sock, kind)
        except OSError:
            pass

    def on_sigint(self, signum: int, frame: object) -> None:
        if self.interrupted:  # a second Ctrl-C: stop waiting for the broker
            raise KeyboardInterrupt
        self.interrupted = True
        self.tell(protocol.CANCEL)

    def write(self, fd: int, data: bytes) -> None:
        if fd == 1 and not self.stdout_open:
            return
        try:
            while data:
                data = data[os.write(fd, data) :]
        except BrokenPipeError:
            if fd == 1:  # our reader went away: the broker stops as the in-process CLI does
                self.stdout_open = False
                self.tell(protocol.HANGUP)

    def send_stdin(self) -> None:
        """All of this process's stdin (``-i``); a stdin that cannot be read ends there."""
        while True:
            try:
                chunk = os.read(0, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            self.stdin_sent = True
            protocol.send(self.sock, protocol.STDIN, chunk)
        protocol.send(self.sock, protocol.STDIN_EOF)

    def run(self) -> int | None:
        """Relay until the broker's verdict: an exit code, or None for in-process."""
        while True:
            try:
                got = protocol.receive(self.sock)
            except (OSError, ValueError):
                got = None
            if got is None:
                return self.lost()
            kind, payload = got
            if kind == protocol.STDOUT:
                self.write(1, payload)
            elif kind == protocol.STDERR:
                self.write(2, payload)
            elif kind == protocol.EXIT:
                code = int(payload) if payload.isdigit() else ENVLAYER_FAILURE
                if not self.stdout_open:
                    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                    return BROKEN_PIPE_EXIT_CODE
                return code
            elif kind == protocol.STARTED:
                self.started_by = payload.decode() or "?"
            elif kind == protocol.NEED_STDIN:
                self.send_stdin()
            elif kind == protocol.IN_PROCESS:
                if payload:
                    note(payload.decode(errors="replace"))
                return None

    def lost(self) -> int | None:
        """The broker closed the connection without a verdict."""
        if not self.started_by and not self.stdin_sent:
            note("the broker went away before running the command; running in-process")
            return None
        if not self.started_by:  # its stdin is gone with the broker: it cannot run here either
            os.write(
                2,
                b"envlayer: error: the broker went away after reading the command's stdin, before running it\n"
                b"  hint: run it again with its input\n",
            )
            return ENVLAYER_FAILURE
        os.write(
            2,
            f"envlayer: error: the broker (pid {self.started_by}) went away while the command ran; it may or "
            "may not have finished, and was not run again\n"
            "  hint: run it again if that is safe; `envlayer broker status` shows the brokers\n".encode(),
        )
        return INTERRUPT_EXIT_CODE if self.interrupted else ENVLAYER_FAILURE


def exec_via_broker(argv: Sequence[str]) -> int | None:
    """Run ``envlayer exec`` (``argv`` without the program name) through the broker;
    see the module docstring for the result."""
    if not wanted(argv, os.environ):
        return None
    try:
        sock = _open(argv)
    except KeyboardInterrupt:  # while a broker was being started: nothing ran
        return INTERRUPT_EXIT_CODE
    if sock is None:
        return None
    relay = _Relay(sock)
    previous = _signal.signal(_signal.SIGINT, relay.on_sigint)
    try:
        protocol.send(sock, protocol.REQUEST, protocol.encode_request("exec", os.getcwd(), argv, os.environ))
        return relay.run()
    except KeyboardInterrupt:
        return INTERRUPT_EXIT_CODE
    except OSError:  # the connection broke while we wrote to it
        return relay.lost()
    finally:
        _signal.signal(_signal.SIGINT, previous)
        sock.close()


def main() -> None:
    """The ``envlayer`` console script: the broker when it can serve the command, else
    the in-process CLI (:func:`envlayer.cli.app.main`)."""
    code = exec_via_broker(sys.argv[1:])
    if code is None:
        from envlayer.cli.app import main as in_process

        code = in_process()
    sys.exit(code)
