"""Cancelling a running ``exec`` from any thread: :class:`CancelToken`.

Pass a token to ``exec(..., cancel=token)`` of a backend that takes one (check with
:func:`takes_cancel`; the manager, the agent tools and :mod:`envlayer.aio` do) and call
``token.cancel()`` from any thread (or an asyncio task, or a signal handler's thread).
The backend kills the command's whole process tree in the sandbox, exactly as on a
timeout, and ``exec`` returns the output produced so far with
``ExecResult.cancelled = True`` and exit code 130. A token cancelled before the command
starts makes it be killed as soon as it starts. One token may serve several calls (all
are cancelled); it cannot be reset.

Backends register a *killer* for each running command with :meth:`CancelToken.on_cancel`
and remove it when the command ended; :meth:`cancel` runs the registered killers (each at
most once, on the cancelling thread; a failing killer is logged and the others still run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

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


def takes_cancel(env: object) -> bool:
    """True when ``env.exec`` takes a ``cancel`` keyword by name (see
    :func:`envlayer.capabilities.names_keyword`)."""
    from envlayer.capabilities import names_keyword

    func = getattr(env, "exec", None)
    return callable(func) and names_keyword(func, "cancel")


_NO_KILLER: AbstractContextManager[None] = nullcontext()


def killer_for(token: CancelToken | None, killer: Killer) -> AbstractContextManager[None]:
    """:meth:`CancelToken.on_cancel` when there is a token; a shared no-op context
    otherwise (most calls have no token: nothing is built for them)."""
    return _NO_KILLER if token is None else token.on_cancel(killer)
