"""An interactive shell on the host with a pseudo-terminal (what ``ssh -t host`` does):
the ssh backend's ``open_terminal``, used by ``envlayer shell``. The contract is that of
:class:`envlayer.local.terminal.PtyTerminal`.

paramiko (channel.py): ``Channel.get_pty(term, width, height)`` asks sshd for a pty,
``exec_command`` starts the shell on it, ``resize_pty(width, height)`` sends a
window-change request (the shell gets SIGWINCH), ``recv_exit_status()`` waits for the
exit status, and ``fileno()`` is readable when output arrived or the channel closed.

The environment's variables go in a 0600 file the shell sources and removes before
anything is typed, never in the command line (``ps`` shows command lines to every
user) nor typed on the terminal (it would echo them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer_ssh import sdk

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

NO_EXIT_STATUS = 255
"""The exit status when the channel closed without one (as OpenSSH's ``ssh`` reports)."""


class SSHTerminal:
    """``line`` (the exec request sent to sshd) running on a new pty of ``pool``'s host."""

    def __init__(self, pool: TargetPool, line: str, term: str, rows: int, cols: int) -> None:
        self._lease = pool.open()
        self._channel = self._lease.channel
        try:
            self._channel.get_pty(term=term, width=cols, height=rows)
            self._channel.exec_command(line)
        except Exception as exc:
            self._lease.release()
            raise BackendUnavailable(
                f"{pool.target.describe()} refused an interactive shell ({type(exc).__name__}: {exc})",
                hint="check that the server allows a pty (PermitTTY) and its log",
            ) from exc

    def fileno(self) -> int:
        return self._channel.fileno()

    def read(self) -> bytes:
        try:
            return bytes(self._channel.recv(65536))
        except OSError:
            return b""

    def write(self, data: bytes) -> None:
        self._channel.sendall(data)

    def resize(self, rows: int, cols: int) -> None:
        try:
            self._channel.resize_pty(width=cols, height=rows)
        except (sdk.paramiko.SSHException, OSError):
            pass  # the channel closed meanwhile: the next read reports the end

    def close(self) -> int:
        """The shell's exit status (waits for it), after which the channel is closed."""
        try:
            code = self._channel.recv_exit_status()
        finally:
            self._lease.release()
        return code if code >= 0 else NO_EXIT_STATUS
