"""An interactive shell with a pseudo-terminal in the task's sandbox: the Modal backend's
``open_terminal``, used by ``envlayer shell``. The contract is that of
:class:`envlayer.backends.local_terminal.PtyTerminal`, except that ``resize`` cannot
reach the sandbox.

The SDK's ``Sandbox.exec(..., pty=True)`` starts the command on a pty whose size is the
window of the calling process's stdin at that moment (``default_pty_info`` in
modal/sandbox/_common.py, ``get_pty_info`` in modal/_output/pty.py); stdout and stderr
arrive merged on stdout. modal 1.6.x has no call that changes the size of a running
exec's pty, so a window resize is not passed on."""

from __future__ import annotations

import os
import threading
from typing import Any


class ModalTerminal:
    """A started pty exec (``text=False``) relayed through a pipe so that ``fileno`` can
    be waited on: a daemon thread copies the SDK's blocking stdout iterator into it."""

    def __init__(self, proc: Any) -> None:
        self._proc = proc
        self._read_fd, self._write_fd = os.pipe()
        self._copier = threading.Thread(target=self._copy_output, daemon=True, name="envlayer-modal-tty")
        self._copier.start()

    def _copy_output(self) -> None:
        try:
            for chunk in self._proc.stdout:
                view = memoryview(bytes(chunk))
                while view:
                    view = view[os.write(self._write_fd, view) :]
        except Exception:  # noqa: BLE001 - a broken stream ends the terminal like its end does
            pass
        finally:
            os.close(self._write_fd)  # read() now sees the end

    def fileno(self) -> int:
        return self._read_fd

    def read(self) -> bytes:
        return os.read(self._read_fd, 65536)

    def write(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.drain()

    def resize(self, rows: int, cols: int) -> None:
        """Nothing: the SDK offers no resize of an exec's pty (see the module's note)."""

    def close(self) -> int:
        """The shell's exit status once it has ended (waits for it)."""
        try:
            return int(self._proc.wait())
        finally:
            self._copier.join()
            os.close(self._read_fd)
