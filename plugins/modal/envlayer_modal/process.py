"""One started ``Sandbox.exec``, read without blocking the caller.

The SDK's blocking stdout/stderr iterators cannot be given a deadline, so two daemon
threads iterate them and put ``(fd, chunk)`` events on one queue (``chunk`` None at end of
stream), and a third waits for the exit code (``(EXIT, code)``). The caller takes events
with :meth:`Process.next_event` and a timeout, so deadlines, interrupts and streaming
callbacks all happen on the calling thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

STDOUT, STDERR, EXIT = 1, 2, 0
_STDIN_CHUNK = 1 << 20


class Process:
    """Wraps an SDK ``ContainerProcess`` started with ``text=False``."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.events: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(STDOUT, proc.stdout), daemon=True, name="envlayer-modal-out"),
            threading.Thread(target=self._pump, args=(STDERR, proc.stderr), daemon=True, name="envlayer-modal-err"),
            threading.Thread(target=self._wait, daemon=True, name="envlayer-modal-wait"),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, fd: int, stream: Any) -> None:
        try:
            for chunk in stream:
                if chunk:
                    self.events.put((fd, bytes(chunk)))
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.events.put((fd, None))

    def _wait(self) -> None:
        try:
            code: int | None = self.proc.wait()
        except BaseException as exc:
            self.errors.append(exc)
            code = None
        self.events.put((EXIT, code))

    def next_event(self, timeout: float | None) -> tuple[int, Any] | None:
        """The next event, or None when ``timeout`` seconds pass without one."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def send(self, data: bytes, *, eof: bool = False) -> None:
        """Write ``data`` to the process's stdin (in 1 MiB writes, each drained); with
        ``eof``, close it afterwards. Raises the SDK's errors."""
        stdin = self.proc.stdin
        for start in range(0, len(data), _STDIN_CHUNK):
            stdin.write(data[start : start + _STDIN_CHUNK])
            stdin.drain()
        if eof:
            stdin.write_eof()
            stdin.drain()
