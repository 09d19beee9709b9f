"""Every distribution of the repository is ready to publish: one version source each (its
package's ``__version__``, read by hatch), all equal to the core's; the MIT LICENSE and
metadata; ``py.typed``; plugins depend on a range of ``envlayer`` that holds its version.
Building and installing the wheels is checked by ``scripts/check-wheels``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import envlayer

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = [ROOT, *sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))]


def _project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=lambda p: p.name)
def test_one_version_source_equal_to_the_core(dist: Path) -> None:
    data = _project(dist)
    assert "version" not in data["project"] and data["project"]["dynamic"] == ["version"]
    source = dist / data["tool"]["hatch"]["version"]["path"]
    match = re.search(r'^__version__ = "([^"]+)"$', source.read_text(), re.M)
    assert match and match.group(1) == envlayer.__version__, f"{source} must carry {envlayer.__version__}"


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=lambda p: p.name)
def test_license_metadata_and_typing_marker(dist: Path) -> None:
    project = _project(dist)["project"]
    assert project["license"] == "MIT" and (dist / "LICENSE").read_text().startswith("MIT License")
    assert project["authors"] and project["urls"]["Homepage"]
    assert "Typing :: Typed" in project["classifiers"]
    (package,) = _project(dist)["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert (dist / package / "py.typed").is_file()


@pytest.mark.parametrize("dist", DISTRIBUTIONS[1:], ids=lambda p: p.name)
def test_plugins_depend_on_a_range_of_envlayer_holding_its_version(dist: Path) -> None:
    (requirement,) = [d for d in _project(dist)["project"]["dependencies"] if re.match(r"envlayer\b(?![-_])", d)]
    match = re.fullmatch(r"envlayer>=([\d.]+),<([\d.]+)", requirement.replace(" ", ""))
    assert match, f"{dist.name}: depend on envlayer>=X,<Y, not {requirement!r}"
    low, high = (_version_tuple(v) for v in match.groups())
    assert low <= _version_tuple(envlayer.__version__) < high
