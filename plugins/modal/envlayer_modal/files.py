"""Files through ``sb.filesystem``; directories as tar archives over an exec.

Guarantees (the same as the Docker backend's): a read is refused before transferring
anything when the file is over the cap (:class:`FileTooLarge`, from ``filesystem.stat``,
which describes a symlink rather than its target, so symlinks are followed to the file
they name: :func:`target_info`);
a directory named as a file raises :class:`SandboxIsADirectory`; a missing file raises
:class:`SandboxFileNotFound`; ``write`` creates missing parent directories; archive
members that would land outside the download target raise :class:`SandboxPathError`
(:func:`envlayer.sandbox.archive.safe_extract`) and nothing of that member is written.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from envlayer.errors import (
    FileTooLarge,
    SandboxFileError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPermissionDenied,
)
from envlayer.sandbox.archive import pack_dir, safe_extract, tar_summary
from envlayer.sandbox.paths import Helper
from envlayer.transfer import TransferSummary
from envlayer_modal import sdk


def _translate(exc: Exception, path: str, operation: str) -> Exception | None:
    """The envlayer error for an SDK filesystem error, or None when it is not one."""
    if isinstance(
        exc, (sdk.exception.SandboxFilesystemNotFoundError, sdk.exception.SandboxFilesystemNotADirectoryError)
    ):
        return SandboxFileNotFound(path)
    if isinstance(exc, sdk.exception.SandboxFilesystemIsADirectoryError):
        return SandboxIsADirectory(path)
    if isinstance(exc, sdk.exception.SandboxFilesystemPermissionError):
        return SandboxPermissionDenied(path, operation)
    if isinstance(exc, sdk.exception.SandboxFilesystemFileTooLargeError):
        return FileTooLarge(path, -1, -1)
    return None


MAX_SYMLINK_HOPS = 40
"""As Linux's ``MAXSYMLINKS``: a longer chain (or a loop) is refused, as ``open`` would."""


def target_info(sandbox: Any, path: str) -> Any:
    """``filesystem.stat`` of the file ``path`` names, following symlinks by their
    ``symlink_target`` (relative ones from the link's directory)."""
    for _ in range(MAX_SYMLINK_HOPS):
        info = sandbox.filesystem.stat(path)
        if not info.is_symlink() or not info.symlink_target:
            return info
        path = posixpath.normpath(posixpath.join(posixpath.dirname(path), info.symlink_target))
    raise OSError(f"too many levels of symbolic links: {path}")


def read(sandbox: Any, path: str, limit: int) -> bytes:
    """The bytes of the file at absolute ``path`` (see the module guarantees)."""
    try:
        info = target_info(sandbox, path)
        if info.type == sdk.types.FileType.DIRECTORY:
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
    """Create or replace the file at absolute ``path`` in place, creating parent
    directories (envlayer's own staged files; ``write_file`` replaces atomically, see the
    backend's ``store_file``)."""
    try:
        sandbox.filesystem.write_bytes(data, path)
    except Exception as exc:
        mapped = _translate(exc, path, "write")
        if mapped is None:
            raise
        raise mapped from None


UNPACK = 'mkdir -p -- "$1" && tar -x -f - -C "$1"'
PACK = '[ -d "$1" ] || exit 20; tar -c -f - -C "$1" .'


def upload_dir(helper: Helper, local: str, remote: str, limit: int) -> TransferSummary:
    """Copy the contents of host directory ``local`` into sandbox directory ``remote``;
    the regular files copied and their bytes."""
    payload = pack_dir(local, limit, owner=(0, 0))
    code, _, err = helper(["sh", "-c", UNPACK, "envlayer-unpack", remote], payload)
    if code != 0:
        raise SandboxFileError(remote, "unpack into", f"exit {code}: {err.decode(errors='replace')[:300]}")
    return tar_summary(payload)


def download_dir(helper: Helper, remote: str, local: str, limit: int) -> TransferSummary:
    """Copy the contents of sandbox directory ``remote`` into host directory ``local``."""
    code, out, err = helper(["sh", "-c", PACK, "envlayer-pack", remote], None)
    if code == 20:
        raise SandboxFileNotFound(remote)
    if code != 0:
        raise SandboxFileError(remote, "pack", f"exit {code}: {err.decode(errors='replace')[:300]}")
    if len(out) > limit:
        raise FileTooLarge(remote, len(out), limit)
    os.makedirs(local, exist_ok=True)
    return safe_extract(out, local, strip_first=False)
