"""``SSHOptions``: the schema of the ssh backend's options (importable without paramiko).

Each field is documented in its ``doc``; the configuration loader reads them from
``[backends.ssh]`` in the config file and from ``ENVLAYER_SSH_<OPTION>`` variables.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

from envlayer.errors import InvalidArgument
from envlayer.options import OptionError, option
from envlayer.request import check_env
from envlayer.sandbox.options import EXEC_MODES, SandboxOptions

HOST_KEY_POLICIES = ("strict", "accept-new", "insecure")
log = logging.getLogger("envlayer.ssh")


def check_env_names(env: Mapping[str, str], key: str = "env") -> None:
    """Raise :class:`OptionError` unless every name is a valid shell variable name and
    every value a string without NUL (the core's rule, :func:`envlayer.request.check_env`):
    variables are set with ``export NAME=...`` in the remote shell, so a name the shell
    cannot export is refused up front rather than failing every command."""
    try:
        check_env(env, key)
    except InvalidArgument as exc:
        raise OptionError(key, exc.message.removeprefix(f"{key}: ")) from None


@dataclass(kw_only=True)
class SSHOptions(SandboxOptions):
    """Options of the ssh backend. Unset connection fields fall back to ``~/.ssh/config``."""

    host: str | None = option(
        None, doc="Host to connect to: a name, an address, or a Host alias from the ssh config file."
    )
    port: int | None = option(None, doc="TCP port; the ssh config's Port, else 22, when unset.")
    user: str | None = option(None, doc="Login user; the ssh config's User, else the local user name, when unset.")
    key_files: list[str] = option(
        doc="Private key files to offer (after the ssh config's IdentityFile entries).", factory=list
    )
    password: str | None = option(
        None, doc="Password (or key passphrase). Never logged; prefer keys or an agent.", secret=True
    )
    use_agent: bool = option(True, doc="Offer the keys of a running ssh-agent (SSH_AUTH_SOCK).")
    look_for_keys: bool = option(True, doc="Also offer the default keys ~/.ssh/id_ed25519, id_ecdsa, id_rsa.")
    ssh_config: str | None = option(
        "~/.ssh/config",
        doc="OpenSSH client config read for HostName, User, Port, IdentityFile and ProxyJump; empty to ignore it.",
    )
    proxy_jump: str | None = option(
        None,
        doc="Jump host(s) as in ssh -J: [user@]host[:port][,...]; overrides the ssh config's "
        "ProxyJump; 'none' disables it.",
    )
    host_key_policy: Literal["strict", "accept-new", "insecure"] = option(
        "strict",
        doc="strict: the host key must already be in known_hosts; accept-new: record an unknown "
        "key, refuse a changed one; insecure: accept any key, record nothing.",
    )
    known_hosts: str = option(
        "~/.ssh/known_hosts", doc="known_hosts file used to verify (and, for accept-new, record) host keys."
    )
    connect_timeout: float = option(10.0, doc="Seconds allowed for TCP connect, banner and authentication.")
    keepalive: float = option(15.0, doc="Seconds between keepalive messages on an idle connection; 0 disables them.")
    mode: Literal["session", "oneshot"] | None = option(
        None,
        doc="Deprecated (removed in the next release): the old name of `exec_mode`; a value given here is "
        "used as `exec_mode`, with a DeprecationWarning.",
    )
    shell: str = option("/bin/sh", doc="Remote POSIX shell that runs commands.")
    max_sessions: int = option(
        10,
        doc="Channels opened at once on one connection (the server's MaxSessions, OpenSSH "
        "default 10); further commands wait for a free channel.",
    )
    max_connections: int = option(
        4,
        doc="Connections per target; another is opened only when every channel of the existing "
        "ones is held by a long-lived session shell or SFTP channel.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.port is not None and not 0 < self.port < 65536:
            raise OptionError("port", "must be between 1 and 65535")
        if self.host_key_policy not in HOST_KEY_POLICIES:
            raise OptionError("host_key_policy", f"must be one of {', '.join(HOST_KEY_POLICIES)}")
        self._take_deprecated_mode()
        if self.connect_timeout <= 0:
            raise OptionError("connect_timeout", "must be > 0")
        if self.keepalive < 0:
            raise OptionError("keepalive", "must be >= 0")
        if self.max_sessions < 1:
            raise OptionError("max_sessions", "must be >= 1")
        if self.max_connections < 1:
            raise OptionError("max_connections", "must be >= 1")
        if not self.shell:
            raise OptionError("shell", "must name a shell")
        check_env_names(self.env)

    def _take_deprecated_mode(self) -> None:
        """Apply the deprecated ``mode`` option as ``exec_mode`` (warning and logging once
        per options object); ``mode`` and ``exec_mode`` set to different values is an error."""
        if self.mode is None:
            return
        if self.mode not in EXEC_MODES:
            raise OptionError("mode", f"must be one of {', '.join(EXEC_MODES)}")
        if self.exec_mode != "session" and self.exec_mode != self.mode:
            raise OptionError("mode", f"conflicts with exec_mode = {self.exec_mode!r}; set only exec_mode")
        note = f"the ssh option `mode` is deprecated; use `exec_mode = {self.mode!r}` (ENVLAYER_SSH_EXEC_MODE)"
        warnings.warn(note, DeprecationWarning, stacklevel=4)
        log.warning("%s; `mode` will be removed in the next release", note)
        self.exec_mode, self.mode = self.mode, None

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={'***' if f.name == 'password' and self.password else repr(getattr(self, f.name))}"
            for f in fields(self)
        )
        return f"SSHOptions({shown})"
