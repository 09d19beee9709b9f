"""An interactive shell on a pseudo-terminal of this machine: the local backend's
``open_terminal`` (used by ``envlayer shell``)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import termios


class PtyTerminal:
    """``shell`` started on a new pty in ``cwd`` with ``environ``; its master side.

    Contract of a terminal (``envlayer shell`` relies on it): ``fileno()`` is readable
    when the shell wrote; ``read()`` returns ``b""`` once it has ended; ``write(data)``
    types ``data``; ``resize(rows, cols)`` sets the window size (the shell gets
    SIGWINCH); ``close()`` ends it and returns its exit status (128 + N for signal N)."""

    def __init__(self, shell: str, cwd: str, environ: dict[str, str], rows: int, cols: int) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: never returns
            try:
                os.chdir(cwd)
                os.execvpe(shell, [shell, "-i"], environ)
            finally:
                os._exit(127)
        self._pid, self._fd = pid, fd
        self.resize(rows, cols)

    def fileno(self) -> int:
        return self._fd

    def read(self) -> bytes:
        try:
            return os.read(self._fd, 65536)
        except OSError:  # EIO: every slave side is closed, the shell ended
            return b""

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self._fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def close(self) -> int:
        os.close(self._fd)
        _, status = os.waitpid(self._pid, 0)
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
