"""Files through ``sb.filesystem``; directories as tar archives over an exec.

Guarantees (the same as the Docker backend's): a read is refused before transferring
anything when the file is over the cap (:class:`FileTooLarge`, from ``filesystem.stat``);
a directory named as a file raises :class:`SandboxIsADirectory`; a missing file raises
:class:`SandboxFileNotFound`; ``write`` creates missing parent directories; archive
members that would land outside the download target raise :class:`SandboxPathError`
(:func:`envlayer.archive.safe_extract`) and nothing of that member is written.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import Any

from envlayer.archive import safe_extract
from envlayer.errors import FileTooLarge, SandboxFileNotFound, SandboxIsADirectory, SandboxPermissionDenied
from envlayer.sandbox_paths import Helper


def _translate(exc: Exception, path: str, operation: str) -> Exception | None:
    """The envlayer error for an SDK filesystem error, or None when it is not one."""
    from modal import exception as E

    if isinstance(exc, (E.SandboxFilesystemNotFoundError, E.SandboxFilesystemNotADirectoryError)):
        return SandboxFileNotFound(path)
    if isinstance(exc, E.SandboxFilesystemIsADirectoryError):
        return SandboxIsADirectory(path)
    if isinstance(exc, E.SandboxFilesystemPermissionError):
        return SandboxPermissionDenied(path, operation)
    if isinstance(exc, E.SandboxFilesystemFileTooLargeError):
        return FileTooLarge(path, -1, -1)
    return None


def read(sandbox: Any, path: str, limit: int) -> bytes:
    """The bytes of the file at absolute ``path`` (see the module guarantees)."""
    from modal.types import FileType

    try:
        info = sandbox.filesystem.stat(path)
        if info.type == FileType.DIRECTORY:
            raise SandboxIsADirectory(path)
        if info.size > limit:
            raise FileTooLarge(path, info.size, limit)
        return bytes(sandbox.filesystem.read_bytes(path))
    except Exception as exc:
        mapped = _translate(exc, path, "read")
        if mapped is None:
            raise
        raise mapped from None


def write(sandbox: Any, path: str, data: bytes) -> None:
    """Create or replace the file at absolute ``path``, creating parent directories."""
    try:
        sandbox.filesystem.write_bytes(data, path)
    except Exception as exc:
        mapped = _translate(exc, path, "write")
        if mapped is None:
            raise
        raise mapped from None


def pack(local: str, limit: int) -> bytes:
    """A tar of the contents of host directory ``local`` (symlinks as links).
    Raises :class:`FileTooLarge` past ``limit`` bytes, ``NotADirectoryError``."""
    if not os.path.isdir(local):
        raise NotADirectoryError(f"not a local directory: {local!r}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(local)):
            tar.add(os.path.join(local, entry), arcname=entry, filter=_anonymous)
            if buf.tell() > limit:
                raise FileTooLarge(local, buf.tell(), limit)
    payload = buf.getvalue()
    if len(payload) > limit:
        raise FileTooLarge(local, len(payload), limit)
    return payload


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


UNPACK = 'mkdir -p -- "$1" && tar -x -f - -C "$1"'
PACK = '[ -d "$1" ] || exit 20; tar -c -f - -C "$1" .'


def upload_dir(helper: Helper, local: str, remote: str, limit: int) -> None:
    """Copy the contents of host directory ``local`` into sandbox directory ``remote``."""
    code, _, err = helper(["sh", "-c", UNPACK, "envlayer-unpack", remote], pack(local, limit))
    if code != 0:
        raise OSError(f"unpacking into {remote!r} failed ({code}): {err.decode(errors='replace')[:300]}")


def download_dir(helper: Helper, remote: str, local: str, limit: int) -> None:
    """Copy the contents of sandbox directory ``remote`` into host directory ``local``."""
    code, out, err = helper(["sh", "-c", PACK, "envlayer-pack", remote], None)
    if code == 20:
        raise SandboxFileNotFound(remote)
    if code != 0:
        raise OSError(f"packing {remote!r} failed ({code}): {err.decode(errors='replace')[:300]}")
    if len(out) > limit:
        raise FileTooLarge(remote, len(out), limit)
    os.makedirs(local, exist_ok=True)
    safe_extract(out, local, strip_first=False)
