"""envlayer.sandbox.tar_stream: what `tar_chunks` packs is a tar that `tarfile` and GNU
`tar` read back byte for byte (links kept, special files skipped, a file's size fixed by
its header), and `extract_stream` refuses members that would escape its directory, also
through the local backend's `put_archive_stream` (what `envlayer cp - TASK:DIR` feeds)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from envlayer.errors import SandboxPathError
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.sandbox.tar_stream import CHUNK, ChunkReader, extract_stream, tar_chunks


def make_tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "big.bin").write_bytes(os.urandom(CHUNK * 2 + 123))
    (root / "empty").write_bytes(b"")
    os.symlink("sub/big.bin", root / "link")
    os.link(root / "empty", root / "hard")
    os.mkfifo(root / "fifo")


def test_a_packed_tree_unpacks_byte_for_byte_with_gnu_tar(tmp_path: Path) -> None:
    make_tree(tmp_path / "src")
    archive = b"".join(tar_chunks(str(tmp_path / "src"), "top"))
    (tmp_path / "out").mkdir()
    done = subprocess.run(["tar", "-x", "-f", "-", "-C", str(tmp_path / "out")], input=archive, capture_output=True)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out" / "top"
    assert sorted(os.listdir(out)) == ["empty", "hard", "link", "sub"], "the FIFO is skipped"
    assert (out / "sub" / "big.bin").read_bytes() == (tmp_path / "src" / "sub" / "big.bin").read_bytes()
    assert os.readlink(out / "link") == "sub/big.bin"
    assert os.stat(out / "hard").st_ino == os.stat(out / "empty").st_ino


def test_chunks_are_bounded_and_the_reader_hands_them_on(tmp_path: Path) -> None:
    make_tree(tmp_path / "src")
    chunks = list(tar_chunks(str(tmp_path / "src"), "top"))
    assert max(len(c) for c in chunks) <= CHUNK
    (tmp_path / "out").mkdir()
    summary = extract_stream(ChunkReader(iter(chunks)), str(tmp_path / "out"))  # type: ignore[arg-type]
    assert (summary.files, summary.bytes) == (2, CHUNK * 2 + 123), "the hard link is a link, not a file"
    assert (tmp_path / "out" / "top" / "sub" / "big.bin").stat().st_size == CHUNK * 2 + 123


def test_a_missing_path_raises_before_the_first_chunk(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        next(tar_chunks(str(tmp_path / "nope"), "x"))


def evil_archive(name: str, *, linkname: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        if linkname:
            info.type, info.linkname = tarfile.SYMTYPE, linkname
            tar.addfile(info)
        else:
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
    return buf.getvalue()


@pytest.mark.parametrize(("name", "linkname"), [("../escaped", ""), ("out-link", "/etc"), ("up", "../..")])
def test_members_escaping_the_directory_are_refused(tmp_path: Path, name: str, linkname: str) -> None:
    (tmp_path / "sandbox" / "into").mkdir(parents=True)
    env = LocalEnvironment(LocalOptions(cwd=str(tmp_path / "sandbox")))
    try:
        with pytest.raises(SandboxPathError):
            env.put_archive_stream("into", [evil_archive(name, linkname=linkname)])
    finally:
        env.cleanup()
    assert not (tmp_path / "sandbox" / "escaped").exists() and not (tmp_path / "escaped").exists()
    assert os.listdir(tmp_path / "sandbox" / "into") == []


def test_an_absolute_member_lands_inside_the_directory(tmp_path: Path) -> None:
    (tmp_path / "into").mkdir()
    extract_stream(io.BytesIO(evil_archive("/abs/name")), str(tmp_path / "into"))
    assert (tmp_path / "into" / "abs" / "name").read_bytes() == b"evil", "the leading / is dropped, as tar does"
