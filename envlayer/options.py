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
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from envlayer.errors import ConfigError, EnvlayerError, InvalidArgument
from envlayer.output import POLICIES
from envlayer.request import normalize_timeout


def option(default: Any = dataclasses.MISSING, *, doc: str, factory: Any = dataclasses.MISSING) -> Any:
    """Declare an option field with its documentation."""
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


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


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        item = _describe(typing.get_args(tp)[0]).removeprefix("a ").removeprefix("an ")
        return f"a list of {item}s"
    if origin is dict:
        return "a table of strings"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        tp, "None" if tp is type(None) else getattr(tp, "__name__", str(tp))
    )


def _parse_env_text(tp: Any, text: str) -> Any:
    """Turn the text of an environment variable into a value of (roughly) ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text == "" and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return _parse_env_text(non_none[0], text) if len(non_none) == 1 else text
    if tp is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        return text
    if tp is int:
        try:
            return int(text)
        except ValueError:
            return text
    if tp is float:
        try:
            return float(text)
        except ValueError:
            return text
    if origin in (list, dict):
        stripped = text.strip()
        if stripped.startswith(("[", "{")):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError:
                return text
        if origin is list:
            return [part.strip() for part in text.split(",") if part.strip()]
        return text
    return text


def _coerce(tp: Any, value: Any) -> tuple[bool, Any]:
    """(ok, coerced value) for ``value`` against type ``tp``. Accepts an int for a float."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            ok, coerced = _coerce(arg, value)
            if ok:
                return True, coerced
        return False, value
    if tp is type(None):
        return value is None, value
    if origin is Literal:
        return value in args, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        return False, value
    if tp is str:
        return isinstance(value, str), value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            return False, value
        out = []
        for item in value:
            ok, coerced = _coerce(args[0], item)
            if not ok:
                return False, value
            out.append(coerced)
        return True, out
    if origin is dict:
        if not isinstance(value, Mapping):
            return False, value
        out_map = {}
        for key, item in value.items():
            ok, coerced = _coerce(args[1], item)
            if not ok or not isinstance(key, str):
                return False, value
            out_map[key] = coerced
        return True, out_map
    return isinstance(value, tp), value


def build_options(
    options_cls: type[BaseOptions],
    values: Mapping[str, Any],
    *,
    sources: Mapping[str, str] | None = None,
    default_source: str = "options",
) -> BaseOptions:
    """Validate ``values`` against ``options_cls`` and construct it.

    ``sources`` maps each key to where it came from (a file path, an environment
    variable) so errors can point there. String values from environment variables are
    parsed (bools, numbers, JSON lists/tables, comma-separated lists) before checking.

    Raises:
        ConfigError: an unknown key (with the nearest valid key suggested), a value of
            the wrong type, or a value the options class rejects.
    """
    sources = sources or {}
    fields = option_fields(options_cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        source = sources.get(key, default_source)
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "valid keys: " + ", ".join(sorted(fields))
            raise ConfigError("unknown option", source=source, key=key, hint=hint)
        tp, _ = fields[key]
        if isinstance(value, str) and source.startswith("$"):
            value = _parse_env_text(tp, value)
        ok, coerced = _coerce(tp, value)
        if not ok:
            raise ConfigError(
                f"expected {_describe(tp)}, got {type(value).__name__} {value!r}",
                source=source,
                key=key,
                hint=f"set {key} to {_describe(tp)}",
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
