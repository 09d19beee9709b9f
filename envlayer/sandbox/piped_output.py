"""Output of a remote terminal that arrives through a blocking iterator (an SDK's stream),
made waitable: a daemon thread copies it into a pipe, so ``envlayer shell`` can select on
the pipe's read end. Used by the terminals of backends whose SDK gives no file descriptor
(Modal, Daytona, Kubernetes: its websocket may hold decrypted bytes that
``select`` on the socket does not show)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable


class PipedOutput:
    """``chunks`` copied into a pipe by a daemon thread; the pipe ends when they do (or
    when iterating them raises: a broken stream ends the terminal as its end does).
    A terminal subclasses it for ``fileno`` and ``read`` and calls its ``close``."""

    def __init__(self, chunks: Iterable[bytes], name: str) -> None:
        self._chunks = chunks
        self._read_fd, self._write_fd = os.pipe()
        self._copier = threading.Thread(target=self._copy, daemon=True, name=name)
        self._copier.start()

    def _copy(self) -> None:
        try:
            for chunk in self._chunks:
                view = memoryview(bytes(chunk))
                while view:
                    view = view[os.write(self._write_fd, view) :]
        except Exception:
            pass
        finally:
            os.close(self._write_fd)

    def fileno(self) -> int:
        return self._read_fd

    def read(self) -> bytes:
        """What arrived (up to 64 KiB); ``b""`` once the stream has ended."""
        return os.read(self._read_fd, 65536)

    def close(self) -> None:
        """Close the pipe's read end, then wait for the copy to end: the stream must have
        ended or end now (a copy blocked on a full pipe ends with ``EPIPE``)."""
        os.close(self._read_fd)
        self._copier.join()
