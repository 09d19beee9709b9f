"""The command that keeps a managed container (and a helper container) running while
nothing else runs in it: PID 1 (or the init's child) sleeps for ~68 years."""

from __future__ import annotations

KEEPALIVE = ["sleep", "2147483647"]
