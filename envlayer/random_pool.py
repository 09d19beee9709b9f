"""Random values drawn from the OS's CSPRNG a batch at a time: exec ids and marker seeds.

Every command needs a fresh exec id and a fresh marker seed; one ``os.urandom`` call per
value is a ``getrandom`` system call per value. A :class:`RandomPool` makes one call per
batch and hands each value out exactly once, so a value is as unguessable as a fresh draw.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class RandomPool(Generic[T]):
    """Values made by ``make`` from ``batch_bytes`` random bytes at a time, taken one by one.

    Thread-safe without a lock: values wait in a ``deque``, whose ``popleft`` is atomic, so no
    two callers ever get the same one (two threads that find it empty both refill it: more
    values, none repeated). A forked child starts with an empty pool: it never reuses its
    parent's values.
    """

    def __init__(self, make: Callable[[bytes], Iterable[T]], batch_bytes: int) -> None:
        self._make = make
        self._batch_bytes = batch_bytes
        self._values: deque[T] = deque()
        os.register_at_fork(after_in_child=self._values.clear)

    def take(self) -> T:
        """One value, never handed out before."""
        values = self._values
        while True:
            try:
                return values.popleft()
            except IndexError:
                values.extend(self._make(os.urandom(self._batch_bytes)))


def chunks(raw: bytes, size: int) -> Iterable[bytes]:
    """``raw`` cut into pieces of ``size`` bytes (a shorter tail is dropped)."""
    return (raw[at : at + size] for at in range(0, len(raw) - size + 1, size))
