"""Directory transfer through tar archives (one file is the sandbox base's:
:mod:`envlayer.sandbox.files`, through the session shell or one exec as the container's
user, which sees tmpfs mounts and acts with that user's rights).

Two transports, chosen per path:

* the archive API (``put_archive`` / ``get_archive`` / ``HEAD .../archive``): no process in
  the container, works on stopped containers, bind mounts and volumes;
* an exec running ``tar``, as the container's user, for paths inside tmpfs mounts
  (``/tmp`` by default), which the archive API does not see (it works on the container's
  root filesystem), and for every path when that user is not root: the daemon's archive
  API acts as root, so it would read files the user cannot read and replace read-only ones.

Guarantees: a transfer over the cap raises :class:`FileTooLarge`; a missing directory
raises :class:`SandboxFileNotFound`; files are written owned by the container's user; what the
user may not read or write raises :class:`SandboxPermissionDenied` and changes nothing; archive
members that would land outside the download target (absolute names, ``..``, links
pointing out) raise :class:`SandboxPathError` and nothing of that member is written.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from envlayer.errors import (
    FileTooLarge,
    SandboxFileError,
    SandboxFileNotFound,
    SandboxPermissionDenied,
)
from envlayer.sandbox.archive import safe_extract, tar_summary
from envlayer.sandbox.files import DENIED
from envlayer.transfer import TransferSummary
from envlayer_docker import sdk
from envlayer_docker.errors import ContainerGone

_GO_DIR = 1 << 31
_GO_SYMLINK = 1 << 27
_MAX_LINKS = 8
_DENIED = DENIED
"""Exit code of the in-container file scripts when the user lacks the rights."""

Helper = Callable[[list[str], bytes | None], tuple[int, bytes, bytes]]
"""Runs an argv in the container (as the container's user) with optional stdin bytes:
returns (exit code, stdout, stderr)."""


@dataclass
class PathStat:
    """What the archive API reports about a path."""

    size: int
    mode: int
    link_target: str

    @property
    def is_dir(self) -> bool:
        return bool(self.mode & _GO_DIR)

    @property
    def is_symlink(self) -> bool:
        return bool(self.mode & _GO_SYMLINK)


def _gone_or_missing(exc: Any, path: str) -> Exception:
    text = str(getattr(exc, "explanation", "") or exc).lower()
    if "no such container" in text:
        return ContainerGone(text)
    return SandboxFileNotFound(path)


class FileTransfer:
    """File operations on one container. ``owner`` is (uid, gid) for new files."""

    def __init__(
        self, api: Any, container_id: str, *, tmpfs_paths: list[str], owner: tuple[int, int], helper: Helper
    ) -> None:
        self.api = api
        self.container_id = container_id
        self.tmpfs_paths = [p.rstrip("/") or "/" for p in tmpfs_paths]
        self.owner = owner
        self.helper = helper

    def in_tmpfs(self, path: str) -> bool:
        """True when ``path`` lies inside a tmpfs mount (archive API cannot see it)."""
        return any(path == p or path.startswith(p + "/") for p in self.tmpfs_paths)

    def via_exec(self, path: str) -> bool:
        """True when ``path`` must be transferred through an exec as the container's user:
        inside a tmpfs mount, or always when that user is not root (the archive API
        would act with root's rights)."""
        return self.owner[0] != 0 or self.in_tmpfs(path)

    # --- archive API primitives ---------------------------------------------------------

    def stat(self, path: str) -> PathStat | None:
        """Stat ``path`` through ``HEAD /archive`` (does not follow a final symlink)."""
        resp = self.api.head(self.api._url("/containers/{0}/archive", self.container_id), params={"path": path})
        if resp.status_code == 404:
            try:
                self.api.inspect_container(self.container_id)
            except Exception as exc:
                raise _gone_or_missing(exc, path) from None
            return None
        resp.raise_for_status()
        raw = json.loads(base64.b64decode(resp.headers["X-Docker-Container-Path-Stat"]))
        return PathStat(int(raw.get("size", 0)), int(raw.get("mode", 0)), raw.get("linkTarget") or "")

    def _follow(self, path: str) -> tuple[str, PathStat | None]:
        """Follow symlinks (up to 8): the final path and its stat (``None`` if missing)."""
        for _ in range(_MAX_LINKS):
            st = self.stat(path)
            if st is None or not st.is_symlink:
                return path, st
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), st.link_target))
        raise SandboxFileNotFound(path)

    def _resolve(self, path: str) -> tuple[str, PathStat]:
        """Like :meth:`_follow`, but the path must exist."""
        real, st = self._follow(path)
        if st is None:
            raise SandboxFileNotFound(path)
        return real, st

    def _mkdir(self, path: str) -> None:
        code, _, err = self.helper(["mkdir", "-p", "--", path], None)
        if code != 0:
            raise _exec_failure(code, err, path, "create directory")

    # --- directories ------------------------------------------------------------------------

    def unpack(self, payload: bytes, remote: str) -> TransferSummary:
        """Unpack the tar ``payload`` (:func:`~envlayer.sandbox.archive.pack_dir` of a host
        directory) into ``remote`` (created if missing). Returns the regular files copied and
        their bytes."""
        summary = tar_summary(payload)
        self._mkdir(remote)
        if self.via_exec(remote):
            code, _, err = self.helper(["tar", "-x", "-f", "-", "-C", remote], payload)
            if code != 0:
                raise _exec_failure(code, err, remote, "unpack into")
            return summary
        self.api.put_archive(self.container_id, remote, payload)
        return summary

    def download_dir(self, remote: str, local: str, limit: int) -> TransferSummary:
        """Copy the contents of container directory ``remote`` into host dir ``local``;
        returns the regular files written and their bytes."""
        if self.via_exec(remote):
            code, out, err = self.helper(
                ["sh", "-c", '[ -d "$1" ] || exit 20; tar -c -f - -C "$1" .', "envlayer-pack", remote], None
            )
            if code == 20:
                raise SandboxFileNotFound(remote)
            if code != 0:
                raise _exec_failure(code, err, remote, "pack")
            if len(out) > limit:
                raise FileTooLarge(remote, len(out), limit)
            payload, strip = out, False
        else:
            real, st = self._resolve(remote)
            if not st.is_dir:
                raise NotADirectoryError(f"not a directory in the container: {remote!r}")
            try:
                chunks, _ = self.api.get_archive(self.container_id, real)
                payload = _bounded(chunks, limit, remote)
            except sdk.errors.NotFound as exc:
                raise _gone_or_missing(exc, remote) from None
            strip = True
        os.makedirs(local, exist_ok=True)
        return safe_extract(payload, local, strip_first=strip)


def _exec_failure(code: int, err: bytes, path: str, operation: str) -> OSError:
    """The error for a failed in-container file command: :class:`SandboxPermissionDenied`
    when the script's own check (exit 24) or a utility reported a denied permission,
    otherwise :class:`SandboxFileError` quoting the command's stderr."""
    text = err.decode(errors="replace").strip()
    if code == _DENIED or "permission denied" in text.lower():
        return SandboxPermissionDenied(path, operation, text[:300])
    return SandboxFileError(path, operation, f"exit {code}: {text[:300]}")


def _bounded(chunks: Iterator[bytes], limit: int, path: str) -> bytes:
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            raise FileTooLarge(path, len(buf), limit)
    return bytes(buf)
