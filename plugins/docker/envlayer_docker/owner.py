"""Who owns a private container: the ``envlayer.owner`` label value and the liveness
check, as defined in :mod:`envlayer.sandbox_owner` (shared with the other backends)."""

from __future__ import annotations

from envlayer.sandbox_owner import owner_is_dead, owner_label

__all__ = ["owner_is_dead", "owner_label"]
