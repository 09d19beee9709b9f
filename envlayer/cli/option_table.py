"""``envlayer backends --options``: the options of the backends as tables (name, type,
default: one line each), those every backend has alike once; or, for the backends
named, each option with its description."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envlayer.cli.report import table

Options = Mapping[str, Mapping[str, Any]]
"""An entry's ``options``: name -> {"type", "default", "doc"}."""


def _default_cell(value: Any) -> str:
    """A default as the config file writes it (JSON-like: true, "text", [...])."""
    return json.dumps(value, default=str)


def _shared(all_options: list[Options]) -> list[str]:
    """The options every one of ``all_options`` has with the same type and default."""
    if len(all_options) < 2:
        return []
    first, *rest = all_options
    return [
        name
        for name, spec in first.items()
        if all(name in other and (other[name]["type"], other[name]["default"]) == (spec["type"], spec["default"])
               for other in rest)
    ]  # fmt: skip


def _print_table(title: str, options: Options, names: list[str]) -> None:
    rows = [[name, options[name]["type"], _default_cell(options[name]["default"])] for name in names]
    print(f"\n{title}\n" + table(rows, ["OPTION", "TYPE", "DEFAULT"]))


def print_backend_options(entries: list[Mapping[str, Any]], *, with_docs: bool) -> None:
    """Print the ``options`` of the ``backends --json`` entries that have them: compact
    tables, or (``with_docs``) each option with its description."""
    having = [e for e in entries if e.get("options")]
    if with_docs:
        for entry in having:
            print(f"\n[backends.{entry['name']}]")
            for name, spec in entry["options"].items():
                print(f"{name} ({spec['type']}, default {_default_cell(spec['default'])})\n    {spec['doc']}")
        return
    shared = _shared([e["options"] for e in having])
    if shared:
        _print_table("every backend:", having[0]["options"], shared)
    for entry in having:
        own = [name for name in entry["options"] if name not in shared]
        if own:
            _print_table(f"[backends.{entry['name']}]", entry["options"], own)
    print("\n`envlayer backends --options BACKEND` describes each option of BACKEND")
