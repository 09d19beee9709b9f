"""Files through Daytona's toolbox API, with the core's errors.

* ``read``: ``files/info`` first (missing -> :class:`SandboxFileNotFound`, a directory ->
  :class:`SandboxIsADirectory`, over the cap -> :class:`FileTooLarge`, nothing transferred),
  then ``files/bulk-download`` (binary-safe multipart).
* ``write``: ``files/bulk-upload``; when the daemon refuses, ``files/info`` tells a directory
  (:class:`SandboxIsADirectory`) from a missing parent, which is created with
  ``files/folder`` before one retry.
* A refusal the daemon reports as a permission problem (403, "permission denied") is
  :class:`SandboxPermissionDenied`.
* Directories move as one tar archive (capped by ``max_transfer_bytes``) through an upload or
  download plus one ``process/execute`` of ``tar`` in the sandbox; only regular files and
  directories are copied (symlinks and special files never are), and a
  :class:`~envlayer.transfer.TransferSummary` says how many files and bytes. On download
  every member is checked before anything is written: absolute names and ``..`` raise
  :class:`SandboxPathError`.

The SDK's other exceptions propagate; the backend translates them.
"""

from __future__ import annotations

import io
import os
import posixpath
import shlex
import tarfile
import uuid
from typing import Any

from envlayer.errors import (
    FileTooLarge,
    SandboxFileError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPermissionDenied,
)
from envlayer.sandbox.archive import check_data, extract_data
from envlayer.transfer import TransferSummary
from envlayer_daytona import sdk
from envlayer_daytona.stream import SPOOL

PACK_TIMEOUT = 900
"""Seconds a tar of a transfer (up to ``max_transfer_bytes``) may take in the sandbox."""
REMOVE_TIMEOUT = 60
"""Seconds the removal of a staged archive may take."""


def _info(sandbox: Any, path: str) -> Any | None:
    """The toolbox's FileInfo for ``path``, or None when it does not exist."""
    try:
        return sandbox.fs.get_file_info(path)
    except sdk.errors.DaytonaNotFoundError:
        return None


def _denied(exc: BaseException) -> bool:
    status = getattr(exc, "status_code", None)
    return status == 403 or "permission denied" in str(exc).lower()


def read(sandbox: Any, path: str, limit: int) -> bytes:
    """The bytes of the file at absolute ``path`` (see the module docstring for errors)."""
    info = _info(sandbox, path)
    if info is None:
        raise SandboxFileNotFound(path)
    if info.is_dir:
        raise SandboxIsADirectory(path)
    if info.size > limit:
        raise FileTooLarge(path, info.size, limit)
    try:
        data = sandbox.fs.download_file(path)
    except sdk.errors.DaytonaNotFoundError:
        raise SandboxFileNotFound(path) from None
    except sdk.errors.DaytonaError as exc:
        if _denied(exc):
            raise SandboxPermissionDenied(path, "read", str(exc)) from exc
        raise
    if len(data) > limit:
        raise FileTooLarge(path, len(data), limit)
    return data


def write(sandbox: Any, path: str, data: bytes) -> None:
    """Create or replace the file at absolute ``path``, creating missing parents."""
    for attempt in (0, 1):
        try:
            sandbox.fs.upload_file(data, path)
            return
        except sdk.errors.DaytonaError as exc:
            info = _info(sandbox, path)
            if info is not None and info.is_dir:
                raise SandboxIsADirectory(path) from None
            if _denied(exc):
                raise SandboxPermissionDenied(path, "write", str(exc)) from exc
            if attempt:
                raise
            sandbox.fs.create_folder(posixpath.dirname(path) or "/", "755")


def _run(sandbox: Any, argv: list[str], path: str, operation: str) -> str:
    """Run ``argv`` in the sandbox; its output, or :class:`SandboxFileError` when it failed."""
    answer = sandbox.process.exec(" ".join(shlex.quote(a) for a in argv), timeout=PACK_TIMEOUT)
    if answer.exit_code != 0:
        raise SandboxFileError(path, operation, f"exit {answer.exit_code}: {(answer.result or '')[:300]}")
    return answer.result or ""


def upload_dir(sandbox: Any, local: str | os.PathLike[str], remote: str, limit: int) -> TransferSummary:
    """Copy the regular files and directories under local directory ``local`` into sandbox
    directory ``remote`` (created if missing). Raises ``FileNotFoundError`` when ``local``
    is not a directory, :class:`FileTooLarge` when the archive exceeds ``limit``."""
    if not os.path.isdir(local):
        raise FileNotFoundError(f"not a local directory: {os.fspath(local)!r}")
    counted = {"files": 0, "bytes": 0}

    def regular_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.isfile():
            counted["files"] += 1
            counted["bytes"] += info.size
            return info
        return info if info.isdir() else None

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(local)):
            tar.add(os.path.join(local, entry), arcname=entry, filter=regular_only)
            if buf.tell() > limit:
                raise FileTooLarge(os.fspath(local), buf.tell(), limit)
    payload = buf.getvalue()
    if len(payload) > limit:
        raise FileTooLarge(os.fspath(local), len(payload), limit)
    staged = f"{SPOOL}/{uuid.uuid4().hex}.tar"
    sandbox.fs.upload_file(payload, staged)
    script = 'mkdir -p -- "$1" && tar -x -f "$2" -C "$1"; rc=$?; rm -f -- "$2"; exit $rc'
    _run(sandbox, ["sh", "-c", script, "envlayer-unpack", remote, staged], remote, "unpack into")
    return TransferSummary(files=counted["files"], bytes=counted["bytes"])


def download_dir(sandbox: Any, remote: str, local: str | os.PathLike[str], limit: int) -> TransferSummary:
    """Copy the regular files and directories under sandbox directory ``remote`` into local
    directory ``local``. Raises :class:`SandboxFileNotFound` when ``remote`` does not exist."""
    staged = f"{SPOOL}/{uuid.uuid4().hex}.tar"
    script = '[ -d "$1" ] || { echo "no such directory" >&2; exit 20; }; mkdir -p "${2%/*}"; tar -c -f "$2" -C "$1" .'
    argv = ["sh", "-c", script, "pack", remote, staged]
    answer = sandbox.process.exec(" ".join(shlex.quote(a) for a in argv), timeout=PACK_TIMEOUT)
    try:
        if answer.exit_code == 20:
            raise SandboxFileNotFound(remote)
        if answer.exit_code != 0:
            raise SandboxFileError(remote, "pack", f"exit {answer.exit_code}: {(answer.result or '')[:300]}")
        info = _info(sandbox, staged)
        if info is not None and info.size > limit:
            raise FileTooLarge(remote, info.size, limit)
        payload = sandbox.fs.download_file(staged)
    finally:
        sandbox.process.exec(f"rm -f -- {shlex.quote(staged)}", timeout=REMOVE_TIMEOUT)
    return extract(payload, os.fspath(local))


def extract(payload: bytes, dest: str) -> TransferSummary:
    """Unpack the regular files and directories of a tar into ``dest`` (symlinks, links and
    special files are skipped). Every member is checked first with tarfile's ``data``
    filter: one that would land outside ``dest`` (an absolute name, ``..``) raises
    :class:`SandboxPathError` before anything is written."""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r") as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        for member in members:
            check_data(member, root)
        for member in members:
            extract_data(tar, member, root)
    files = [m for m in members if m.isfile()]
    return TransferSummary(files=len(files), bytes=sum(m.size for m in files))
