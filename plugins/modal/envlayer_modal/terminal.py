"""An interactive shell with a pseudo-terminal in the task's sandbox: the Modal backend's
``open_terminal``, used by ``envlayer shell``. The contract is that of
:class:`envlayer.local.terminal.PtyTerminal`, except that ``resize`` cannot
reach the sandbox.

The SDK's ``Sandbox.exec(..., pty=True)`` starts the command on a pty whose size is the
window of the calling process's stdin at that moment (``default_pty_info`` in
modal/sandbox/_common.py, ``get_pty_info`` in modal/_output/pty.py); stdout and stderr
arrive merged on stdout. modal 1.6.x has no call that changes the size of a running
exec's pty, so a window resize is not passed on."""

from __future__ import annotations

from typing import Any

from envlayer.sandbox.piped_output import PipedOutput


class ModalTerminal(PipedOutput):
    """A started pty exec (``text=False``); its stdout is relayed through a pipe."""

    def __init__(self, proc: Any) -> None:
        self._proc = proc
        super().__init__(proc.stdout, "envlayer-modal-tty")

    def write(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.drain()

    def resize(self, rows: int, cols: int) -> None:
        """Nothing: the SDK offers no resize of an exec's pty (see the module's note)."""

    def close(self) -> int:  # type: ignore[override]
        """The shell's exit status once it has ended (waits for it)."""
        try:
            return int(self._proc.wait())
        finally:
            super().close()
