"""docs/architecture.md's module tree is drawn from the code: every module of envlayer/ is in it, and
nothing it lists is missing from envlayer/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: an entry of the tree: indentation (two spaces a level), then a module `name.py` or a package `name/`
ENTRY = re.compile(r"^(?P<indent>(?:  )*)(?P<name>\w+(?:\.py|/))(?:\s|$)")


def tree_paths() -> set[str]:
    """The paths under envlayer/ that the first code block of docs/architecture.md lists."""
    block = (ROOT / "docs" / "architecture.md").read_text().split("```\n", 2)[1]
    stack: list[str] = []
    paths = set()
    for line in block.splitlines():
        match = ENTRY.match(line)
        if match is None or line.startswith(("plugins/", "tests/")):
            continue  # a description's continuation line, or a distribution outside the core
        depth = len(match["indent"]) // 2
        stack[depth:] = [match["name"]]
        paths.add("".join(stack))
    return paths


def code_paths() -> set[str]:
    """Every module (`.py` other than `__init__`) and package of envlayer/."""
    paths = {"envlayer/"}
    for path in (ROOT / "envlayer").rglob("*.py"):
        relative = path.relative_to(ROOT)
        if path.name != "__init__.py":
            paths.add(relative.as_posix())
        elif relative.parent.name != "envlayer":
            paths.add(relative.parent.as_posix() + "/")
    return paths


def test_every_module_of_the_core_is_in_the_tree() -> None:
    assert code_paths() - tree_paths() == set(), "add these modules to the tree in docs/architecture.md"


def test_the_tree_lists_no_module_that_is_gone() -> None:
    assert tree_paths() - code_paths() == set(), "remove (or fix the path of) these entries in docs/architecture.md"
