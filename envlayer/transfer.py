"""Directory transfer between the host and a sandbox: the typed optional API.

A backend that declares :attr:`~envlayer.capabilities.Capability.DIRECTORY_TRANSFER`
implements both methods of :class:`SupportsDirectoryTransfer` with exactly these
signatures and returns a :class:`TransferSummary` from each.

A backend that declares :attr:`~envlayer.capabilities.Capability.ARCHIVE_STREAM`
implements both methods of :class:`SupportsArchiveStream`: tar archives moved as streams,
in bounded memory whatever their size (what ``envlayer cp`` uses; without it ``cp`` moves
files through ``read_file``/``write_file`` and their ``max_file_bytes`` cap).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class TransferSummary:
    """What one directory transfer copied: regular ``files`` and their total ``bytes``.
    Symlinks and special files are never copied (and not counted)."""

    files: int
    bytes: int


@runtime_checkable
class SupportsDirectoryTransfer(Protocol):
    """The two methods behind ``directory_transfer``."""

    def upload_dir(self, local: str | os.PathLike[str], remote: str) -> TransferSummary:
        """Copy the contents of host directory ``local`` into sandbox directory ``remote``
        (created if missing; existing files are replaced). Raises ``FileNotFoundError``
        when ``local`` is not a directory, ``SandboxPathError`` outside ``file_root``,
        ``FileTooLarge`` over the backend's transfer limit (nothing is copied then),
        :class:`~envlayer.errors.InvalidArgument` for a path with a NUL byte."""
        ...

    def download_dir(self, remote: str, local: str | os.PathLike[str]) -> TransferSummary:
        """Copy the contents of sandbox directory ``remote`` into host directory ``local``
        (created if missing). Raises ``SandboxFileNotFound`` when ``remote`` does not exist,
        ``SandboxPathError`` for a member that would land outside ``local`` (or a path
        outside ``file_root``), ``FileTooLarge`` over the transfer limit,
        :class:`~envlayer.errors.InvalidArgument` for a path with a NUL byte."""
        ...


@runtime_checkable
class SupportsArchiveStream(Protocol):
    """The two methods behind ``archive_stream``: the sandbox side of ``docker cp``."""

    def put_archive_stream(self, remote_dir: str, chunks: Iterable[bytes]) -> None:
        """Unpack the tar archive read from ``chunks`` under the existing sandbox directory
        ``remote_dir``, as the sandbox's user, consuming it as it goes (bounded memory).
        Members keep their names; existing files are replaced. Raises
        ``SandboxFileNotFound`` when ``remote_dir`` is not a directory,
        ``SandboxPermissionDenied`` / ``SandboxFileError`` naming the sandbox's refusal
        (a member may have been written before it), ``SandboxPathError`` outside
        ``file_root`` or for a member escaping ``remote_dir``."""
        ...

    def get_archive_stream(self, remote: str) -> Iterator[bytes]:
        """A tar archive of sandbox path ``remote`` (a file, or a directory and everything
        under it), its top-level member named as the path's last component, produced as
        it is read. Raises ``SandboxFileNotFound`` (at the first ``next()``) when
        ``remote`` does not exist, ``SandboxPermissionDenied`` / ``SandboxFileError`` when
        the sandbox cannot pack it (possibly after some chunks), ``SandboxPathError``
        outside ``file_root``. Closing the iterator early stops the transfer."""
        ...
