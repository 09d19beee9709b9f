"""Connecting to the Docker daemon, and turning transport failures into envlayer errors.

Which daemon: the ``docker_host`` option, else ``DOCKER_HOST``, else the current Docker
CLI context's endpoint, else the first local socket that exists among Docker's, rootless
Docker's and Podman's (see :func:`discover_address`).

One low-level ``docker.APIClient`` per (:func:`client_identity`, timeout) is shared by
every environment of the process (it is thread-safe for our use, and sharing it saves the
API version negotiation on every attach): the daemon address, and a digest of the TLS
settings and files and of the registry credentials file (``DOCKER_CONFIG``), so callers
of one broker with different daemons or credentials never share a client. The SDK is
read through :mod:`envlayer_docker.sdk`, which imports it on first use.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from envlayer.discovery.install_hints import docker_start_hint
from envlayer.errors import BackendUnavailable
from envlayer.sandbox.client_identity import ClientIdentity, file_digest, files_digest
from envlayer_docker import sdk
from envlayer_docker.options import DockerOptions

_CLIENTS: dict[tuple[ClientIdentity, float], Any] = {}
_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child must not share pooled connections
    os.register_at_fork(after_in_child=_CLIENTS.clear)


DEFAULT_SOCKET = "/var/run/docker.sock"


def _context_host(environ: Mapping[str, str]) -> str | None:
    """The daemon address of the current Docker CLI context (``DOCKER_CONTEXT``, else
    ``currentContext`` in ``$DOCKER_CONFIG/config.json``); None for ``default`` or when
    there is none. Contexts live in ``$DOCKER_CONFIG/contexts/meta/<sha256 of name>/meta.json``."""
    config_dir = environ.get("DOCKER_CONFIG") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".docker")
    name = environ.get("DOCKER_CONTEXT")
    if not name:
        try:
            with open(os.path.join(config_dir, "config.json"), encoding="utf-8") as fh:
                name = json.load(fh).get("currentContext")
        except (OSError, ValueError, AttributeError):
            return None
    if not name or name == "default":
        return None
    meta = os.path.join(config_dir, "contexts", "meta", hashlib.sha256(name.encode()).hexdigest(), "meta.json")
    try:
        with open(meta, encoding="utf-8") as fh:
            host = json.load(fh)["Endpoints"]["docker"]["Host"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return host if isinstance(host, str) and host else None


def socket_candidates(environ: Mapping[str, str]) -> list[str]:
    """Local sockets tried in order when nothing names the daemon: Docker's, rootless
    Docker's, rootless Podman's, rootful Podman's."""
    runtime = environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid() if hasattr(os, 'getuid') else 0}"
    return [
        DEFAULT_SOCKET,
        os.path.join(runtime, "docker.sock"),
        os.path.join(runtime, "podman", "podman.sock"),
        "/run/podman/podman.sock",
    ]


def discover_address(
    docker_host: str | None, environ: Mapping[str, str] | None = None, candidates: list[str] | None = None
) -> str:
    """The daemon address: ``docker_host``, else ``DOCKER_HOST``, else the current Docker
    context's endpoint, else the first existing socket of :func:`socket_candidates`
    (Docker's default socket when none exists, so the error names it)."""
    env = os.environ if environ is None else environ
    found = docker_host or env.get("DOCKER_HOST") or _context_host(env)
    if found:
        return found
    for path in socket_candidates(env) if candidates is None else candidates:
        if os.path.exists(path):
            return f"unix://{path}"
    return f"unix://{DEFAULT_SOCKET}"


def _address(options: DockerOptions) -> str:
    return discover_address(options.docker_host)


TLS_FILES = ("ca.pem", "cert.pem", "key.pem")
"""The files ``docker.utils.kwargs_from_env`` takes from ``DOCKER_CERT_PATH`` (else ``~/.docker``)."""


def client_identity(options: DockerOptions, environ: Mapping[str, str]) -> ClientIdentity:
    """The daemon address, and a digest of what else ``docker.APIClient`` reads from the
    environment: ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH`` and its files
    (``docker/utils/utils.py`` ``kwargs_from_env``), and the registry credentials in
    ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json`` (``docker/utils/config.py``)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    cert_path = environ.get("DOCKER_CERT_PATH") or os.path.join(home, ".docker")
    config_dir = environ.get("DOCKER_CONFIG") or os.path.join(home, ".docker")
    return ClientIdentity.of(
        discover_address(options.docker_host, environ),
        tls_verify=environ.get("DOCKER_TLS_VERIFY"),
        cert_path=cert_path,
        certs=files_digest(os.path.join(cert_path, name) for name in TLS_FILES),
        config=file_digest(os.path.join(config_dir, "config.json")),
    )


def unavailable(exc: BaseException, options: DockerOptions) -> BackendUnavailable:
    """A :class:`BackendUnavailable` that says why the daemon cannot be used and what to do."""
    address = _address(options)
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    text = " ".join(str(e) for e in chain)
    if any(isinstance(e, PermissionError) for e in chain) or "Permission denied" in text:
        return BackendUnavailable(
            f"permission denied on the Docker socket {address}",
            hint="add your user to the `docker` group (then log in again), use rootless Docker, "
            "or point DOCKER_HOST / docker_host at a socket you may use",
        )
    return BackendUnavailable(
        f"cannot reach the Docker daemon at {address}: {type(exc).__name__}: {str(exc)[:300]}",
        hint=f"{docker_start_hint()}, or set DOCKER_HOST / docker_host to where it listens",
    )


def get_client(options: DockerOptions) -> Any:
    """The ``docker.APIClient`` for ``options`` and this process's environment, shared by
    every caller with the same :func:`client_identity`. Raises :class:`BackendUnavailable`."""
    identity = client_identity(options, os.environ)
    address = identity.server
    key = (identity, options.api_timeout)
    client = _CLIENTS.get(key)
    if client is not None:
        return client
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is not None:
            return client
        kwargs = sdk.docker.utils.kwargs_from_env()
        kwargs["base_url"] = address
        try:
            client = sdk.docker.APIClient(version="auto", timeout=options.api_timeout, **kwargs)
        except (sdk.errors.DockerException, OSError) as exc:
            raise unavailable(exc, options) from exc
        _CLIENTS[key] = client
        return client
