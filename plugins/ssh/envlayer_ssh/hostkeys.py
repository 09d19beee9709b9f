"""Host-key verification: known_hosts by default, trust-on-first-use and insecure by opt-in.

* ``strict``: the key must already be in the known_hosts file; an unknown key is refused.
* ``accept-new``: an unknown key is accepted and appended to the known_hosts file (one
  line, the file is never rewritten); a changed key is refused.
* ``insecure``: any key is accepted and nothing is recorded (a WARNING names the key's
  fingerprint).

Refusals raise :class:`~envlayer_ssh.errors.HostKeyError` before authentication, so no
credential is ever sent to an unverified server. Its hint has the exact command to trust
the key.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shlex
import threading
from typing import TYPE_CHECKING

from envlayer_ssh import sdk
from envlayer_ssh.errors import HostKeyError

if TYPE_CHECKING:
    import paramiko

    from envlayer_ssh.target import Target

log = logging.getLogger("envlayer.ssh")
_WRITE_LOCK = threading.Lock()


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def keyscan_command(target: Target, key_type: str) -> str:
    """The shell line that appends the server's key of ``key_type`` to known_hosts."""
    port = f"-p {target.port} " if target.port != 22 else ""
    return f"ssh-keyscan {port}-t {key_type} {shlex.quote(target.hostname)} >> {shlex.quote(target.known_hosts)}"


def load_known_hosts(target: Target) -> paramiko.HostKeys:
    """The entries of ``target.known_hosts`` (empty when the file does not exist)."""
    keys = sdk.paramiko.HostKeys()
    if target.host_key_policy != "insecure" and os.path.isfile(target.known_hosts):
        try:
            keys.load(target.known_hosts)
        except OSError as exc:
            raise HostKeyError(
                f"cannot read the known_hosts file {target.known_hosts}: {exc}",
                hint="fix its permissions, or point the known_hosts option at a readable file",
            ) from exc
    return keys


def verify(target: Target, key: paramiko.PKey) -> None:
    """Accept ``key`` for ``target`` under its policy, or raise :class:`HostKeyError`.

    Guaranteed: under ``accept-new`` an unknown key is recorded in known_hosts before
    this returns. Raises ``HostKeyError`` for an unknown key under ``strict`` and for a
    changed key under ``strict`` and ``accept-new``.
    """
    name = target.known_hosts_name
    key_type = key.get_name()
    if target.host_key_policy == "insecure":
        log.warning(
            "ssh: accepting host key %s %s for %s without verification (host_key_policy=insecure)",
            key_type,
            fingerprint(key),
            name,
        )
        return
    known = load_known_hosts(target).lookup(name)
    if known is not None and key_type in known:
        if known[key_type] == key:
            return
        raise HostKeyError(
            f"the host key of {name} has CHANGED: the server offered {key_type} {fingerprint(key)}, "
            f"known_hosts ({target.known_hosts}) has {fingerprint(known[key_type])}. "
            "This may be an attack (someone intercepting the connection) or a reinstalled server.",
            hint=f"if the change is expected, remove the old key with "
            f"`ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(target.known_hosts)}`, then trust the new one "
            f"with `{keyscan_command(target, key_type)}` after checking its fingerprint {fingerprint(key)}",
        )
    if known is not None:
        # Known under other key types only (negotiation is limited to known types, so the
        # server has none of them). As OpenSSH, accept-new does not add a key to a known host.
        raise HostKeyError(
            f"{name} offered a {key_type} host key ({fingerprint(key)}) but known_hosts "
            f"({target.known_hosts}) only holds {', '.join(sorted(known.keys()))} keys for it",
            hint=f"check the fingerprint, then run `{keyscan_command(target, key_type)}`",
        )
    if target.host_key_policy == "strict":
        raise HostKeyError(
            f"the host key of {name} ({key_type} {fingerprint(key)}) is not in {target.known_hosts}",
            hint=f"check the fingerprint, then run `{keyscan_command(target, key_type)}`, "
            'or set host_key_policy = "accept-new" to trust it on first use',
        )
    _record(target, key)


def _record(target: Target, key: paramiko.PKey) -> None:
    """Append one known_hosts line (creating the file 0600 and its directory 0700)."""
    line = f"{target.known_hosts_name} {key.get_name()} {key.get_base64()}\n"
    path = target.known_hosts
    with _WRITE_LOCK:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(line)
    log.warning(
        "ssh: recorded new host key %s %s for %s in %s (host_key_policy=accept-new)",
        key.get_name(),
        fingerprint(key),
        target.known_hosts_name,
        path,
    )


_ALL_HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "rsa-sha2-256",
    "ssh-rsa",
)


def disabled_host_key_types(target: Target) -> list[str]:
    """Host-key algorithms to switch off so the server offers a key type known_hosts holds.

    Empty (negotiate freely) when the host is unknown or the policy is ``insecure``.
    """
    if target.host_key_policy == "insecure":
        return []
    known = load_known_hosts(target).lookup(target.known_hosts_name)
    if not known:
        return []
    wanted = set(known.keys())
    if "ssh-rsa" in wanted:
        wanted |= {"rsa-sha2-512", "rsa-sha2-256"}
    return [t for t in _ALL_HOST_KEY_TYPES if t not in wanted]
