"""A Harbor environment over envlayer backends: ``harbor run --env envlayer_harbor:Environment``.

``Environment`` is imported on first use (it needs Harbor, the ``harbor`` extra, on Python
3.12+); the package itself imports without it.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Environment"]


def __getattr__(name: str) -> Any:
    if name == "Environment":
        from envlayer_harbor.environment import Environment

        return Environment
    raise AttributeError(f"module 'envlayer_harbor' has no attribute {name!r}")
