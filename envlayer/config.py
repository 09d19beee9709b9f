"""Configuration: which backend, which profile, and each backend's options.

Sources, lowest precedence first (a later source overrides an earlier one key by key):

1. built-in defaults (``backend = "local"``, ``profile = "default"``, ...);
2. the user file ``$XDG_CONFIG_HOME/envlayer/config.toml`` (``~/.config/...``);
3. the project file ``./envlayer.toml`` (in the current directory);
   -- or, instead of 2 and 3, only the file named by ``--config`` / ``ENVLAYER_CONFIG``;
4. environment variables: ``ENVLAYER_BACKEND``, ``ENVLAYER_PROFILE``,
   ``ENVLAYER_LIFETIME_SECONDS``, ``ENVLAYER_ORPHAN_REAPER``, ``ENVLAYER_BROKER``,
   ``ENVLAYER_BROKER_IDLE_TIMEOUT`` and
   ``ENVLAYER_<BACKEND>_<OPTION>`` for every backend option;
5. command-line flags (``--backend``, ``--profile``, ``-o KEY=VALUE``) or keyword
   arguments passed by code.

File layout::

    backend = "docker"          # which backend to use
    profile = "default"         # namespaces every sandbox this process creates
    lifetime_seconds = 300      # idle time before the manager releases an environment
    orphan_reaper = true        # sweep dead sandboxes once per process
    broker = true               # `envlayer exec` through the session broker
    broker_idle_timeout = 300   # idle seconds before the broker exits

    [backends.docker]           # options of one backend: see `envlayer backends --options`
    image = "python:3.11-slim"

Every problem raises :class:`~envlayer.errors.ConfigError` naming the file (or the
variable), the key, and a fix.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlayer.coercion import coerce, describe, parse_text, shown
from envlayer.errors import ConfigError
from envlayer.options import BaseOptions, build_options

CONFIG_ENV_VAR = "ENVLAYER_CONFIG"
PROJECT_FILE = "envlayer.toml"
PROFILE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

CORE_KEYS: dict[str, tuple[type, Any, str]] = {
    "backend": (str, "local", "Name of the backend to use (see `envlayer backends`)."),
    "profile": (str, "default", "Namespace for every sandbox this process creates, reuses or reaps."),
    "lifetime_seconds": (float, 300.0, "Idle seconds before the manager releases an environment."),
    "orphan_reaper": (bool, True, "Sweep sandboxes left by dead processes once per process and backend."),
    "broker": (bool, True, "Run `envlayer exec` through the per-user session broker (false: in-process)."),
    "broker_idle_timeout": (float, 300.0, "Idle seconds after which the session broker exits."),
}
"""Top-level keys: (type, default, doc)."""
FRONT_END_TABLES = ("mcp",)
"""Top-level tables that belong to a front end (``[mcp]``: the MCP server,
:mod:`envlayer.integrations.mcp.config`), kept as written in :attr:`Settings.front_ends`."""


def user_config_path() -> Path:
    """``$XDG_CONFIG_HOME/envlayer/config.toml``, defaulting to ``~/.config``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "envlayer" / "config.toml"


def env_prefix(backend: str) -> str:
    """Prefix of the environment variables holding options of ``backend``."""
    return "ENVLAYER_" + re.sub(r"[^A-Za-z0-9]", "_", backend).upper() + "_"


@dataclass
class Settings:
    """The merged configuration, with where each value came from.

    ``backend_options[name]`` holds the raw (unvalidated) options of each backend from
    files, ``argument_options[name]`` those given as arguments (keyword arguments, or
    ``-o KEY=VALUE`` text, listed in ``argument_texts[name]``); :meth:`options_for`
    layers files, environment variables and arguments, and validates the result. Text
    values (environment variables, ``-o``) are parsed by each option's declared type.
    """

    backend: str = "local"
    profile: str = "default"
    lifetime_seconds: float = 300.0
    orphan_reaper: bool = True
    broker: bool = True
    broker_idle_timeout: float = 300.0
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    argument_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    argument_texts: dict[str, set[str]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    front_ends: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The tables of front ends (:data:`FRONT_END_TABLES`, e.g. ``[mcp]``) as the files
    wrote them; each front end checks its own (``sources`` names the file of each key)."""
    files: list[str] = field(default_factory=list)

    def source_of(self, key: str) -> str:
        """Where ``key`` (``"backend"`` or ``"backends.docker.image"``) was set."""
        return self.sources.get(key, "default")

    def _layered(
        self, backend: str, env: Mapping[str, str] | None, overrides: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, str], set[str]]:
        """(values, source of each, keys whose value is text to parse by type)."""
        values = dict(self.backend_options.get(backend, {}))
        sources = {k: self.source_of(f"backends.{backend}.{k}") for k in values}
        texts: set[str] = set()
        prefix = env_prefix(backend)
        environ = os.environ if env is None else env
        for var, text in environ.items():
            if var.startswith(prefix) and len(var) > len(prefix):
                key = var[len(prefix) :].lower()
                values[key] = text
                sources[key] = f"${var}"
                texts.add(key)
        arg_texts = self.argument_texts.get(backend, set())
        for key, value in self.argument_options.get(backend, {}).items():
            values[key] = value
            sources[key] = "-o" if key in arg_texts else "argument"
            texts.discard(key)
            if key in arg_texts:
                texts.add(key)
        for key, value in (overrides or {}).items():
            values[key] = value
            sources[key] = "override"
            texts.discard(key)
        return values, sources, texts

    def options_for(
        self,
        backend: str,
        options_cls: type[BaseOptions],
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> BaseOptions:
        """Validated options of ``backend``: file values, then its environment
        variables, then argument options, then ``overrides``.

        Raises:
            ConfigError: an unknown option (in a file or as an ``ENVLAYER_<BACKEND>_*``
                variable) or a value of the wrong type.
        """
        values, sources, texts = self._layered(backend, env, overrides)
        return build_options(
            options_cls, values, sources=sources, default_source=f"[backends.{backend}]", text_keys=texts
        )

    def option_sources(self, backend: str, *, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """Where each explicitly set option of ``backend`` comes from (unset: default)."""
        return self._layered(backend, env, None)[1]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"not valid TOML: {exc}", source=str(path), hint="fix the syntax at the position shown"
        ) from exc
    except OSError as exc:
        raise ConfigError(
            f"cannot read: {exc.strerror}", source=str(path), hint="check the path and its permissions"
        ) from exc


def _check_core(key: str, value: Any, source: str) -> Any:
    """``value`` of core setting ``key`` from ``source``, checked (and parsed from text
    for a variable). Raises :class:`ConfigError`; a command-line flag (``--profile``)
    names the key itself, so its error says only the flag."""
    tp = CORE_KEYS[key][0]
    named = None if source.startswith("--") else key
    if isinstance(value, str) and source.startswith("$"):
        value = parse_text(tp, value)
    ok, value = coerce(tp, value)
    if not ok:
        raise ConfigError(
            f"expected {describe(tp)}, got {shown(tp, value)}",
            source=source,
            key=named,
            hint=f"set {key} to {describe(tp)}",
        )
    if key == "profile" and not PROFILE_PATTERN.match(value):
        raise ConfigError(
            f"invalid profile name {value!r}",
            source=source,
            key=named,
            hint="use 1-63 characters from A-Z a-z 0-9 _ . - starting with a letter or digit",
        )
    if key == "broker_idle_timeout" and not 0 < value < float("inf"):
        raise ConfigError("must be a finite number > 0", source=source, key=named, hint="use seconds such as 300")
    if key == "lifetime_seconds" and value <= 0:
        raise ConfigError("must be > 0", source=source, key=named, hint="use a number of seconds such as 300")
    return value


def _merge_front_end(settings: Settings, key: str, value: Any, source: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError("must be a table", source=source, key=key, hint=f"write its keys under a [{key}] table")
    settings.front_ends.setdefault(key, {}).update(value)
    for sub in value:
        settings.sources[f"{key}.{sub}"] = source


def _merge_file(settings: Settings, path: Path) -> None:
    data = _read_toml(path)
    source = str(path)
    settings.files.append(source)
    for key, value in data.items():
        if key in FRONT_END_TABLES:
            _merge_front_end(settings, key, value, source)
            continue
        if key == "backends":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise ConfigError(
                    "must be a table of tables",
                    source=source,
                    key="backends",
                    hint="write options as [backends.NAME] tables, e.g. [backends.docker]",
                )
            for backend, options in value.items():
                target = settings.backend_options.setdefault(backend, {})
                for opt, opt_value in options.items():
                    target[opt] = opt_value
                    settings.sources[f"backends.{backend}.{opt}"] = source
            continue
        if key not in CORE_KEYS:
            close = difflib.get_close_matches(key, [*CORE_KEYS, "backends", *FRONT_END_TABLES], n=1)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else (
                    "valid top-level keys: "
                    + ", ".join([*CORE_KEYS, "backends"])
                    + "; backend options go under [backends.NAME]"
                )
            )
            raise ConfigError("unknown key", source=source, key=key, hint=hint)
        setattr(settings, key, _check_core(key, value, source))
        settings.sources[key] = source


def load_settings(
    *,
    config_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    backend: str | None = None,
    profile: str | None = None,
    lifetime_seconds: float | None = None,
    orphan_reaper: bool | None = None,
    backend_options: Mapping[str, Any] | None = None,
    option_texts: Mapping[str, str] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Settings:
    """Merge every source into :class:`Settings` (see the module docstring).

    Keyword arguments are the highest-precedence source (CLI flags pass through them);
    ``backend_options`` applies to the selected backend; ``option_texts`` too, as text
    (``-o KEY=VALUE``) parsed by each option's declared type (``-o cwd=2024`` is a
    string, ``-o memory_mb=2048`` an integer); a key in both takes the text.
    ``flag_names`` says how the caller's user wrote a keyword argument (the CLI:
    ``{"profile": "--profile"}``): errors and :meth:`Settings.source_of` name it so
    (default ``argument``).

    Raises:
        ConfigError: a file that cannot be read or parsed, an unknown top-level key,
            a wrong type, an explicit config path that does not exist.
    """
    environ = os.environ if env is None else env
    settings = Settings()
    _merge_files(settings, config_path, environ, cwd)
    for key in CORE_KEYS:
        var = f"ENVLAYER_{key.upper()}"
        if environ.get(var):
            setattr(settings, key, _check_core(key, environ[var], f"${var}"))
            settings.sources[key] = f"${var}"
    flags = {
        "backend": backend,
        "profile": profile,
        "lifetime_seconds": lifetime_seconds,
        "orphan_reaper": orphan_reaper,
    }
    for key, value in flags.items():
        if value is not None:
            source = (flag_names or {}).get(key, "argument")
            setattr(settings, key, _check_core(key, value, source))
            settings.sources[key] = source
    _merge_argument_options(settings, backend_options or {}, option_texts or {})
    return settings


def _merge_files(
    settings: Settings,
    config_path: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    cwd: str | os.PathLike[str] | None,
) -> None:
    """Merge the explicit config file (``config_path``, else ``$ENVLAYER_CONFIG``) or,
    without one, the user's file then the project's. An explicit path must exist."""
    explicit = config_path if config_path is not None else environ.get(CONFIG_ENV_VAR) or None
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            origin = "--config" if config_path is not None else f"${CONFIG_ENV_VAR}"
            raise ConfigError(f"config file not found: {path}", source=origin, hint="check the path, or unset it")
        _merge_file(settings, path)
        return
    for path in (user_config_path(), Path(cwd or os.getcwd()) / PROJECT_FILE):
        if path.is_file():
            _merge_file(settings, path)


def _merge_argument_options(settings: Settings, values: Mapping[str, Any], texts: Mapping[str, str]) -> None:
    """Record the selected backend's options given as arguments (``values``) and as
    ``-o`` texts (``texts``, which win on a shared key)."""
    if not values and not texts:
        return
    settings.argument_options[settings.backend] = {**values, **texts}
    settings.argument_texts[settings.backend] = set(texts)
    for opt in values:
        settings.sources[f"backends.{settings.backend}.{opt}"] = "argument"
    for opt in texts:
        settings.sources[f"backends.{settings.backend}.{opt}"] = "-o"
