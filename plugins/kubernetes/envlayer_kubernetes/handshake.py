"""Opening the exec websocket (``pods/{name}/exec``) without ``kubernetes.stream.stream()``.

Why not ``stream()``: it swaps the request method (``call_api``) of the ``ApiClient`` it is
given for the websocket one while it connects (``kubernetes/stream/stream.py``,
``_websocket_request``). The backend shares one ``ApiClient`` per process, so a REST call
from another thread during a handshake (a create, a status poll, a delete) went out as a
websocket request and failed ("Handshake status 200 OK"). And with ``_preload_content=False``
its ``_request_timeout`` never reaches the socket (``ws_client.websocket_call`` builds the
``WSClient`` and returns it; ``create_websocket`` connects with no timeout), so a stalled
handshake hung forever.

Here the request is serialized by the shared client's public ``param_serialize`` (URL,
query, the kubeconfig's credentials, refreshed through the configuration's hook as for
every REST call), which reads the client but never changes it; the websocket is opened
with the same TLS and proxy settings ``ws_client.create_websocket`` uses, bounded by a
timeout, and no lock is held across it.
"""

from __future__ import annotations

import ssl
from typing import Any

from envlayer_kubernetes import sdk

EXEC_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/exec"
SUBPROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
"""Offered in this order; the server picks one (``ws.subprotocol``)."""


class HandshakeRefused(Exception):
    """The API server answered the upgrade with an HTTP status instead of switching
    protocols (``status``; ``body`` is the Status JSON it sent, if any)."""

    def __init__(self, status: int, reason: str, body: str | None, headers: dict[str, str] | None) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers or {}


def exec_url_and_headers(api_client: Any, namespace: str, pod: str, query: list[tuple[str, Any]]) -> tuple[str, dict]:
    """The ``ws://``/``wss://`` URL of an exec and its request headers (credentials
    included), as the generated ``connect_get_namespaced_pod_exec`` serializes them
    (``command`` repeated once per argument)."""
    _, url, headers, _, _ = api_client.param_serialize(
        method="GET",
        resource_path=EXEC_PATH,
        path_params={"namespace": namespace, "name": pod},
        query_params=query,
        header_params={},
        auth_settings=["BearerToken"],
        collection_formats={"command": "multi"},
    )
    return sdk.ws_client.get_websocket_url(url), headers


def _ssl_options(configuration: Any, url: str) -> dict[str, Any]:
    """TLS options as ``kubernetes.stream.ws_client.create_websocket`` sets them."""
    if url.startswith("wss://") and configuration.verify_ssl:
        opts: dict[str, Any] = {
            "cert_reqs": ssl.CERT_REQUIRED,
            "ca_certs": configuration.ssl_ca_cert or sdk.certifi.where(),
        }
        if configuration.assert_hostname is not None:
            opts["check_hostname"] = configuration.assert_hostname
    else:
        opts = {"cert_reqs": ssl.CERT_NONE}
    if configuration.cert_file:
        opts["certfile"] = configuration.cert_file
    if configuration.key_file:
        opts["keyfile"] = configuration.key_file
    if configuration.tls_server_name:
        opts["server_hostname"] = configuration.tls_server_name
    return opts


def open_exec_websocket(
    api_client: Any, namespace: str, pod: str, query: list[tuple[str, Any]], *, timeout: float
) -> Any:
    """Connect the exec websocket; the handshake (TCP, TLS, HTTP upgrade) must finish
    within ``timeout`` seconds. Returns a connected ``websocket.WebSocket`` in blocking
    mode. Raises :class:`HandshakeRefused` for an HTTP answer other than 101, and
    ``OSError``/``websocket.WebSocketException`` for a transport failure or timeout."""
    configuration = api_client.configuration
    url, headers = exec_url_and_headers(api_client, namespace, pod, query)
    header = [f"authorization: {v}" for k, v in headers.items() if k.lower() == "authorization"]
    connect_opt: dict[str, Any] = {"header": header, "subprotocols": SUBPROTOCOLS, "timeout": timeout}
    if configuration.proxy or configuration.proxy_headers:
        connect_opt = sdk.ws_client.websocket_proxycare(connect_opt, configuration, url, headers)
    ws = sdk.websocket.WebSocket(sslopt=_ssl_options(configuration, url), skip_utf8_validation=False)
    try:
        ws.connect(url, **connect_opt)
    except sdk.websocket.WebSocketBadStatusException as exc:
        ws.close()
        body = exc.resp_body.decode("utf-8", errors="replace") if exc.resp_body else None
        raise HandshakeRefused(exc.status_code, exc.status_message or "", body, exc.resp_headers) from exc
    except BaseException:
        ws.close()
        raise
    ws.settimeout(None)  # reads wait in select() with their own deadline; writes block
    return ws
