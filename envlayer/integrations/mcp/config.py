"""The MCP server's configuration: the ``[mcp]`` table of ``envlayer.toml`` and the flags of
``envlayer mcp``, on top of envlayer's own configuration (file, ``ENVLAYER_*`` variables).

Precedence, highest first: flags, the ``[mcp]`` table, the rest of the configuration. The
server, never its client, chooses the backend, the profile and the options; a client may
pick another backend or option value for a sandbox (``create_sandbox``) only where
``allowed_backends`` / ``allowed_options`` say so. Keys of ``[mcp]``:

=================== ========================================================================
``backend``         the server's backend (default: the configured ``backend``)
``profile``         the server's profile (default: the configured ``profile``)
``task_prefix``     prefix of the task id of every sandbox the server makes (default ``mcp-``):
                    its sandboxes are the tasks that start with it, apart from the CLI's
``keep_sandboxes``  false (default): sandboxes are private to the server process
                    (``persist_across_processes = false`` where the backend has it) and
                    removed when it exits; true: kept for the next run, as the CLI keeps them
``allowed_backends`` backends a client may name in ``create_sandbox`` besides ``backend``
``allowed_options`` table: option key -> list of allowed values, or ``"*"`` for any value
``tools``           the tools offered (default: all; ``snapshot``/``fork`` only where the
                    backend has the ``snapshot`` capability)
``token_env``       variable holding the HTTP bearer token (default ``ENVLAYER_MCP_TOKEN``)
``token_file``      file holding the HTTP bearer token (its first line)
=================== ========================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from envlayer.agents.tools import ALL_TOOLS, SandboxPolicy
from envlayer.agents.tools.sandbox_tools import ANY, NAME
from envlayer.config import Settings, load_settings
from envlayer.discovery.backend_registry import load_backend
from envlayer.errors import ConfigError
from envlayer.integrations.selection import framework_owned

TABLE = "mcp"
DEFAULT_TOKEN_ENV = "ENVLAYER_MCP_TOKEN"
DEFAULT_TASK_PREFIX = "mcp-"
_TOML_NAMES = {bool: "boolean (true/false)", str: "string", list: "array", dict: "table"}
KEYS = (
    "backend",
    "profile",
    "task_prefix",
    "keep_sandboxes",
    "allowed_backends",
    "allowed_options",
    "tools",
    "token_env",
    "token_file",
)


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs, resolved and checked."""

    settings: Settings
    task_prefix: str
    keep_sandboxes: bool
    policy: SandboxPolicy
    tools: tuple[str, ...]
    token_env: str
    token_file: str | None


@dataclass(frozen=True)
class Flags:
    """The command line's choices (None: not given)."""

    config: str | None = None
    backend: str | None = None
    profile: str | None = None
    option_texts: Mapping[str, str] | None = None
    allow_backends: Sequence[str] = ()
    allow_options: Sequence[str] = ()
    task_prefix: str | None = None
    keep_sandboxes: bool | None = None
    token_env: str | None = None
    token_file: str | None = None


def load(flags: Flags) -> ServerConfig:
    """Resolve the configuration. Raises :class:`ConfigError` naming the key and file."""
    base = load_settings(config_path=flags.config, backend=flags.backend, profile=flags.profile)
    table = base.front_ends.get(TABLE, {})
    _check_keys(base, table)
    keep = _value(base, table, "keep_sandboxes", bool, flags.keep_sandboxes, False)
    backend = flags.backend or _value(base, table, "backend", str, None, None)
    profile = flags.profile or _value(base, table, "profile", str, None, None)
    settings = load_settings(
        config_path=flags.config, backend=backend, profile=profile, option_texts=flags.option_texts or None
    )
    if not keep:
        settings = _private_sandboxes(settings, flags, backend, profile)
    prefix = flags.task_prefix if flags.task_prefix is not None else _value(base, table, "task_prefix", str, None, None)
    prefix = DEFAULT_TASK_PREFIX if prefix is None else prefix
    if prefix and not NAME.match(prefix):
        raise ConfigError(
            f"{prefix!r} is not usable in a task id",
            source=_source(base, "task_prefix"),
            key=f"{TABLE}.task_prefix",
            hint="letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return ServerConfig(
        settings=settings,
        task_prefix=prefix,
        keep_sandboxes=keep,
        policy=_policy(base, table, flags),
        tools=tuple(_value(base, table, "tools", list, None, list(ALL_TOOLS))),
        token_env=flags.token_env or _value(base, table, "token_env", str, None, DEFAULT_TOKEN_ENV),
        token_file=flags.token_file or _value(base, table, "token_file", str, None, None),
    )


def _source(settings: Settings, key: str) -> str:
    return settings.sources.get(f"{TABLE}.{key}", "argument")


def _check_keys(settings: Settings, table: Mapping[str, Any]) -> None:
    for key in table:
        if key not in KEYS:
            raise ConfigError(
                "unknown key", source=_source(settings, key), key=f"{TABLE}.{key}", hint="known: " + ", ".join(KEYS)
            )
    unknown = [t for t in table.get("tools", []) if t not in ALL_TOOLS]
    if unknown:
        raise ConfigError(
            f"unknown tool(s) {', '.join(map(str, unknown))}",
            source=_source(settings, "tools"),
            key=f"{TABLE}.tools",
            hint="known: " + ", ".join(ALL_TOOLS),
        )


def _value(settings: Settings, table: Mapping[str, Any], key: str, kind: type, flag: Any, default: Any) -> Any:
    if flag is not None:
        return flag
    if key not in table:
        return default
    value = table[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(
            f"must be a {kind.__name__}, got {value!r}",
            source=_source(settings, key),
            key=f"{TABLE}.{key}",
            hint=f"write {key} as a TOML {_TOML_NAMES[kind]}; docs/mcp.md lists the keys",
        )
    return value


def _private_sandboxes(settings: Settings, flags: Flags, backend: str | None, profile: str | None) -> Settings:
    """``settings`` with ``persist_across_processes = false`` for the server's backend when
    it declares the option and nobody set it: each sandbox belongs to this process (its
    owner label) and is reaped as an orphan if the server dies without cleaning up."""
    cls = load_backend(settings.backend)
    declared = {f.name: f.default for f in fields(cls.Options)}
    defaults = {
        k: v for k, v in framework_owned(declared).items() if k not in settings.option_sources(settings.backend)
    }
    if not defaults:
        return settings
    return load_settings(
        config_path=flags.config,
        backend=backend,
        profile=profile,
        backend_options=defaults,
        option_texts=flags.option_texts or None,
    )


def _policy(settings: Settings, table: Mapping[str, Any], flags: Flags) -> SandboxPolicy:
    backends = [*_value(settings, table, "allowed_backends", list, None, []), *flags.allow_backends]
    options: dict[str, tuple[Any, ...] | str] = {}
    for key, values in _value(settings, table, "allowed_options", dict, None, {}).items():
        if values != ANY and not isinstance(values, list):
            raise ConfigError(
                f"must be a list of values or {ANY!r}",
                source=_source(settings, "allowed_options"),
                key=f"{TABLE}.allowed_options.{key}",
                hint=f'e.g. allowed_options = {{ image = ["python:3.12-slim"], cpus = "{ANY}" }}',
            )
        options[key] = ANY if values == ANY else tuple(values)
    for text in flags.allow_options:
        key, sep, values = text.partition("=")
        options[key] = tuple(values.split(",")) if sep else ANY
    return SandboxPolicy(backends=tuple(backends), options=options)


def read_token(config: ServerConfig) -> str | None:
    """The HTTP bearer token: the variable ``token_env``, else the first line of
    ``token_file``; None when neither gives one. Raises ConfigError for a token file
    that cannot be read."""
    token = os.environ.get(config.token_env, "").strip()
    if token:
        return token
    if config.token_file is None:
        return None
    try:
        lines = Path(config.token_file).expanduser().read_text().splitlines()
    except OSError as exc:
        raise ConfigError(
            f"cannot read it: {exc}", source=config.token_file, key="token_file", hint="check the path"
        ) from None
    return lines[0].strip() if lines and lines[0].strip() else None
