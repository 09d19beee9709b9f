"""Errors are all in the hierarchy, and none is dead."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import envlayer
from envlayer import errors
from envlayer.errors import EnvlayerError

ROOT = Path(__file__).resolve().parents[2]


def _envlayer_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(envlayer.__path__, "envlayer."):
        if info.name.startswith("envlayer.testing"):
            continue  # needs pytest; defines no exception
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_public_exception_is_an_envlayer_error() -> None:
    """A stop raised like Ctrl-C (a ``KeyboardInterrupt``, e.g. the bench's ``Terminated``
    for SIGTERM) is not an error and stays out of the hierarchy."""
    outside = [
        name
        for name, cls in _envlayer_exceptions().items()
        if not name.rsplit(".", 1)[1].startswith("_") and not issubclass(cls, (EnvlayerError, KeyboardInterrupt))
    ]
    assert outside == []


def test_every_error_type_is_raised_somewhere() -> None:
    sources = "\n".join(
        p.read_text() for pattern in ("envlayer/**/*.py", "plugins/*/envlayer_*/**/*.py") for p in ROOT.glob(pattern)
    )
    defined = [
        name
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, EnvlayerError) and cls is not EnvlayerError
    ]
    assert dead_names(defined, sources) == []


def dead_names(names: list[str], sources: str) -> list[str]:
    """The names never constructed (``Name(args...)``) in ``sources``, class statements aside."""
    return [name for name in names if not re.search(rf"\b{name}\([^)]", sources.replace(f"class {name}(", ""))]


def test_the_dead_error_check_finds_a_type_never_raised() -> None:
    sources = "class Unused(EnvlayerError):\n    pass\nclass Used(EnvlayerError): ...\nraise Used('x')\n"
    assert dead_names(["Unused", "Used"], sources) == ["Unused"]
