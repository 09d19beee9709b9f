"""The Daytona SDK: the one module of this plugin that imports it, on first use.

``from envlayer_daytona import sdk`` imports nothing of the SDK; ``sdk.daytona``,
``sdk.errors`` (``daytona.common.errors``), ``sdk.pty`` (``daytona.common.pty``), and the
SDK's own dependencies ``sdk.urllib3`` and ``sdk.dotenv`` are imported the first time they
are read (:mod:`envlayer.sandbox.lazy_sdk`), so ``envlayer backends`` and the CLI's other
calls that import the backend class pay nothing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlayer.sandbox.lazy_sdk import lazy_modules

if TYPE_CHECKING:
    import daytona
    import daytona.common.errors as errors
    import daytona.common.pty as pty
    import dotenv
    import urllib3

__all__ = ["daytona", "dotenv", "errors", "pty", "urllib3"]

__getattr__ = lazy_modules(
    __name__,
    {
        "daytona": "daytona",
        "errors": "daytona.common.errors",
        "pty": "daytona.common.pty",
        "dotenv": "dotenv",
        "urllib3": "urllib3",
    },
)
