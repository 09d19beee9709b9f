"""One command's output on its way to an :class:`~envlayer.result.ExecResult`.

Every backend feeds what it reads (``"stdout"``/``"stderr"`` chunks) to one
:class:`OutputCollector`, which applies the environment's caps (``max_output_bytes``
per stream under ``output_policy``, see :mod:`envlayer.execution.output`), hands each chunk to the
caller's ``on_output`` callback, and builds the result. Memory stays bounded by the
caps whatever the command writes: bytes past a cap are counted, then dropped.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from envlayer.execution.output import CappedBuffers, OutputCallback, TruncationPolicy
from envlayer.result import INTERRUPT_EXIT_CODE, TIMEOUT_EXIT_CODE, ExecResult

if TYPE_CHECKING:
    from envlayer.options import BaseOptions
    from envlayer.request import ExecRequest


class OutputCollector:
    """Capped capture of stdout and stderr plus the streaming callback.

    ``write`` may be called from one thread at a time. After :meth:`mute` the callback
    is no longer called: output read while a command is being killed (on a helper
    thread) is still captured and counted, but never delivered to the caller's callback
    from a thread other than the calling one.
    """

    def __init__(self, limit: int | None, policy: TruncationPolicy, on_output: OutputCallback | None = None) -> None:
        self.buffers = CappedBuffers(limit, policy)
        self.on_output = on_output

    @classmethod
    def for_request(cls, request: ExecRequest, options: BaseOptions) -> OutputCollector:
        """A collector with ``options``' caps, streaming to ``request.on_output``."""
        return cls(options.max_output_bytes, options.output_policy, request.on_output)

    def write(self, stream: str, data: bytes) -> None:
        """Capture ``data`` for ``stream`` (``"stdout"`` or ``"stderr"``) and stream it."""
        if not data:
            return
        self.buffers[stream].write(data)
        callback = self.on_output
        if callback is not None:
            callback(stream, data)

    def mute(self) -> None:
        """Stop calling ``on_output`` (the capture goes on)."""
        self.on_output = None

    def total(self, stream: str) -> int:
        """Bytes received so far on ``stream``, dropped ones included."""
        return self.buffers[stream].total

    def result(
        self, request: ExecRequest, exit_code: int, *, timed_out: bool = False, recovered: str = ""
    ) -> ExecResult:
        """The finished result. With ``timed_out`` the exit code is always 124; a
        request whose token was cancelled gives ``cancelled=True`` and exit code 130
        (unless it timed out first)."""
        stdout, stdout_truncation = self.buffers.taken("stdout")
        stderr, stderr_truncation = self.buffers.taken("stderr")
        cancelled = request.cancel is not None and request.cancel.cancelled and not timed_out
        return ExecResult(
            TIMEOUT_EXIT_CODE if timed_out else INTERRUPT_EXIT_CODE if cancelled else exit_code,
            stdout,
            stderr,
            time.monotonic() - request.start,
            timed_out,
            request.timeout,
            stdout_truncation,
            stderr_truncation,
            recovered,
            cancelled,
        )
