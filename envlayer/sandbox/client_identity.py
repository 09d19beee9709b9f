"""Who a backend's client talks to and as whom: the key of every client cache and of the
session broker's table of environments.

A backend's client is selected by a target (server address, daemon socket, cluster) and
an identity (token, key, kubeconfig user, ssh user and key). Two callers that differ in
either must never share a client or a sandbox: one process (the session broker) serves
callers with different credentials. :class:`ClientIdentity` holds the target in clear
(it is shown by ``envlayer broker status``) and everything else only as a digest, so
no secret is ever stored or logged in clear.

A backend class may offer ``client_identity(options, environ) -> ClientIdentity``
(a classmethod; ``environ`` is the caller's environment); the broker keys its
environments by it, and the built-in backends key their client caches by it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass

DIGEST_HEX = 16
"""Hex digits of a digest (64 bits: no collision between a user's few identities)."""


def digest(parts: object) -> str:
    """A :data:`DIGEST_HEX`-hex SHA-256 of ``parts`` (JSON-encodable; keys sorted)."""
    text = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:DIGEST_HEX]


def file_digest(path: str | None) -> str:
    """A digest of the file ``path`` names (its content), ``"-"`` for no path and
    ``"missing"`` when it cannot be read: a file changed in place is another identity."""
    if not path:
        return "-"
    try:
        with open(os.path.expanduser(path), "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()[:DIGEST_HEX]
    except OSError:
        return "missing"


def files_digest(paths: Iterable[str]) -> dict[str, str]:
    """``{path: file_digest(path)}`` for each of ``paths``."""
    return {path: file_digest(path) for path in paths}


@dataclass(frozen=True)
class ClientIdentity:
    """A client's target (``server``, shown in clear) and the digest of everything else
    that selects whom it acts as (``secret``: credentials, files, sockets)."""

    server: str
    secret: str

    @classmethod
    def of(cls, server: str, **identity: object) -> ClientIdentity:
        """The identity of ``server`` and the values in ``identity`` (hashed)."""
        return cls(server, digest({"server": server, **identity}))

    @property
    def short(self) -> str:
        """8 hex digits that tell identities apart in ``envlayer broker status``."""
        return self.secret[:8]
