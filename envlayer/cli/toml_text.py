"""Values written as TOML (``envlayer config`` prints the effective configuration as a
file ``envlayer.toml`` could hold; TOML 1.0, https://toml.io/en/v1.0.0). The standard
library reads TOML but does not write it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    """``key`` bare when TOML allows it, else quoted."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """``value`` (str, bool, int, float, list, mapping; anything else as its text) as a
    TOML value. ``None`` has no TOML form: callers leave such keys out."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string


def toml_line(key: str, value: Any, comment: str) -> str:
    """``key = value  # comment``; a ``None`` value as a comment (TOML has no null)."""
    if value is None:
        return f"# {toml_key(key)} is not set    # {comment}"
    return f"{toml_key(key)} = {toml_value(value)}    # {comment}"
