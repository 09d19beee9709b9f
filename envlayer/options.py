"""Typed backend options: the schema every backend publishes, and its validation.

Each backend has an ``Options`` dataclass (a subclass of :class:`BaseOptions`). Every
field carries a ``doc`` in its metadata; the configuration loader uses the type hints to
coerce values from TOML and from ``ENVLAYER_<BACKEND>_<OPTION>`` variables, and rejects
unknown keys and wrong types with a :class:`~envlayer.errors.ConfigError` that names the
source, the key, and the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from envlayer.coercion import coerce, describe, parse_text, shown
from envlayer.errors import ConfigError, EnvlayerError, InvalidArgument
from envlayer.request import normalize_timeout
from envlayer.result import POLICIES


def option(
    default: Any = dataclasses.MISSING, *, doc: str, factory: Any = dataclasses.MISSING, secret: bool = False
) -> Any:
    """Declare an option field with its documentation.

    ``secret=True`` marks a value that must never be shown: ``envlayer config`` masks it
    and configuration errors do not echo it (a backend whose options ``repr`` could be
    logged hides it there too, as the SSH backend's does).
    """
    metadata = {"doc": doc, "secret": secret}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def is_secret(f: dataclasses.Field[Any]) -> bool:
    """Whether an options field holds a secret (see :func:`option`)."""
    return bool(f.metadata.get("secret"))


MASK = "***"
"""What ``envlayer config`` and error messages show in place of a secret value."""


def masked(options_cls: type[BaseOptions], name: str, value: Any) -> Any:
    """``value`` as it may be shown: :data:`MASK` for a set secret option; for ``env``
    (variables often hold credentials) the names with every value masked."""
    if value is None or value == "" or value == {}:
        return value
    if name == "env" and isinstance(value, Mapping):
        return dict.fromkeys(value, MASK)
    fields = option_fields(options_cls)
    if name in fields and is_secret(fields[name][1]):
        return MASK
    return value


class OptionError(EnvlayerError, ValueError):
    """Raised by an options class's ``__post_init__`` for a bad value of ``key``. Loading
    options from configuration turns it into a :class:`~envlayer.errors.ConfigError`
    naming the file or variable."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


@dataclass(kw_only=True)
class BaseOptions:
    """Options every backend accepts."""

    cwd: str | None = option(None, doc="Working directory for commands; the backend's default when unset.")
    env: dict[str, str] = option(doc="Environment variables set for every command.", factory=dict)
    timeout: float | None = option(180.0, doc="Default per-command timeout in seconds; unset or 0 means no limit.")
    max_output_bytes: int = option(1_048_576, doc="Cap on each of stdout and stderr per command, in bytes.")
    output_policy: Literal["head_tail", "head", "tail"] = option(
        "head_tail", doc="What a capped stream keeps: head_tail (40 % head, 60 % tail), head, or tail."
    )
    max_file_bytes: int = option(104_857_600, doc="Largest file read_file/write_file will transfer, in bytes.")
    file_root: str | None = option(None, doc="When set, read_file/write_file refuse paths outside this directory.")

    def __post_init__(self) -> None:
        try:
            self.timeout = normalize_timeout(self.timeout, default=None)
        except InvalidArgument as exc:
            raise OptionError("timeout", exc.message.removeprefix("timeout: ") + f" ({exc.hint})") from None
        if self.max_output_bytes < 0:
            raise OptionError("max_output_bytes", "must be >= 0")
        if self.max_file_bytes < 0:
            raise OptionError("max_file_bytes", "must be >= 0")
        if self.output_policy not in POLICIES:
            raise OptionError("output_policy", f"must be one of {', '.join(POLICIES)}")


def option_fields(options_cls: type[BaseOptions]) -> dict[str, tuple[Any, dataclasses.Field[Any]]]:
    """Field name -> (resolved type, dataclass field) for an options class."""
    hints = typing.get_type_hints(options_cls)
    return {f.name: (hints[f.name], f) for f in dataclasses.fields(options_cls)}


def type_name(tp: Any) -> str:
    """A short spelling of an option type, as written in code (``int``, ``list[str]``)."""
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def default_of(f: dataclasses.Field[Any]) -> Any:
    """The default value of an options field (calling its factory, if it has one)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def build_options(
    options_cls: type[BaseOptions],
    values: Mapping[str, Any],
    *,
    sources: Mapping[str, str] | None = None,
    default_source: str = "options",
    text_keys: frozenset[str] | set[str] = frozenset(),
) -> BaseOptions:
    """Validate ``values`` against ``options_cls`` and construct it.

    ``sources`` maps each key to where it came from (a file path, an environment
    variable, ``-o``) so errors can point there. Values of ``text_keys`` (and of keys whose
    source is an environment variable, ``$NAME``) arrived as text and are parsed by the
    option's declared type first (:func:`envlayer.coercion.parse_text`). Errors never echo a secret
    option's value, nor the other entries of a table or list.

    Raises:
        ConfigError: an unknown key (with the nearest valid key suggested), a value of
            the wrong type, or a value the options class rejects.
    """
    sources = sources or {}
    text_keys = set(text_keys) | {k for k, source in sources.items() if source.startswith("$")}  # variables are text
    fields = option_fields(options_cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        source = sources.get(key, default_source)
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "valid keys: " + ", ".join(sorted(fields))
            raise ConfigError("unknown option", source=source, key=key, hint=hint)
        tp, f = fields[key]
        if key in text_keys and isinstance(value, str):
            value = parse_text(tp, value)
        ok, coerced = coerce(tp, value)
        if not ok:
            raise ConfigError(
                f"expected {describe(tp)}, got {shown(tp, value, secret=is_secret(f))}",
                source=source,
                key=key,
                hint=f"set {key} to {describe(tp)}",
            )
        kwargs[key] = coerced
    try:
        return options_cls(**kwargs)
    except OptionError as exc:
        raise ConfigError(
            str(exc),
            source=sources.get(exc.key, default_source),
            key=exc.key,
            hint=f"fix the value of {exc.key}",
        ) from exc
