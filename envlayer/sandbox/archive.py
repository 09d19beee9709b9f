"""Tar archives moved in and out of sandboxes: unpacking one that came out of a sandbox
without letting it escape, and summing what one holds.

Used by every backend's ``download_dir`` / ``upload_dir``: an archive produced inside the
sandbox is untrusted input.
"""

from __future__ import annotations

import io
import os
import tarfile

from envlayer.errors import FileTooLarge, SandboxPathError
from envlayer.sandbox.tar_extract import extract_data, with_changes
from envlayer.transfer import TransferSummary


def pack_dir(local: str, limit: int, *, owner: tuple[int, int]) -> bytes:
    """A tar of the contents of host directory ``local`` (symlinks as links), every member
    owned by ``owner`` (uid, gid). Raises ``NotADirectoryError``, and :class:`FileTooLarge`
    past ``limit`` bytes (nothing is sent then)."""
    if not os.path.isdir(local):
        raise NotADirectoryError(f"not a local directory: {local!r}")

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(local)):
            tar.add(os.path.join(local, entry), arcname=entry, filter=own)
            if buf.tell() > limit:
                raise FileTooLarge(local, buf.tell(), limit)
    payload = buf.getvalue()
    if len(payload) > limit:
        raise FileTooLarge(local, len(payload), limit)
    return payload


def _inside(root: str, rel: str) -> bool:
    target = os.path.normpath(os.path.join(root, rel))
    return target == root or target.startswith(root + os.sep)


def tar_summary(payload: bytes) -> TransferSummary:
    """The regular files of a tar archive and their total size."""
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r") as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
    return TransferSummary(files=len(files), bytes=sum(m.size for m in files))


def safe_extract(payload: bytes, dest: str, *, strip_first: bool) -> TransferSummary:
    """Extract a tar into ``dest``, dropping the first path component when ``strip_first``;
    returns the regular files written and their bytes.

    Every member is checked before anything is written: absolute names, ``..`` escapes,
    and symlinks or hardlinks resolving outside ``dest`` raise :class:`SandboxPathError`.
    Device files and FIFOs are skipped. Pure; unit-tested directly.
    """
    root = os.path.realpath(dest)
    plan: list[tarfile.TarInfo] = []
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r") as tar:
        for member in tar.getmembers():
            name = member.name
            if name.startswith("/") or os.path.isabs(name):
                raise SandboxPathError(name, dest)
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if strip_first:
                parts = parts[1:]
            if not parts:
                continue
            rel = "/".join(parts)
            if ".." in parts or not _inside(root, rel):
                raise SandboxPathError(name, dest)
            if member.issym():
                if member.linkname.startswith("/") or not _inside(
                    root, os.path.join(os.path.dirname(rel), member.linkname)
                ):
                    raise SandboxPathError(f"{name} -> {member.linkname}", dest)
            elif member.islnk():
                link_parts = [p for p in member.linkname.split("/") if p not in ("", ".")]
                if strip_first:
                    link_parts = link_parts[1:]
                link = "/".join(link_parts)
                if not link or ".." in link_parts or not _inside(root, link):
                    raise SandboxPathError(f"{name} => {member.linkname}", dest)
                member = with_changes(member, linkname=link)
            elif not (member.isfile() or member.isdir()):
                continue
            plan.append(with_changes(member, name=rel))
        for member in plan:
            extract_data(tar, member, root)
    written = [m for m in plan if m.isfile()]
    return TransferSummary(files=len(written), bytes=sum(m.size for m in written))
