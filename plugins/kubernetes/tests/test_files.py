"""Directory transfer (tar over exec) against the fake API server: round trip, summary,
caps, missing paths, members escaping the destination, ``file_root`` with symlinks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from envlayer.errors import FileTooLarge, SandboxFileNotFound, SandboxPathError


def _tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 40)
    (root / "sub" / "deeper" / "empty").write_bytes(b"")
    os.symlink("a.txt", root / "link-to-a")


def test_upload_and_download_round_trip(make_env: Any, tmp_path: Path) -> None:
    env = make_env()
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    _tree(src)
    up = env.upload_dir(src, "project")
    assert (up.files, up.bytes) == (3, 6 + 256 * 40)
    assert env.exec("cat project/a.txt; readlink project/link-to-a").stdout == b"alpha\na.txt\n"
    down = env.download_dir("project", back)
    assert (down.files, down.bytes) == (3, 6 + 256 * 40)
    assert (back / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert (back / "sub" / "deeper" / "empty").read_bytes() == b""
    assert os.readlink(back / "link-to-a") == "a.txt"


def test_download_refuses_members_escaping_the_destination(make_env: Any, tmp_path: Path) -> None:
    env = make_env()
    env.exec("mkdir -p evil && ln -s /etc/passwd evil/abs-link && ln -s ../../outside evil/rel-link").check()
    dest = tmp_path / "dest"
    with pytest.raises(SandboxPathError):
        env.download_dir("evil", dest)
    assert not dest.exists() or list(dest.iterdir()) == []


def test_transfer_caps_and_missing_paths(make_env: Any, tmp_path: Path) -> None:
    env = make_env(max_transfer_bytes=50_000)
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob").write_bytes(os.urandom(80_000))
    with pytest.raises(FileTooLarge):
        env.upload_dir(big, "big")
    assert env.exec("test -e big/blob").exit_code != 0
    env.exec("mkdir -p remote-big && head -c 80000 /dev/urandom > remote-big/blob").check()
    with pytest.raises(FileTooLarge):
        env.download_dir("remote-big", tmp_path / "down")
    with pytest.raises(SandboxFileNotFound):
        env.download_dir("no-such-dir", tmp_path / "down2")
    with pytest.raises(FileNotFoundError):
        env.upload_dir(tmp_path / "no-such-local", "x")


def test_file_root_is_enforced_through_symlinks(make_env: Any) -> None:
    env = make_env()
    env.exec("mkdir -p jail/inside && ln -s /etc jail/escape").check()
    env.options.file_root = "jail"
    env.write_file("jail/inside/ok.txt", b"ok")
    assert env.read_file("jail/inside/ok.txt") == b"ok"
    with pytest.raises(SandboxPathError):
        env.read_file("jail/escape/passwd")
    with pytest.raises(SandboxPathError):
        env.write_file("jail/escape/evil", b"x")


def test_small_directories_go_through_the_free_session(
    make_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlayer_kubernetes import files

    used: list[str] = []
    monkeypatch.setattr(files, "unpack", lambda *args: used.append("unpack"))
    monkeypatch.setattr(files, "download_dir", lambda *args: used.append("download_dir"))
    env = make_env()
    env.exec("true").check()
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    _tree(src)
    up = env.upload_dir(src, "project")
    down = env.download_dir("project", back)
    assert used == [], "a small directory must travel through the free session both ways"
    assert (up.files, up.bytes) == (down.files, down.bytes) == (3, 6 + 256 * 40)
    assert (back / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert os.readlink(back / "link-to-a") == "a.txt"
