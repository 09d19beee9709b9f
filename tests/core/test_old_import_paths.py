"""The module paths from before the subpackages keep working for one release (envlayer/_aliases.py)."""

from __future__ import annotations

import contextlib
import importlib
import json
import subprocess
import sys

import pytest

from envlayer._aliases import DEPRECATED, MOVED, new_path

OLD_PATHS = [*sorted(MOVED), "envlayer.tools.jobs", "envlayer.broker.client", "envlayer.broker.protocol"]


@pytest.mark.parametrize("old", OLD_PATHS)
def test_an_old_path_is_the_same_module_object_as_the_new_one(old: str) -> None:
    with pytest.warns(DeprecationWarning) if old in DEPRECATED and old not in sys.modules else contextlib.nullcontext():
        module = importlib.import_module(old)
    assert module is importlib.import_module(new_path(old) or "")
    assert module.__spec__.name == new_path(old)  # the real spec, not the alias's


def test_only_the_old_public_paths_warn() -> None:
    probe = (
        "import importlib, json, warnings\n"
        "from envlayer._aliases import MOVED\n"
        "warned = []\n"
        "for old in sorted(MOVED):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        importlib.import_module(old)\n"
        "    warned += [old for w in caught if issubclass(w.category, DeprecationWarning) and old in str(w.message)]\n"
        "print(json.dumps(warned))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert set(json.loads(out.stdout)) == DEPRECATED


def test_a_path_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("envlayer.no_such_module")
