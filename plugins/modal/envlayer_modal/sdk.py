"""The Modal SDK: the one module of this plugin that imports it, on first use.

``from envlayer_modal import sdk`` imports nothing of the SDK; ``sdk.modal``,
``sdk.exception`` (``modal.exception``), ``sdk.types`` (``modal.types``) and
``sdk.experimental`` (``modal.experimental``) are imported the first time they are read
(:mod:`envlayer.sandbox.lazy_sdk`). The SDK (with grpclib, protobuf and aiohttp) costs
0.4-0.8 s of CPU to import, which ``envlayer backends`` and the CLI's other calls that
import the backend class never pay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlayer.sandbox.lazy_sdk import lazy_modules

if TYPE_CHECKING:
    import modal
    import modal.exception as exception
    import modal.experimental as experimental
    import modal.types as types

__all__ = ["exception", "experimental", "modal", "types"]

__getattr__ = lazy_modules(
    __name__,
    {"modal": "modal", "exception": "modal.exception", "experimental": "modal.experimental", "types": "modal.types"},
)
