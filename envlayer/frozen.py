"""A faster ``__init__`` for frozen dataclasses made once per command (the request and the
result): :func:`one_store_init`.

A frozen dataclass's generated ``__init__`` stores each field through
``object.__setattr__`` (its own ``__setattr__`` refuses); for the eleven fields of a
result that is most of the cost of making one (about 0.9 of 1.2 us on the bench machine).
The ``__init__`` made here builds the instance's ``__dict__`` as one dict and stores it in
one step: the same signature, defaults, default factories, equality, hash, ``repr`` and
``dataclasses.replace``; the instance stays frozen.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TypeVar

T = TypeVar("T")


class _Factory:
    """The default of a parameter whose field has a default factory: the factory is called
    when it is not passed (shown as ``<factory>``, as ``dataclasses`` shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_NO_VALUE = _Factory()


def one_store_init(cls: type[T]) -> type[T]:
    """Give frozen dataclass ``cls`` (decorated already, with a ``__dict__``: no slots, no
    ``__post_init__``, no ``InitVar`` or keyword-only fields) an ``__init__`` that stores
    all its fields at once; returns ``cls``. Raises ``TypeError`` for a class it cannot
    serve (so a field kind added later fails at import, not silently)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with a __dict__ and no __post_init__")
    namespace: dict[str, Any] = {"_new": object.__new__, "_store": object.__setattr__, "_NO_VALUE": _NO_VALUE}
    signature, lines = [], []
    for field in dataclasses.fields(cls):
        if not field.init or field.kw_only is True:
            raise TypeError(f"{cls.__name__}.{field.name}: only plain init fields are supported")
        name = field.name
        if field.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = field.default
            signature.append(f"{name}=_default_{name}")
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = field.default_factory
            signature.append(f"{name}=_NO_VALUE")
            lines.append(f"    if {name} is _NO_VALUE: {name} = _factory_{name}()\n")
        else:
            signature.append(name)
    stored = ", ".join(f"{field.name!r}: {field.name}" for field in dataclasses.fields(cls))
    source = (
        f"def __make__({', '.join(namespace)}):\n"
        f"  def __init__(self, {', '.join(signature)}):\n"
        + "".join(lines)
        + f"    _store(self, '__dict__', {{{stored}}})\n"
        "  return __init__\n"
    )
    # as dataclasses makes its own: the values reach the function as closure cells, and its
    # globals are the class's module's (where its annotations are resolved)
    made: dict[str, Any] = {}
    exec(source, sys.modules[cls.__module__].__dict__, made)
    init = made["__make__"](**namespace)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = {field.name: field.type for field in dataclasses.fields(cls)} | {"return": None}
    cls.__init__ = init  # type: ignore[misc]
    return cls
