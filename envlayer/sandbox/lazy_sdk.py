"""A plugin's SDK imported on first use, in one module of the plugin.

A backend's SDK costs tens to hundreds of milliseconds to import, and ``envlayer backends``,
``envlayer ls`` and every CLI call import backend classes. So each built-in plugin imports
its SDK in exactly one module, ``envlayer_<name>/sdk.py``, whose attributes are the SDK's
modules, each imported the first time it is read (a PEP 562 module ``__getattr__``); every
other module of the plugin imports that module at its top and reads the SDK through it::

    # envlayer_foo/sdk.py
    from typing import TYPE_CHECKING

    from envlayer.sandbox.lazy_sdk import lazy_modules

    if TYPE_CHECKING:  # what type checkers and readers see
        import foo
        import foo.errors as errors

    __getattr__ = lazy_modules(__name__, {"foo": "foo", "errors": "foo.errors"})

    # envlayer_foo/anything.py
    from envlayer_foo import sdk
    ...
    except sdk.errors.NotFound: ...

An ``except sdk.errors.X`` clause is evaluated only when an exception is being matched, so
it imports nothing on the path where nothing failed.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType


def lazy_modules(
    module: str, modules: Mapping[str, str], *, before_import: Callable[[], None] | None = None
) -> Callable[[str], ModuleType]:
    """A module ``__getattr__`` (PEP 562) for the module named ``module``.

    Reading an attribute ``name`` listed in ``modules`` calls ``before_import()`` (when
    given), imports the module ``modules[name]`` (a dotted name), sets it as a plain
    attribute of ``module`` (later reads never come back here) and returns it. Any other
    name raises :class:`AttributeError`; an SDK that is not installed raises its
    :class:`ImportError`."""

    def __getattr__(name: str) -> ModuleType:
        dotted = modules.get(name)
        if dotted is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if before_import is not None:
            before_import()
        loaded = importlib.import_module(dotted)
        setattr(sys.modules[module], name, loaded)
        return loaded

    return __getattr__
