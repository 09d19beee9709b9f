"""The build context of an image built from a Dockerfile: its digest and .dockerignore."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlayer.errors import ConfigError
from envlayer.options import OptionError
from envlayer.sandbox.dockerfile import IMAGE_REPOSITORY, DockerIgnore, resolve_build
from envlayer.sandbox.options import DockerfileOptions


def _context(tmp_path: Path, files: dict[str, str], dockerfile: str = "FROM scratch\nCOPY . /app\n") -> Path:
    (tmp_path / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "Dockerfile"


def _digest(dockerfile: Path, context: Path | None = None) -> str:
    build = resolve_build(str(dockerfile), str(context) if context else None)
    assert build is not None
    return build.digest


def test_digest_follows_dockerfile_and_every_visible_file(tmp_path: Path) -> None:
    dockerfile = _context(tmp_path, {"a.txt": "one", "sub/b.txt": "two"})
    first = _digest(dockerfile)
    assert _digest(dockerfile) == first  # stable
    (tmp_path / "sub/b.txt").write_text("changed")
    second = _digest(dockerfile)
    assert second != first
    os.chmod(tmp_path / "a.txt", 0o755)
    third = _digest(dockerfile)
    assert third != second  # permission bits travel into the image
    (tmp_path / "new.txt").write_text("")
    fourth = _digest(dockerfile)
    assert fourth != third
    (tmp_path / "link").symlink_to("a.txt")
    assert _digest(dockerfile) != fourth
    dockerfile.write_text("FROM scratch\n")
    assert _digest(dockerfile) not in {first, second, third, fourth}


def test_dockerignored_files_leave_the_digest_alone(tmp_path: Path) -> None:
    dockerfile = _context(
        tmp_path,
        {".dockerignore": "# comment\n/logs\n**/*.pyc\n!keep.pyc\n", "app.py": "", "logs/run.log": "1", "pkg/m.py": ""},
    )
    first = _digest(dockerfile)
    (tmp_path / "logs/run.log").write_text("2")
    (tmp_path / "logs/more").mkdir()
    (tmp_path / "pkg/m.pyc").write_text("bytecode")
    assert _digest(dockerfile) == first
    (tmp_path / "keep.pyc").write_text("kept")  # re-included by the ! rule
    assert _digest(dockerfile) != first


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        (["*.md"], "README.md", True),
        (["*.md"], "docs/README.md", False),  # * never crosses /
        (["**/*.md"], "docs/a/README.md", True),
        (["**/*.md"], "README.md", True),
        (["docs"], "docs/a/b.txt", True),  # a matched directory takes everything under it
        (["./build/"], "build/x", True),
        (["docs", "!docs/keep.txt"], "docs/keep.txt", False),
        (["!docs/keep.txt", "docs"], "docs/keep.txt", True),  # the last match wins
        (["file?.txt"], "file1.txt", True),
        (["file?.txt"], "file10.txt", False),
        (["[a-c].txt"], "b.txt", True),
        (["[!a-c].txt"], "b.txt", False),
        (["# just a comment", ""], "x", False),
    ],
)
def test_dockerignore_rules(patterns: list[str], path: str, excluded: bool) -> None:
    assert DockerIgnore(patterns).excludes(path) is excluded


def test_context_defaults_to_the_dockerfiles_directory_and_may_be_elsewhere(tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "f").write_text("data")
    dockerfile = tmp_path / "images" / "Dockerfile"
    dockerfile.parent.mkdir()
    dockerfile.write_text("FROM scratch\nCOPY f /f\n")
    build = resolve_build(str(dockerfile), str(context))
    assert build is not None
    assert build.context == context and build.dockerfile_in_context is None
    assert build.tag == f"{IMAGE_REPOSITORY}:{build.digest[:32]}"
    default = resolve_build(str(dockerfile), None)
    assert default is not None and default.context == dockerfile.parent
    assert default.dockerfile_in_context == "Dockerfile"
    (context / "f").write_text("other")
    assert _digest(dockerfile, context) != build.digest


def test_missing_dockerfile_or_context_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dockerfile") as missing:
        resolve_build(str(tmp_path / "nope"), None)
    assert "path of a Dockerfile" in missing.value.hint
    dockerfile = _context(tmp_path, {})
    with pytest.raises(ConfigError, match="build_context"):
        resolve_build(str(dockerfile), str(tmp_path / "absent"))
    assert resolve_build(None, None) is None


def test_build_context_alone_is_refused() -> None:
    with pytest.raises(OptionError, match="only used with dockerfile"):
        DockerfileOptions(build_context="/tmp")
