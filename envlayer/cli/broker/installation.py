"""What a broker was started with, and whether the installation changed since.

A broker runs the code, the import path and the backends that were installed when it
started: a plugin installed later (``uv sync --all-packages``, ``pip install
envlayer-foo``) is not importable in it (its ``.pth`` entries are read at interpreter
start), one removed or upgraded leaves it running old code. So before each call the
broker asks :meth:`Installation.changed`:

* a cheap stamp first: the modification times of the directories on ``sys.path``
  (installing or removing a distribution adds or removes its ``*.dist-info`` there);
* only when the stamp moved, the description (:func:`describe`): every installed
  distribution's name and version (envlayer's own among them), and the entry points of
  group ``envlayer.backends``. When that differs, the installation changed, and the
  answer says how in words.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass

from envlayer.discovery.entrypoints import read_group

BACKENDS_GROUP = "envlayer.backends"
MAX_NAMED = 4
"""Changes of each kind named in the reason; more are counted."""


@dataclass(frozen=True)
class Description:
    """The distributions (name -> version) and the backends' entry points (name -> target)."""

    distributions: dict[str, str]
    backends: dict[str, str]


def stamp() -> tuple[tuple[str, int], ...]:
    """The modification time of every directory on ``sys.path`` (-1: cannot be read)."""

    def mtime(path: str) -> int:
        try:
            return os.stat(path or ".").st_mtime_ns
        except OSError:
            return -1

    return tuple((path, mtime(path)) for path in sys.path)


def describe() -> Description:
    """What is installed now, read from ``sys.path`` as a new interpreter would see it:
    each ``<name>-<version>.dist-info`` (or ``.egg-info``) directory's name (the wheel
    spec's naming; a listing, a few milliseconds), and the backends' entry points
    (:func:`envlayer.discovery.entrypoints.read_group`, never cached)."""
    distributions: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for item in names:
            stem, dot, kind = item.rpartition(".")
            if dot and kind in ("dist-info", "egg-info"):
                name, _, version = stem.partition("-")
                distributions.setdefault(name.lower().replace("_", "-"), version)
    backends = {record.name: record.value for record in read_group(BACKENDS_GROUP)}
    return Description(distributions, backends)


def _named(words: list[str]) -> str:
    shown = ", ".join(words[:MAX_NAMED])
    return shown + (f" and {len(words) - MAX_NAMED} more" if len(words) > MAX_NAMED else "")


def difference(old: Description, new: Description) -> str:
    """In words, how ``new`` differs from ``old`` (empty when it does not)."""
    parts = []
    added = [f"{n} {v}" for n, v in sorted(new.distributions.items()) if n not in old.distributions]
    removed = [n for n in sorted(old.distributions) if n not in new.distributions]
    changed = [
        f"{n} {old.distributions[n]} -> {v}"
        for n, v in sorted(new.distributions.items())
        if n in old.distributions and old.distributions[n] != v
    ]
    backends = sorted(n for n in {*old.backends, *new.backends} if old.backends.get(n) != new.backends.get(n))
    for label, words in (("installed", added), ("removed", removed), ("upgraded", changed)):
        if words:
            parts.append(f"{label} {_named(words)}")
    if backends:
        parts.append(f"backends changed: {_named(backends)}")
    return "; ".join(parts)


class Installation:
    """The installation a broker started with (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp = stamp()
        self._description = describe()

    def changed(self) -> str | None:
        """How the installation changed since the broker started, in words, or None."""
        now = stamp()
        with self._lock:
            if now == self._stamp:
                return None
            self._stamp = now
            reason = difference(self._description, describe())
        return reason or None
