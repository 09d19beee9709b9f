"""Cancelling a running command inside a backend: :func:`killer_for`.

:class:`~envlayer.cancel_token.CancelToken` itself is part of the contract and lives in
:mod:`envlayer.cancel_token`; this old path still exports it (for one release).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from envlayer.cancel_token import CancelToken, Killer
from envlayer.capabilities import Capability, supports

__all__ = ["CancelToken", "Killer", "killer_for", "takes_cancel"]

_NO_KILLER: AbstractContextManager[None] = nullcontext()


def killer_for(token: CancelToken | None, killer: Killer) -> AbstractContextManager[None]:
    """:meth:`CancelToken.on_cancel` when there is a token; a shared no-op context
    otherwise (most calls have no token: nothing is built for them)."""
    return _NO_KILLER if token is None else token.on_cancel(killer)


def takes_cancel(env: object) -> bool:
    """True when ``env`` has the ``cancel`` capability (declared, or for an ``exec``
    written to the old keyword contract, a ``cancel`` keyword by name). Kept for one
    release: :func:`envlayer.run` applies the rule itself."""
    return supports(env, Capability.CANCEL)
