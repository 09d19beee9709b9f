"""An interactive shell in the task's sandbox over a Daytona PTY session: the Daytona
backend's ``open_terminal``, used by ``envlayer shell``. The contract is that of
:class:`envlayer.local.terminal.PtyTerminal`.

SDK (daytona 0.226.x): ``sandbox.process.create_pty_session(id, cwd, envs, pty_size)``
opens the toolbox's PTY WebSocket and returns a ``PtyHandle``; iterating it yields the
output until the shell ends, ``send_input`` types, ``resize(PtySize)`` calls the toolbox's
resize route, and ``exit_code`` is set from the daemon's exit message
(daytona/_sync/process.py, daytona/handle/pty_handle.py). The shell is the daemon's (the
sandbox user's shell), not the backend's ``shell`` option: the SDK takes no command."""

from __future__ import annotations

import uuid
from typing import Any

from envlayer.sandbox.piped_output import PipedOutput
from envlayer_daytona import sdk


class DaytonaTerminal(PipedOutput):
    """A PTY session of ``sandbox`` in ``cwd`` with ``envs``, its output relayed through a pipe."""

    def __init__(self, sandbox: Any, cwd: str, envs: dict[str, str], rows: int, cols: int) -> None:
        self._size = sdk.pty.PtySize
        self._handle = sandbox.process.create_pty_session(
            id=f"envlayer-shell-{uuid.uuid4().hex[:12]}",
            cwd=cwd,
            envs=envs,
            pty_size=sdk.pty.PtySize(rows=rows, cols=cols),
        )
        super().__init__(self._handle, "envlayer-daytona-tty")

    def write(self, data: bytes) -> None:
        self._handle.send_input(data)

    def resize(self, rows: int, cols: int) -> None:
        self._handle.resize(self._size(rows=rows, cols=cols))

    def close(self) -> int:  # type: ignore[override]
        """The shell's exit status (1 when the daemon sent none, e.g. the connection broke)."""
        try:
            super().close()
        finally:
            self._handle.disconnect()
        code = self._handle.exit_code
        return int(code) if code is not None else 1
