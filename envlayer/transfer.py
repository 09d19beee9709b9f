"""Directory transfer between the host and a sandbox: the typed optional API.

A backend that declares :attr:`~envlayer.capabilities.Capability.DIRECTORY_TRANSFER`
implements both methods of :class:`SupportsDirectoryTransfer` with exactly these
signatures and returns a :class:`TransferSummary` from each.
"""

from __future__ import annotations

import os
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
