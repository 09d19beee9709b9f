"""The one coercion engine: typed values from TOML, environment variables and the command
line, checked against a declared type.

Used for the top-level configuration keys (:mod:`envlayer.config`) and for every backend
option (:mod:`envlayer.options`), so a value is read the same way wherever it is written.
Values that arrive as text (environment variables, ``-o KEY=VALUE``) go through
:func:`parse_text` first, guided by the declared type; every value then goes through
:func:`coerce`. Supported types: ``str``, ``int``, ``float``, ``bool``, ``None``,
``Literal[...]``, unions, ``list[T]``, ``dict[str, T]`` and ``Any``.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal


def describe(tp: Any) -> str:
    """How to write a value of ``tp``, for messages (``"a list of strings"``)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        item = describe(typing.get_args(tp)[0]).removeprefix("a ").removeprefix("an ")
        return f"a list of {item}s"
    if origin is dict:
        return "a table of strings"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        tp, "None" if tp is type(None) else getattr(tp, "__name__", str(tp))
    )


def parse_text(tp: Any, text: str) -> Any:
    """Turn ``text`` (an environment variable, a ``-o KEY=VALUE`` value) into a value of
    ``tp`` where it reads as one: ``true``/``1``/``yes``/``on`` (and their opposites) for a
    bool, a number for int/float, a JSON array or a comma-separated list for a list, a
    JSON table for a dict, ``""`` for None in an optional. Anything else is returned
    unchanged, so :func:`coerce` reports the mismatch. A ``str`` stays text as written
    (``-o cwd=2024`` is the string ``"2024"``)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text == "" and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return parse_text(non_none[0], text) if len(non_none) == 1 else text
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


def coerce(tp: Any, value: Any) -> tuple[bool, Any]:
    """(ok, coerced value) for ``value`` against type ``tp``. Accepts an int for a float;
    never accepts a bool for a number."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            ok, coerced = coerce(arg, value)
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
            ok, coerced = coerce(args[0], item)
            if not ok:
                return False, value
            out.append(coerced)
        return True, out
    if origin is dict:
        if not isinstance(value, Mapping):
            return False, value
        out_map = {}
        for key, item in value.items():
            ok, coerced = coerce(args[1], item)
            if not ok or not isinstance(key, str):
                return False, value
            out_map[key] = coerced
        return True, out_map
    return isinstance(value, tp), value


def _kind(value: Any) -> str:
    return {bool: "a bool", int: "an integer", float: "a number", str: "a string", type(None): "None"}.get(
        type(value),
        "a table" if isinstance(value, Mapping) else "a list" if isinstance(value, list) else type(value).__name__,
    )


def shown(tp: Any, value: Any, *, secret: bool = False) -> str:
    """``value`` described for an error message about a mismatch with ``tp``, without
    leaking what it must not: a secret is never shown, and of a table or list only the
    first offending entry is named, by its kind (the other entries' values, such as other
    variables' credentials, never appear)."""
    if secret:
        return f"{_kind(value)} (value hidden: the option is secret)"
    args = typing.get_args(tp)
    if isinstance(value, Mapping):
        item_tp = args[1] if typing.get_origin(tp) is dict else Any
        for key, item in value.items():
            if not isinstance(key, str):
                return "a table with a key that is not a string"
            if not coerce(item_tp, item)[0]:
                return f"a table whose entry {key!r} is {_kind(item)}"
        return "a table"
    if isinstance(value, list):
        item_tp = args[0] if typing.get_origin(tp) is list else Any
        for index, item in enumerate(value):
            if not coerce(item_tp, item)[0]:
                return f"a list whose item {index} is {_kind(item)}"
        return "a list"
    text = repr(value)
    return f"{_kind(value)} {text if len(text) <= 80 else text[:77] + '...'}"
