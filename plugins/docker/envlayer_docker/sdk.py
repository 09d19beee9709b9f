"""The Docker SDK: the one module of this plugin that imports it, on first use.

``from envlayer_docker import sdk`` imports nothing of the SDK; ``sdk.docker``, ``sdk.errors``
(``docker.errors``), ``sdk.types`` (``docker.types``) and ``sdk.requests`` (the HTTP library
docker-py raises from) are imported the first time they are read
(:mod:`envlayer.sandbox.lazy_sdk`), so ``envlayer backends`` and the CLI's other calls that
import the backend class pay nothing for the SDK.

The SDK is imported without paramiko until a daemon is reached over ``ssh://``: docker-py's
``docker.transport`` imports its SSH adapter on every ``import docker``, and with it
paramiko, invoke and cryptography: about 115 ms of CPU, two thirds of the SDK's import cost,
paid by every CLI call, broker and agent process that talks to a local daemon over its Unix
socket. :func:`defer_ssh_transport` (called just before the SDK is imported)
registers a stand-in for ``docker.transport.sshconn`` whose ``SSHHTTPAdapter`` loads the
real module the first time one is built, so ``DOCKER_HOST=ssh://...`` works as before.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from envlayer.sandbox.lazy_sdk import lazy_modules

if TYPE_CHECKING:
    import docker
    import docker.errors as errors
    import docker.types as types
    import requests

__all__ = ["docker", "errors", "requests", "types"]

SSH_MODULE = "docker.transport.sshconn"


def _real_ssh_adapter() -> type:
    """docker-py's own ``SSHHTTPAdapter``, its module imported in place of the stand-in.

    A missing paramiko is raised as the NameError docker-py expects from an adapter it
    could not import, so its own "Install paramiko package to enable ssh:// support" error
    reaches the user."""
    if getattr(sys.modules.get(SSH_MODULE), "SSHHTTPAdapter", None) is _DeferredSSHAdapter:
        del sys.modules[SSH_MODULE]
    try:
        return importlib.import_module(SSH_MODULE).SSHHTTPAdapter  # type: ignore[no-any-return]
    except ImportError as exc:
        raise NameError(f"docker's ssh:// transport cannot be imported: {exc}") from exc


class _DeferredSSHAdapter:
    """Stands in for ``docker.transport.SSHHTTPAdapter``: building one builds the real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _real_ssh_adapter()(*args, **kwargs)


def defer_ssh_transport() -> None:
    """Put the stand-in in place, unless the SDK is already imported (then it is too late
    to matter, and the real module stays)."""
    if "docker" in sys.modules or SSH_MODULE in sys.modules:
        return
    stand_in = ModuleType(SSH_MODULE, __doc__)
    stand_in.SSHHTTPAdapter = _DeferredSSHAdapter  # type: ignore[attr-defined]
    sys.modules[SSH_MODULE] = stand_in


__getattr__ = lazy_modules(
    __name__,
    {"docker": "docker", "errors": "docker.errors", "types": "docker.types", "requests": "requests"},
    before_import=defer_ssh_transport,
)
