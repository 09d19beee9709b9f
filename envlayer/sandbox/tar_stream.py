"""Tar archives as streams: a host path packed into chunks as they are read, an archive
read from an iterator of chunks, and an archive unpacked member by member, so a transfer
of any size holds about one chunk in memory at a time.

The archives are POSIX (PAX) tars, the format ``docker cp`` and GNU/busybox ``tar`` read
and write. Unpacking applies the ``"data"`` filter's rules (:mod:`envlayer.sandbox.archive`):
an archive that came from a sandbox, or from stdin, is untrusted input.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from envlayer.sandbox.archive import extract_data
from envlayer.transfer import TransferSummary

CHUNK = 1 << 20
"""The bytes read from a file (and handed on) at a time."""
_BLOCK = tarfile.BLOCKSIZE


class ChunkReader(io.RawIOBase):
    """A readable binary file over an iterator of byte chunks (what ``tarfile``'s stream
    mode and an HTTP client read from). Closing it closes the iterator when it has ``close``."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        closer = getattr(self._chunks, "close", None)
        if closer is not None:
            closer()
        super().close()


def file_chunks(fileobj: BinaryIO, size: int = CHUNK) -> Iterator[bytes]:
    """The bytes of ``fileobj`` from where it stands to its end, ``size`` at a time."""
    while chunk := fileobj.read(size):
        yield chunk


def tar_chunks(path: str, arcname: str, *, owner: tuple[int, int] = (0, 0)) -> Iterator[bytes]:
    """A tar of host ``path`` (a file, or a directory and everything under it), its
    top-level member named ``arcname``, produced as it is read. Symlinks are kept as
    links, hard links as links to the first copy; sockets, FIFOs and devices are skipped.
    Every member is owned by ``owner`` (uid, gid) with no user or group names.

    Raises ``FileNotFoundError`` (before the first chunk) when ``path`` does not exist,
    ``OSError`` for what cannot be read."""
    os.lstat(path)
    with tarfile.open(fileobj=io.BytesIO(), mode="w", format=tarfile.PAX_FORMAT) as namer:  # remembers hard links
        yield from _members(namer, path, arcname, owner)
    yield b"\0" * (2 * _BLOCK)


def _members(namer: tarfile.TarFile, path: str, arcname: str, owner: tuple[int, int]) -> Iterator[bytes]:
    """The headers and data of the members of :func:`tar_chunks`; ``namer`` makes the headers."""
    for full, name in _walk(path, arcname):
        info = namer.gettarinfo(full, name)
        if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
            continue  # sockets, FIFOs, devices: not copied (as docker cp does not)
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        if info.isreg():
            yield from _member_data(full, info.size)


def tree_size(path: str) -> tuple[int, int]:
    """The regular files at host ``path`` (a file, or a directory and everything under it;
    symlinks not followed) and their total bytes: what :func:`tar_chunks` carries as data.
    A file or directory that vanishes while it is counted, or a directory that cannot be
    listed, is left out: the count is for showing and limits, and the copy that follows
    reports what it cannot read."""
    files = size = 0
    if not os.path.lexists(path):
        return files, size
    if not os.path.isdir(path) or os.path.islink(path):
        paths: Iterator[str] = iter([path])
    else:
        paths = (os.path.join(top, name) for top, _dirs, names in os.walk(path) for name in names)
    for full in paths:
        try:
            st = os.lstat(full)
        except OSError:
            continue  # gone since it was listed
        if stat.S_ISREG(st.st_mode):
            files, size = files + 1, size + st.st_size
    return files, size


def _walk(path: str, arcname: str) -> Iterator[tuple[str, str]]:
    """``(host path, member name)`` for ``path`` and, for a directory, what it holds
    (symlinked directories are not entered)."""
    yield path, arcname
    if stat.S_ISDIR(os.lstat(path).st_mode):
        for entry in sorted(os.listdir(path)):
            yield from _walk(os.path.join(path, entry), f"{arcname}/{entry}")


def _member_data(full: str, size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes of file ``full`` (cut or zero-padded when it changed while
    being read, as a tar member's size is fixed by its header), then block padding."""
    sent = 0
    with open(full, "rb") as fh:
        while sent < size and (chunk := fh.read(min(CHUNK, size - sent))):
            sent += len(chunk)
            yield chunk
    if sent < size:
        yield b"\0" * (size - sent)
    if size % _BLOCK:
        yield b"\0" * (_BLOCK - size % _BLOCK)


def extract_stream(fileobj: BinaryIO, dest: str) -> TransferSummary:
    """Unpack the tar read from ``fileobj`` under existing host directory ``dest``, member
    by member, with the ``"data"`` filter's rules; sockets, FIFOs and devices are skipped.
    Returns the regular files written and their bytes. Raises
    :class:`~envlayer.errors.SandboxPathError` for a member that would land outside
    ``dest`` (the members before it are written), ``tarfile.TarError`` for what is not a tar."""
    files = size = 0
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                continue
            extract_data(tar, member, dest)
            if member.isfile():
                files, size = files + 1, size + member.size
    return TransferSummary(files=files, bytes=size)
