"""The shell examples of README.md and docs/ run as written, on the local backend.

Every fenced ``sh`` block is one test, named ``PAGE:LINE`` (``pytest -v`` lists each
example run). A block that cannot run here is marked in the page itself by the line
before it, and is then not collected at all (a run has no skip for it)::

    <!-- doc-example: skip (the reason) -->

``grep -rn "doc-example: skip" README.md docs`` lists those blocks with their reasons;
:func:`test_every_doc_example_marker_is_well_formed` checks that each marker is one of the
two forms and stands directly before a fenced block, so a typo cannot hide an example.

A block marked ``<!-- doc-example: docker IMAGE -->`` needs a Docker daemon with IMAGE
(``scripts/test`` provisions both): without them it is skipped saying so, and fails under
``CI=true`` (:func:`envlayer.testing.fixtures.require_docker`). Every sandbox it left in its
profile is removed with its workspace afterwards.

The blocks run in the repository's root with ``bash -e``, one shell per block, with the
test interpreter's ``bin`` first on ``PATH``. ``uv run `` at the start of a command is
dropped: it only selects the project's environment, which that ``PATH`` already is (uv may
not be installed where the tests run, and ``uv run`` would sync the environment). Each block
gets a profile, a broker runtime directory and config and cache directories of its own, so
its ``ls``/``reap``/``rm`` see only what it made; its brokers are stopped afterwards.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envlayer.testing.fixtures import require_docker

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```(?:sh|bash)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SKIP = re.compile(r"<!-- doc-example: skip \((.+?)\) -->\s*$")
DOCKER = re.compile(r"<!-- doc-example: docker (\S+) -->\s*$")
MARKER = re.compile(r"^.*<!-- doc-example:.*$", re.MULTILINE)
UV_RUN = re.compile(r"^(\s*(?:\w+=\S*\s+)*)uv run (?:--no-sync )?", re.MULTILINE)


def _examples() -> list[pytest.param]:
    """One param per ``sh`` block of :data:`PAGES` that is not marked ``skip``."""
    params = []
    for page in PAGES:
        text, name = page.read_text(), str(page.relative_to(ROOT))
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if SKIP.search(before):
                continue
            docker = DOCKER.search(before)
            params.append(pytest.param(match.group(1), docker.group(1) if docker else None, id=f"{name}:{line}"))
    return params


def test_every_doc_example_marker_is_well_formed() -> None:
    """Each ``doc-example`` marker is a whole line of one of the two forms, directly before
    a fenced block (a misspelt or misplaced marker would leave an example unchecked)."""
    wrong = []
    for page in PAGES:
        text, name = page.read_text(), str(page.relative_to(ROOT))
        for match in MARKER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            marker = match.group(0).strip()
            following = text[match.end() + 1 :].split("\n", 1)[0]
            well_formed = (SKIP.fullmatch(marker) or DOCKER.fullmatch(marker)) and marker.startswith("<!--")
            if not well_formed or not following.startswith("```"):
                wrong.append(f"{name}:{line}: {marker!r} then {following!r}")
    forms = "`<!-- doc-example: skip (REASON) -->` or `<!-- doc-example: docker IMAGE -->`"
    assert not wrong, f"a marker is {forms} on the line right before a fenced block:\n" + "\n".join(wrong)


def _remove_docker_sandboxes(env: dict[str, str]) -> None:
    """Remove every Docker sandbox (and workspace) of the example's profile."""
    envlayer = str(BIN / "envlayer")
    listed = subprocess.run(
        [envlayer, "ls", "--backend", "docker", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    tasks = {s["task"] for outcome in json.loads(listed.stdout or "[]") for s in outcome["sandboxes"]}
    for task in sorted(tasks):
        subprocess.run(
            [envlayer, "rm", "--backend", "docker", "--force", "--purge", "--", task],
            env=env,
            capture_output=True,
            timeout=120,
        )


def _isolated_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVLAYER_", "PYTEST_"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        ENVLAYER_PROFILE=f"doc-examples-{os.getpid()}",
        ENVLAYER_RUNTIME_DIR=str(tmp / "run"),
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_CACHE_HOME=str(tmp / "cache"),
    )
    return env


@pytest.mark.parametrize(("script", "docker_image"), _examples())
def test_example_runs_as_written(
    script: str, docker_image: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if docker_image is not None:
        require_docker(docker_image, "the Docker examples of the docs")
    env = _isolated_env(tmp_path)
    try:
        proc = subprocess.run(
            ["bash", "-e", "-c", UV_RUN.sub(r"\1", script)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        subprocess.run([str(BIN / "envlayer"), "broker", "stop"], env=env, capture_output=True, timeout=60)
        if docker_image is not None:
            _remove_docker_sandboxes(env)
    with capsys.disabled():
        print(f"\n--- ran:\n{script}--- exit {proc.returncode}")
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
