"""``ExecResult``: what one command produced."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from envlayer.errors import CommandFailed, ExecTimeout
from envlayer.execution.output import Truncation

TIMEOUT_EXIT_CODE = 124
"""Exit code reported for a command killed by its timeout (as GNU ``timeout`` does)."""

INTERRUPT_EXIT_CODE = 130
"""Exit code reported for a command killed because the caller was interrupted."""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of :meth:`Environment.exec`.

    ``stdout`` and ``stderr`` are the raw bytes, kept apart. When a stream exceeded the
    environment's output cap, its ``*_truncation`` says how many bytes were dropped and
    under which policy; otherwise it is ``None`` and the bytes are exactly what the
    command wrote. ``exit_code`` is the command's status, ``124`` when ``timed_out``.
    ``duration`` is wall-clock seconds measured by the client. ``recovered`` is empty,
    or says what the backend had to re-establish before it could run this command
    (``"container recreated"``, ``"reconnected"``): whatever the sandbox held only in
    memory (session ``cd``/``export``, background processes) may be gone.
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    duration: float = 0.0
    timed_out: bool = False
    timeout: float | None = None
    stdout_truncation: Truncation | None = None
    stderr_truncation: Truncation | None = None
    recovered: str = ""
    cancelled: bool = False
    """The call's :class:`~envlayer.execution.cancel.CancelToken` was cancelled: the command's tree
    was killed, ``exit_code`` is 130 and the output is what it wrote until then."""
    notice: str = ""
    """Something the caller (or a model) should know about how the command ran, e.g. that
    its working directory had been deleted and it ran in the nearest existing parent."""

    def with_notice(self, notice: str) -> ExecResult:
        """A copy with ``notice`` set."""
        return dataclasses.replace(self, notice=notice)

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and was neither timed out nor cancelled."""
        return self.exit_code == 0 and not self.timed_out and not self.cancelled

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8; undecodable bytes become U+FFFD."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8; undecodable bytes become U+FFFD."""
        return self.stderr.decode("utf-8", errors="replace")

    @property
    def truncated(self) -> bool:
        """True when either stream was cut by the output cap."""
        return self.stdout_truncation is not None or self.stderr_truncation is not None

    def check(self) -> ExecResult:
        """Return ``self`` if :attr:`ok`.

        Raises:
            ExecTimeout: the command hit its timeout.
            CommandFailed: the command exited non-zero.
        """
        if self.timed_out:
            raise ExecTimeout(self, self.timeout)
        if self.exit_code != 0:
            raise CommandFailed(self, self.exit_code)
        return self
