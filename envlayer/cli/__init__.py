"""The ``envlayer`` command: the parser and commands (``app``), exec's planning (``exec_plan``) and the
session broker behind ``envlayer exec`` (``broker``).

Importing this package loads nothing else, so the broker client (the console script's fast path) stays
cheap. For one release ``envlayer.cli.<name>`` still reaches a name of ``envlayer.cli.app`` (``main``,
``build_parser``, ...), the module that was ``envlayer/cli.py``; import from ``envlayer.cli.app``.
"""

from __future__ import annotations


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib

    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
    return getattr(importlib.import_module(f"{__name__}.app"), name)
