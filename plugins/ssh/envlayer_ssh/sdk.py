"""paramiko: the one module of this plugin that imports it, on first use.

``from envlayer_ssh import sdk`` imports nothing; ``sdk.paramiko`` imports paramiko (with
cryptography, about 100 ms) the first time it is read (:mod:`envlayer.sandbox.lazy_sdk`),
so ``envlayer backends`` and the CLI's other calls that import the backend class pay
nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlayer.sandbox.lazy_sdk import lazy_modules

if TYPE_CHECKING:
    import paramiko

__all__ = ["paramiko"]

__getattr__ = lazy_modules(__name__, {"paramiko": "paramiko"})
