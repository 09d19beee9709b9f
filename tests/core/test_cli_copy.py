"""`envlayer cp` on the local backend: a directory tree round-trips byte for byte both
ways, a file lands in an existing directory, and the usage mistakes get clear errors."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest

from envlayer.cli.copy import _transfer_meter, plan_copy
from envlayer.cli.progress import Meter, io_meter, progress
from envlayer.local.backend import LocalEnvironment, LocalOptions
from tests.core.cli_run import run

MB = 1_000_000


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


# --- the progress bar ------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_shows_share_bytes_and_rate_then_erases_itself() -> None:
    done = [0]
    tty = _Terminal()
    with progress("copying", stream=tty, delay=0, meter=Meter(4 * MB, lambda: done[0])):
        done[0] = 2 * MB
        deadline = time.monotonic() + 30
        while "50%" not in tty.getvalue():
            assert time.monotonic() < deadline, tty.getvalue()
            time.sleep(0.05)
    shown = tty.getvalue()
    assert "envlayer: copying [############------------]  50%  2.0/4.0 MB" in shown and "MB/s" in shown
    assert shown.endswith("\r\033[K"), "the bar is erased when the copy ends"


def test_the_bar_stops_at_99_percent_until_the_copy_ends() -> None:
    tty = _Terminal()
    with progress("copying", stream=tty, delay=0, meter=Meter(MB, lambda: 3 * MB)):
        deadline = time.monotonic() + 30
        while "%" not in tty.getvalue():
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert " 99%  1.0/1.0 MB" in tty.getvalue()


def test_the_io_meters_count_what_this_process_reads_and_writes(tmp_path: Path) -> None:
    blob = os.urandom(3 * MB)
    written, read = io_meter(3 * MB, written=True), io_meter(3 * MB, written=False)
    assert written is not None and read is not None
    assert written.done() < MB and read.done() < MB
    (tmp_path / "blob").write_bytes(blob)
    assert written.done() >= 3 * MB and read.done() < MB
    assert (tmp_path / "blob").read_bytes() == blob
    assert read.done() >= 3 * MB
    assert io_meter(0, written=True) is None, "nothing to copy: no bar"


def test_the_meter_totals_are_the_bytes_to_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = make_tree(tmp_path / "src")
    os.symlink("top.txt", tmp_path / "src" / "link")  # not sent by an upload: not counted
    size = sum(len(data) for data in files.values())
    monkeypatch.setattr(sys, "stderr", _Terminal())
    env = LocalEnvironment(LocalOptions(cwd=str(tmp_path)))
    try:
        upload = _transfer_meter(env, plan_copy(str(tmp_path / "src"), "t1:/x"))
        download = _transfer_meter(env, plan_copy(f"t1:{tmp_path}/src", "back"))
        nowhere = _transfer_meter(env, plan_copy(f"t1:{tmp_path}/nope", "back"))
    finally:
        env.cleanup()
    assert upload is not None and upload.total == size
    assert download is not None and download.total == size
    assert nowhere is None, "a size the sandbox cannot tell gives the plain status line"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert _transfer_meter(env, plan_copy(str(tmp_path / "src"), "t1:/x")) is None, "no terminal: no lookup"
