"""The byte-stream interface a backend gives the core's exec parts, and two helpers on it.

A backend that can open a shell in its sandbox and talk to it over a byte stream (an
attached ``docker exec``, an SSH channel, a Kubernetes exec websocket, a Modal or
Daytona process handle) wraps that stream in an object satisfying :class:`ByteStream`;
:class:`envlayer.execution.shell_session.PersistentShell` then runs commands over it, and
:func:`drain_while` keeps reading it while a kill runs. :class:`ProcessStream` is the
reference implementation over a local process's pipes (used by the core's own tests and
by local shells).

A write may carry a deadline (:meth:`ByteStream.write`): a process that stops reading
(stopped, stuck, or a transport that stalls) never holds a call past its timeout.
:func:`write_within` is that write for a non-blocking file descriptor, :func:`call_within`
for an SDK call that has no timeout of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import math
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Protocol, TypeVar, runtime_checkable

from envlayer.errors import EnvlayerError
from envlayer.execution.collector import OutputCollector

T = TypeVar("T")
log = logging.getLogger("envlayer.session")

Chunks = list[tuple[str, bytes]]
"""What one read returns: ``("stdout" | "stderr", bytes)`` pairs, in arrival order."""


class StreamEnded(BrokenPipeError, EnvlayerError):
    """What :meth:`ByteStream.write` may raise when the stream had ended before any byte
    of the data went out: the process received none of it (a shell found gone this way
    provably did not start the command). A stream that cannot tell raises a plain
    ``OSError``; being one too, this reaches every handler of a broken stream."""

    def __init__(self, message: str) -> None:
        BrokenPipeError.__init__(self, message)
        self.message, self.hint = message, ""

    def __str__(self) -> str:
        return self.message


class WriteTimedOut(EnvlayerError):
    """What :meth:`ByteStream.write` raises when its deadline passed before all of the data
    went out (some of it may have): the process stopped reading, or the transport stalled.
    The caller kills the process, as on any timeout (the session makes the call a timeout:
    it never reaches the user)."""


@runtime_checkable
class ByteStream(Protocol):
    """A bidirectional byte stream to a process in the sandbox (typically a shell).

    Implementations are used by one thread at a time, except that :meth:`close` may be
    called from another thread to unblock a reader.

    A stream whose :meth:`write` always raises :class:`StreamEnded` when the process is
    gone (none of the data went out) says so with a class attribute ``ends_seen_on_write
    = True`` (:class:`ProcessStream` does): a session then sends a command whose output
    is not streamed without first looking for the end of the stream (one read less).
    One that keeps the order of writes across its two outputs (what the process wrote on
    one before it wrote on the other is readable once the later bytes have been read:
    local pipes) says so with ``keeps_write_order = True``: its shell then prints no
    stderr marker (see :func:`~envlayer.execution.shell_script.init_script`).
    """

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Send all of ``data`` to the process's stdin. Raises ``OSError`` when the
        stream is closed or broken (the caller treats that as the process being gone),
        :class:`StreamEnded` when it knows that none of ``data`` went out. With
        ``deadline`` (a ``time.monotonic()`` value) it raises :class:`WriteTimedOut` once
        the deadline passes before all of ``data`` went out; without one it waits for as
        long as the process takes to read it."""

    def read(self, deadline: float | None) -> Chunks | None:
        """Wait for output until ``deadline`` (a ``time.monotonic()`` value; ``None`` =
        no limit). Returns the chunks available as soon as there are any, ``[]`` when
        the deadline passed first, ``None`` once the stream ended (EOF on both streams,
        or a broken transport; every byte received was returned before). Never raises
        for a broken transport: :meth:`exit_status` tells the two apart."""

    def exit_status(self, wait: float) -> int | None:
        """After ``read`` returned ``None``: the process's exit status, waiting up to
        ``wait`` seconds for the transport to learn it; ``None`` when it cannot tell.
        Raises :class:`~envlayer.errors.BackendUnavailable` (or a subclass, such as
        SSH's ``ConnectionLost``) when the transport itself is lost: the caller must
        then not guess an exit code."""

    def close(self) -> None:
        """Release the stream. Idempotent; never raises. The process sees EOF on stdin."""


def drain_while(stream: ByteStream, collector: OutputCollector, action: Callable[[], T], *, settle: float = 1.0) -> T:
    """Run ``action`` (typically the kill of the command writing to ``stream``) while a
    helper thread keeps reading ``stream`` into ``collector``.

    A command flooding its output can block the sandbox (or the daemon between) until
    its stream is read; the kill path must never depend on that, so the stream is read,
    and what exceeds the caps dropped, for as long as the kill runs. The collector is
    muted first (the callback only runs on the calling thread). After ``action``,
    reading goes on for up to ``settle`` seconds or until the stream ends, so the
    output the command wrote before it died is kept. Returns what ``action`` returned.
    """
    collector.mute()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            chunks = stream.read(time.monotonic() + 0.05)
            if chunks is None:
                return
            for name, data in chunks:
                collector.write(name, data)

    reader = threading.Thread(target=pump, name="envlayer-drain", daemon=True)
    reader.start()
    try:
        return action()
    finally:
        reader.join(settle)
        stop.set()
        reader.join(1.0)


@functools.lru_cache(maxsize=256)
def _write_takes_deadline(stream_type: type) -> bool:
    """Whether ``stream_type.write`` takes a ``deadline`` (the contract's second argument)."""
    try:
        parameters = list(inspect.signature(stream_type.write).parameters.values())
    except (TypeError, ValueError):
        return True  # no signature to read: trust the contract
    return len(parameters) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def write_by(stream: ByteStream, data: bytes, deadline: float | None) -> None:
    """``stream.write(data, deadline)``. A stream written to the contract from before writes
    took a deadline (its ``write`` takes ``data`` alone) is sent ``data`` without one, and a
    warning names its class once: such a send waits as long as the process takes."""
    kind = type(stream)
    if _write_takes_deadline(kind):
        stream.write(data, deadline)
        return
    if kind not in _WARNED_NO_DEADLINE:
        _WARNED_NO_DEADLINE.add(kind)
        log.warning(
            "%s.write takes no deadline (ByteStream.write(data, deadline)): raw input sent through it "
            "is not bounded by the call's timeout",
            kind.__qualname__,
        )
    stream.write(data)


_WARNED_NO_DEADLINE: set[type] = set()


def write_within(fd: int, data: bytes | memoryview, deadline: float | None) -> None:
    """Write all of ``data`` to the non-blocking file descriptor ``fd``, waiting for room
    (``poll``) until ``deadline`` (``None``: no limit). Raises :class:`WriteTimedOut` when
    it passes first, and what ``os.write`` raises (``BrokenPipeError`` once nothing reads)."""
    view = memoryview(data)
    poller: select.poll | None = None
    while view:
        try:
            view = view[os.write(fd, view) :]
            continue
        except BlockingIOError:
            pass
        if poller is None:
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
        wait_ms = None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WriteTimedOut(
                    f"the process took {len(data) - len(view)} of {len(data)} bytes before the deadline"
                )
            wait_ms = math.ceil(left * 1000)
        poller.poll(wait_ms)


def on_thread(call: Callable[[], T], name: str) -> Future[T]:
    """``call()`` started on a daemon thread called ``name``, in a copy of the caller's
    context; its result or exception comes in the returned future (a caller that stops
    waiting leaves it to end in the background)."""
    outcome: Future[T] = Future()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome.set_result(context.run(call))
        except BaseException as exc:  # handed to the waiting caller
            outcome.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return outcome


def call_within(call: Callable[[], T], deadline: float) -> T:
    """``call()``'s result or exception (a write through an SDK that gives it no timeout),
    run :func:`on_thread` and waited for until ``deadline``: raises :class:`WriteTimedOut`
    when it passes first (the call goes on in the background, its outcome dropped)."""
    outcome = on_thread(call, "envlayer-write")
    try:
        return outcome.result(timeout=max(deadline - time.monotonic(), 0.0))
    except TimeoutError:
        raise WriteTimedOut("the write did not finish before the deadline") from None


_READ_CHUNK = 65536
"""Bytes asked for per read of a pipe: a pipe holds 64 KiB (Linux's default size, which
nothing here enlarges), so asking for more never returns more; and a larger request
makes CPython allocate that much for each read (above glibc's 128 KiB threshold: an
``mmap``, an ``mremap`` to shrink it, a ``munmap``, three syscalls per read)."""


class ProcessStream:
    """:class:`ByteStream` over a local process's stdin/stdout/stderr pipes.

    Reads wait on one ``epoll`` of the two output pipes and read each ready pipe once;
    writes go to the stdin pipe (non-blocking, so a write can keep a deadline) with
    ``os.write`` (no buffer in between). A session call makes one write and one or two
    reads, so this path is kept to the syscalls it needs."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self._stdin = proc.stdin.fileno()
        os.set_blocking(self._stdin, False)
        self._poll = select.epoll()
        self._names: dict[int, str] = {}
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            self._poll.register(pipe.fileno(), select.EPOLLIN)
            self._names[pipe.fileno()] = name
        self._closed = False

    @classmethod
    def spawn(cls, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> ProcessStream:
        """Start ``argv`` in its own session with piped stdio. Raises ``OSError``."""
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        """The process's pid (also its process group and session id)."""
        return self.proc.pid

    ends_seen_on_write = True
    """A pipe without a reader takes no byte (``EPIPE``): see :class:`ByteStream`."""
    keeps_write_order = True
    """A write to a pipe returns once its bytes are in the pipe (or blocks while it is
    full): what a process wrote on stderr before it wrote on stdout is there to read. Not
    necessarily in the same read: the process writes on while a read takes its pipes in
    turn, so stdout read after ``epoll`` answered may hold bytes written after stderr was
    looked at."""

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Send ``data`` in one ``write`` when the pipe takes it all, else the rest as the
        process reads it (:func:`write_within`: :class:`WriteTimedOut` once ``deadline``
        passes); raises :class:`StreamEnded` when the process was gone before any of it
        went out, another ``OSError`` (``BrokenPipeError``) when it went away during the
        write."""
        if self._closed:
            raise BrokenPipeError("stream closed")
        try:
            sent = os.write(self._stdin, data)
        except BlockingIOError:
            sent = 0
        except BrokenPipeError as exc:
            raise StreamEnded(f"the process had closed its input: {exc}") from exc
        if sent < len(data):
            write_within(self._stdin, memoryview(data)[sent:], deadline)

    def read(self, deadline: float | None) -> Chunks | None:
        """See :meth:`ByteStream.read`."""
        names = self._names
        while True:
            if self._closed or not names:
                return None
            wait = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
            chunks: Chunks = []
            try:
                ready = self._poll.poll(wait)
            except (OSError, ValueError):
                return None  # closed from another thread
            for fd, _ in ready:
                try:
                    data = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    chunks.append((names[fd], data))
                else:
                    del names[fd]
                    with contextlib.suppress(OSError, ValueError):  # ValueError: closed meanwhile
                        self._poll.unregister(fd)
            if chunks or (deadline is not None and time.monotonic() >= deadline):
                return chunks

    def exit_status(self, wait: float) -> int | None:
        """See :meth:`ByteStream.exit_status`; a signal ``N`` is reported as ``128 + N``."""
        try:
            code = self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None
        return 128 - code if code < 0 else code

    def close(self) -> None:
        """Close the pipes (the process sees EOF on stdin; it is not killed). A process
        that already ended is reaped, so no zombie is left behind."""
        if self._closed:
            return
        self._closed = True
        self.proc.poll()
        self._poll.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
