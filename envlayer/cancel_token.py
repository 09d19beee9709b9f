"""Cancelling a running ``exec`` from any thread: :class:`CancelToken` (part of the contract).

Pass a token as ``cancel=token`` to :func:`envlayer.run` (or ``env.exec``) and call
``token.cancel()`` from any thread (or an asyncio task, or a signal handler's thread).
A backend that declares the ``cancel`` capability (every built-in backend) kills the
command's whole process tree in the sandbox, exactly as on a timeout, and the call
returns the output produced so far with ``ExecResult.cancelled = True`` and exit code
130. A token cancelled before the command starts makes it be killed as soon as it
starts. One token may serve several calls (all are cancelled); it cannot be reset.

On a backend without it the token is not passed on and the command runs to its end or
its timeout (a DEBUG line of ``envlayer.lifecycle`` says so).

Backends register a *killer* for each running command with :meth:`CancelToken.on_cancel`
and remove it when the command ended; :meth:`cancel` runs the registered killers (each at
most once, on the cancelling thread; a failing killer is logged and the others still run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("envlayer.cancel")

Killer = Callable[[], object]


class CancelToken:
    """A thread-safe, one-way "stop" signal for running commands; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._killers: dict[int, Killer] = {}
        self._next = 0

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Mark the token cancelled and kill every command registered on it. Idempotent;
        never raises."""
        with self._lock:
            self._cancelled = True
            killers, self._killers = list(self._killers.values()), {}
        for killer in killers:
            _run(killer)

    @contextmanager
    def on_cancel(self, killer: Killer) -> Iterator[None]:
        """Within the block, :meth:`cancel` runs ``killer``; when the token is already
        cancelled, ``killer`` runs at once (on entry)."""
        with self._lock:
            already = self._cancelled
            key = self._next
            self._next += 1
            if not already:
                self._killers[key] = killer
        if already:
            _run(killer)
        try:
            yield
        finally:
            with self._lock:
                self._killers.pop(key, None)


def _run(killer: Killer) -> None:
    try:
        killer()
    except Exception:
        log.warning("killing a cancelled command failed", exc_info=True)
