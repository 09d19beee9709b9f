"""``one_store_init``: the request and result dataclasses keep what a frozen dataclass
promises (signature, defaults, fresh default factories, frozen, equality, hash,
``replace``, pickling) with an ``__init__`` that stores every field at once."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from envlayer.frozen import one_store_init
from envlayer.request import ExecRequest, ScriptRequest
from envlayer.result import ExecResult, Truncation


@dataclasses.dataclass(frozen=True)
class _Reference:
    """What ``dataclasses`` alone makes, to compare ``one_store_init``'s classes with."""

    a: int
    b: str = "b"
    c: list[int] = dataclasses.field(default_factory=list)


_Fast = one_store_init(
    dataclasses.make_dataclass("_Fast", [(f.name, f.type, f) for f in dataclasses.fields(_Reference)], frozen=True)
)


def test_same_signature_and_values_as_the_generated_init() -> None:
    assert str(inspect.signature(_Fast)) == str(inspect.signature(_Reference))
    for args, kwargs in (((1,), {}), ((1, "x"), {}), ((), {"a": 2, "c": [3]}), ((4,), {"b": "y"})):
        assert dataclasses.asdict(_Fast(*args, **kwargs)) == dataclasses.asdict(_Reference(*args, **kwargs))


def test_default_factories_give_each_instance_its_own_value() -> None:
    first, second = _Fast(1), _Fast(2)
    assert first.c == [] and first.c is not second.c
    assert ExecRequest("a").env is not ExecRequest("b").env
    assert ExecRequest("a").exec_id != ExecRequest("a").exec_id


@pytest.mark.parametrize(
    "instance",
    [
        ExecResult(3, b"out", b"err", 1.5, False, None, Truncation("head", 10, 5, 5, 0), None, "r", True, "n"),
        ExecRequest("true", cwd="/tmp", env={"A": "1"}, timeout=2.0),
        ScriptRequest("true", raw_input=b"x", in_shell=False),
    ],
)
def test_instances_stay_frozen_comparable_replaceable_and_picklable(instance: object) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        instance.exit_code = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(instance)) == instance
    assert dataclasses.replace(instance) == instance
    changed = dataclasses.replace(instance, timeout=9.0)
    assert changed.timeout == 9.0 and changed != instance
    if isinstance(instance, ExecResult):
        assert hash(instance) == hash(dataclasses.replace(instance))
        assert instance.exit_code == 3 and instance.stdout_truncation == Truncation("head", 10, 5, 5, 0)


def test_refuses_a_class_it_cannot_serve() -> None:
    @dataclasses.dataclass
    class NotFrozen:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    @dataclasses.dataclass(frozen=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class KeywordOnly:
        a: int = dataclasses.field(default=1, kw_only=True)

    for cls in (NotFrozen, Slotted, PostInit, KeywordOnly, int):
        with pytest.raises(TypeError):
            one_store_init(cls)
