"""`envlayer cp` on the local backend: a directory tree round-trips byte for byte both
ways, a file lands in an existing directory, and the usage mistakes get clear errors."""

from __future__ import annotations

import os
from pathlib import Path

from tests.core.cli_run import run


def make_tree(root: Path) -> dict[str, bytes]:
    """A small tree with nested directories, binary and empty files; its files by path."""
    files = {
        "top.txt": b"hello\n",
        "a/b/c/deep.bin": os.urandom(70_000),
        "a/empty": b"",
        "sp ace/ü.txt": b"unicode name\n",
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def tree_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_directory_round_trips_byte_for_byte(tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src")
    up = run("cp", "--backend", "local", "src", f"t1:{tmp_path}/in-sandbox", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    down = run("cp", "--backend", "local", "--json", f"t1:{tmp_path}/in-sandbox", "back", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert tree_of(tmp_path / "back") == files
    assert '"files": 4' in down.stdout


def test_a_file_goes_into_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "f.txt").write_bytes(b"payload")
    assert run("cp", "--backend", "local", f"t1:{tmp_path}/f.txt", "out", cwd=tmp_path).returncode == 0
    assert (tmp_path / "out" / "f.txt").read_bytes() == b"payload"


def test_mistakes_get_clear_errors(tmp_path: Path) -> None:
    neither = run("cp", "--backend", "local", "a", "b", cwd=tmp_path)
    assert neither.returncode == 1 and "neither SRC nor DST names a task" in neither.stderr
    both = run("cp", "--backend", "local", "t1:/a", "t2:/b", cwd=tmp_path)
    assert both.returncode == 1 and "both SRC and DST name a task" in both.stderr
    missing_local = run("cp", "--backend", "local", "nope", "t1:/tmp/x", cwd=tmp_path)
    assert missing_local.returncode == 1 and "'nope' does not exist on this machine" in missing_local.stderr
    missing_remote = run("cp", "--backend", "local", f"t1:{tmp_path}/nope", "x", cwd=tmp_path)
    assert missing_remote.returncode == 1 and "no such file" in missing_remote.stderr
    assert not (tmp_path / "x").exists()
