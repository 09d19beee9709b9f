"""Connecting to the Docker daemon, and turning transport failures into envlayer errors.

One low-level ``docker.APIClient`` per (daemon address, timeout) is shared by every
environment of the process (it is thread-safe for our use, and sharing it saves the API
version negotiation on every attach). The SDK is imported here, lazily, never at module
level of anything the entry point loads.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer_docker.options import DockerOptions

_CLIENTS: dict[tuple[str | None, float], Any] = {}
_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child must not share pooled connections
    os.register_at_fork(after_in_child=_CLIENTS.clear)


def _address(options: DockerOptions) -> str:
    return options.docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


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
        hint="start the daemon (`sudo systemctl start docker`, or `scripts/provision` in this repo), "
        "or set DOCKER_HOST / docker_host to where it listens",
    )


def get_client(options: DockerOptions) -> Any:
    """The shared ``docker.APIClient`` for ``options``. Raises :class:`BackendUnavailable`."""
    key = (options.docker_host, options.api_timeout)
    client = _CLIENTS.get(key)
    if client is not None:
        return client
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is not None:
            return client
        import docker
        from docker.errors import DockerException

        kwargs = docker.utils.kwargs_from_env()
        if options.docker_host:
            kwargs["base_url"] = options.docker_host
        try:
            client = docker.APIClient(version="auto", timeout=options.api_timeout, **kwargs)
        except (DockerException, OSError) as exc:
            raise unavailable(exc, options) from exc
        _CLIENTS[key] = client
        return client
