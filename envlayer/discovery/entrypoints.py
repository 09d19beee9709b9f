"""Fast, always-fresh reading of one entry-point group from installed distributions.

``importlib.metadata`` costs ~40-90 ms to import here (email, zipfile, csv...), which
would dominate ``envlayer backends`` and every agent start. Installed distributions
are ``*.dist-info`` directories on ``sys.path`` with an ``entry_points.txt``; reading
those directly takes a few milliseconds. The first distribution of a given name on
``sys.path`` wins, as with ``importlib.metadata``.

Anything this reader does not understand (a zip archive or an ``.egg`` on ``sys.path``,
an ``.egg-info`` distribution) makes it defer to ``importlib.metadata`` for the whole
answer, so the result is never less correct than the standard library's.
"""

from __future__ import annotations

import os
import sys
from collections import namedtuple

# `typing` costs ~17 ms to import here and is not needed at run time on this path.
EntryPointRecord = namedtuple("EntryPointRecord", "name value distribution version")
"""One entry point (``name``, ``value`` = "module:attr") and the distribution
(``distribution``, ``version``) that declares it; all fields are strings."""


class _Unsupported(Exception):
    """A sys.path layout this reader leaves to importlib.metadata."""


def _normalize(name: str) -> str:
    """PEP 503 name normalization (runs of ``-_.`` become one ``-``), without ``re``
    (importing it costs ~9 ms here)."""
    folded = name.lower().replace("_", "-").replace(".", "-")
    while "--" in folded:
        folded = folded.replace("--", "-")
    return folded


def _metadata_headers(path: str) -> tuple[str, str]:
    name = version = ""
    with open(os.path.join(path, "METADATA"), encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                break
            if line.startswith("Name:"):
                name = line[5:].strip()
            elif line.startswith("Version:"):
                version = line[8:].strip()
    return name, version


def _group_entries(path: str, group: str) -> list[tuple[str, str]]:
    try:
        with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return []
    entries, in_group = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            in_group = line == f"[{group}]"
            continue
        if in_group and "=" in line:
            name, _, value = line.partition("=")
            entries.append((name.strip(), value.strip()))
    return entries


def _scan(group: str) -> list[EntryPointRecord]:
    seen: set[str] = set()
    records: list[EntryPointRecord] = []
    for entry in sys.path:
        directory = entry or "."
        if os.path.isfile(directory):
            raise _Unsupported(directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for item in names:
            if item.endswith(".egg-info") or item.endswith(".egg"):
                raise _Unsupported(item)
            if not item.endswith(".dist-info"):
                continue
            path = os.path.join(directory, item)
            try:
                dist, version = _metadata_headers(path)
            except OSError:
                continue
            key = _normalize(dist or item.split("-", 1)[0])
            if key in seen:
                continue
            seen.add(key)
            records.extend(EntryPointRecord(n, v, dist, version) for n, v in _group_entries(path, group))
    return records


def _from_importlib(group: str) -> list[EntryPointRecord]:
    import importlib.metadata

    return [
        EntryPointRecord(
            ep.name, ep.value, ep.dist.name if ep.dist else "unknown", ep.dist.version if ep.dist else "unknown"
        )
        for ep in importlib.metadata.entry_points(group=group)
    ]


def read_group(group: str) -> list[EntryPointRecord]:
    """Every entry point of ``group`` in the distributions visible on ``sys.path`` now.

    Never cached: an install made a moment ago is seen. Imports nothing it declares.
    """
    try:
        return _scan(group)
    except _Unsupported:
        return _from_importlib(group)
