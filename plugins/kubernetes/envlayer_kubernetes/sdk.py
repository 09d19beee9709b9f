"""The Kubernetes client: the one module of this plugin that imports it, on first use.

``from envlayer_kubernetes import sdk`` imports nothing of the client; each attribute is
imported the first time it is read (:mod:`envlayer.sandbox.lazy_sdk`), so ``envlayer
backends`` and the CLI's other calls that import the backend class pay nothing for it:
``sdk.client`` (``kubernetes.client``), ``sdk.config`` (``kubernetes.config``),
``sdk.config_exception``, ``sdk.kube_config``, ``sdk.exceptions``
(``kubernetes.client.exceptions``), ``sdk.ws_client`` (``kubernetes.stream.ws_client``),
and the client's own dependencies ``sdk.websocket`` (websocket-client), ``sdk.urllib3``
and ``sdk.certifi``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlayer.sandbox.lazy_sdk import lazy_modules

if TYPE_CHECKING:
    import certifi
    import kubernetes.client as client
    import kubernetes.client.exceptions as exceptions
    import kubernetes.config as config
    import kubernetes.config.config_exception as config_exception
    import kubernetes.config.kube_config as kube_config
    import kubernetes.stream.ws_client as ws_client
    import urllib3
    import websocket

__all__ = [
    "certifi",
    "client",
    "config",
    "config_exception",
    "exceptions",
    "kube_config",
    "urllib3",
    "websocket",
    "ws_client",
]

__getattr__ = lazy_modules(
    __name__,
    {
        "client": "kubernetes.client",
        "config": "kubernetes.config",
        "config_exception": "kubernetes.config.config_exception",
        "kube_config": "kubernetes.config.kube_config",
        "exceptions": "kubernetes.client.exceptions",
        "ws_client": "kubernetes.stream.ws_client",
        "websocket": "websocket",
        "urllib3": "urllib3",
        "certifi": "certifi",
    },
)
