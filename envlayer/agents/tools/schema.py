"""Check tool-call arguments against the JSON-schema subset the tool definitions use.

Supported: ``type: object`` with ``properties``, ``required`` and
``additionalProperties: false``; property types ``string``, ``integer``, ``number``,
``boolean``, ``object`` (checked by the same rules) and ``array`` (``items``,
``minItems``); ``enum``; ``minimum``; ``minLength``. An explicit ``null`` for an optional
property counts as absent (models often send them).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from envlayer.errors import ToolArgumentError

__all__ = ["ToolArgumentError", "validate"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (Mapping,),
    "array": (list, tuple),
}


def validate(arguments: Any, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return the arguments with ``null`` optionals dropped.

    Raises:
        ToolArgumentError: not an object, a missing required or unknown property, a
            wrong type, a value outside ``enum``/``minimum``/``minLength``.
    """
    if not isinstance(arguments, Mapping):
        raise ToolArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    props: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    required = schema.get("required", [])
    clean = {k: v for k, v in arguments.items() if not (v is None and k not in required)}
    missing = [name for name in required if clean.get(name) is None]
    if missing:
        raise ToolArgumentError("missing required argument(s): " + ", ".join(missing))
    for name, value in clean.items():
        spec = props.get(name)
        if spec is None:
            if schema.get("additionalProperties", True) is False:
                close = difflib.get_close_matches(name, list(props), n=1)
                extra = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(props)})"
                raise ToolArgumentError(f"unknown argument {name!r}{extra}")
            continue
        _check(name, value, spec)
    return clean


def _check(name: str, value: Any, spec: Mapping[str, Any]) -> None:
    kind = spec.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and (kind == "boolean" or not isinstance(value, bool))
        if not ok:
            article = "an" if kind[0] in "aeiou" else "a"
            raise ToolArgumentError(f"argument {name!r} must be {article} {kind}, got {type(value).__name__} {value!r}")
    if "enum" in spec and value not in spec["enum"]:
        raise ToolArgumentError(f"argument {name!r} must be one of {', '.join(map(repr, spec['enum']))}")
    if "minimum" in spec and value < spec["minimum"]:
        raise ToolArgumentError(f"argument {name!r} must be >= {spec['minimum']}, got {value!r}")
    if "minLength" in spec and len(value) < spec["minLength"]:
        raise ToolArgumentError(f"argument {name!r} must not be empty")
    if kind == "array":
        if len(value) < spec.get("minItems", 0):
            raise ToolArgumentError(f"argument {name!r} needs at least {spec['minItems']} item(s)")
        for i, item in enumerate(value):
            _check(f"{name}[{i}]", item, spec.get("items", {}))
    elif kind == "object" and "properties" in spec:
        try:
            validate(value, spec)
        except ToolArgumentError as exc:
            raise ToolArgumentError(f"argument {name!r}: {exc.message}") from None
