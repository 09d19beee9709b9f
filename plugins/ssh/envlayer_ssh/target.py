"""Where to connect and how to authenticate: options merged with ``~/.ssh/config``.

A :class:`Target` is hashable and is the key of the shared-connection pool, so two
environments share a connection only when host, port, user, credentials (the key files'
content, the agent socket), host-key policy and jump chain are all the same. The
password and the keys are kept out of ``repr`` and out of the key (digests stand in for
them). The agent socket is the ``SSH_AUTH_SOCK`` of the process that resolved the
target, used for every connection to it (see :mod:`envlayer_ssh.pool`).
"""

from __future__ import annotations

import getpass
import hashlib
import os
from dataclasses import dataclass, field

from envlayer.errors import BackendUnavailable
from envlayer.sandbox.client_identity import digest as identity_digest
from envlayer.sandbox.client_identity import files_digest
from envlayer_ssh import sdk
from envlayer_ssh.options import SSHOptions


@dataclass(frozen=True)
class Target:
    """One resolved ssh destination. ``jump`` is the previous hop (ProxyJump), if any."""

    alias: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]
    use_agent: bool
    look_for_keys: bool
    host_key_policy: str
    known_hosts: str
    connect_timeout: float
    keepalive: float
    max_sessions: int
    max_connections: int
    jump: Target | None = None
    password_digest: str = ""
    password: str | None = field(default=None, repr=False, compare=False, hash=False)
    agent_socket: str = ""
    """The ``SSH_AUTH_SOCK`` of the caller (empty: no agent, or ``use_agent`` off)."""
    keys_digest: str = ""
    """A digest of the key files' content: a key replaced in place is another identity."""

    @property
    def known_hosts_name(self) -> str:
        """The host name as known_hosts writes it: ``host`` or ``[host]:port``."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def describe(self) -> str:
        """``user@host:port`` (with the jump chain), for messages. Holds no secret."""
        via = f" via {self.jump.describe()}" if self.jump else ""
        return f"{self.user}@{self.hostname}:{self.port}{via}"


def _load_config(path: str | None):  # -> paramiko.SSHConfig | None
    if not path:
        return None
    full = os.path.expanduser(path)
    if not os.path.isfile(full):
        return None
    try:
        return sdk.paramiko.SSHConfig.from_path(full)
    except Exception as exc:  # paramiko raises bare ConfigParseError / ValueError
        raise BackendUnavailable(
            f"cannot parse the ssh config file {full}: {exc}",
            hint="fix the file, or set ssh_config to an empty string to ignore it",
        ) from exc


def _split_hop(hop: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (IPv6 as ``[addr]:port``) -> (user, host, port)."""
    user = None
    if "@" in hop:
        user, hop = hop.rsplit("@", 1)
    port = None
    if hop.startswith("["):
        host, _, rest = hop[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif hop.count(":") == 1:
        host, port_text = hop.split(":")
        port = int(port_text)
    else:
        host = hop
    return user, host, port


def resolve_target(options: SSHOptions) -> Target:
    """Build the :class:`Target` for ``options``.

    Explicit options win over the ssh config; the config's IdentityFile entries are
    offered before ``key_files``. ProxyJump hops are resolved through the same config.

    Raises:
        BackendUnavailable: no host is configured, or the ssh config cannot be parsed.
    """
    if not options.host:
        raise BackendUnavailable(
            "no ssh host is configured",
            hint="set host under [backends.ssh] in the config file, or ENVLAYER_SSH_HOST",
        )
    config = _load_config(options.ssh_config)
    digest = hashlib.sha256(options.password.encode()).hexdigest()[:16] if options.password else ""
    jump_spec = options.proxy_jump
    return _resolve(
        options.host, options.user, options.port, list(options.key_files), jump_spec, options, config, digest, depth=0
    )


def _resolve(
    alias: str,
    user: str | None,
    port: int | None,
    key_files: list[str],
    jump_spec: str | None,
    options: SSHOptions,
    config,
    digest: str,
    depth: int,
) -> Target:
    if depth > 8:
        raise BackendUnavailable(
            f"ProxyJump chain for {alias!r} is too long or loops", hint="check ProxyJump in the ssh config"
        )
    entry = config.lookup(alias) if config is not None else {}
    hostname = entry.get("hostname", alias)
    config_files = [os.path.expanduser(p) for p in entry.get("identityfile", [])]
    files = tuple(dict.fromkeys(config_files + [os.path.expanduser(p) for p in key_files]))
    if jump_spec is None:
        jump_spec = entry.get("proxyjump")
    jump = None
    if jump_spec and jump_spec.lower() != "none":
        for hop in jump_spec.split(","):
            hop_user, hop_host, hop_port = _split_hop(hop.strip())
            # Each hop is reached through the hops before it; a hop's own ProxyJump is ignored,
            # as OpenSSH does for an explicit -J list.
            hop_target = _resolve(
                hop_host, hop_user, hop_port, list(options.key_files), "none", options, config, "", depth + 1
            )
            jump = _with_jump(hop_target, jump)
    return Target(
        alias=alias,
        hostname=hostname,
        port=port or int(entry.get("port", 22)),
        user=user or entry.get("user") or getpass.getuser(),
        key_files=files,
        use_agent=options.use_agent,
        look_for_keys=options.look_for_keys,
        host_key_policy=options.host_key_policy,
        known_hosts=os.path.expanduser(options.known_hosts),
        connect_timeout=options.connect_timeout,
        keepalive=options.keepalive,
        max_sessions=options.max_sessions,
        max_connections=options.max_connections,
        jump=jump,
        password_digest=digest if depth == 0 else "",
        password=options.password if depth == 0 else None,
        agent_socket=os.environ.get("SSH_AUTH_SOCK", "") if options.use_agent else "",
        keys_digest=identity_digest(files_digest(files)),
    )


def _with_jump(target: Target, jump: Target | None) -> Target:
    if jump is None:
        return target
    fields_ = {k: getattr(target, k) for k in target.__dataclass_fields__}
    fields_["jump"] = jump
    return Target(**fields_)
