"""``ExecResult``: what one command produced."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from envlayer.errors import CommandFailed, ExecTimeout
from envlayer.frozen import one_store_init

TIMEOUT_EXIT_CODE = 124
"""Exit code reported for a command killed by its timeout (as GNU ``timeout`` does)."""

INTERRUPT_EXIT_CODE = 130
"""Exit code reported for a command killed because the caller was interrupted."""

TruncationPolicy = Literal["head_tail", "head", "tail"]
POLICIES: tuple[str, ...] = ("head_tail", "head", "tail")
"""The output policies (``output_policy``): what an output cap keeps of a stream."""


@dataclass(frozen=True)
class Truncation:
    """What a cap removed from one stream.

    ``kept_head`` bytes from the start and ``kept_tail`` bytes from the end were kept;
    ``dropped`` bytes in between (or at one end) were discarded; ``total`` is the
    full length the command produced.
    """

    policy: str
    total: int
    dropped: int
    kept_head: int
    kept_tail: int

    def marker(self) -> bytes:
        """The notice inserted where bytes were dropped."""
        return f"\n[... {self.dropped} bytes omitted of {self.total} ({self.policy}) ...]\n".encode()


@one_store_init
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
    """The call's :class:`~envlayer.cancel_token.CancelToken` was cancelled: the command's tree
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
