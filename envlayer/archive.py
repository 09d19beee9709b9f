"""Unpacking a tar archive that came out of a sandbox, without letting it escape.

Used by every backend's ``download_dir``: the archive is produced inside the sandbox, so
it is untrusted input.
"""

from __future__ import annotations

import io
import os
import tarfile

from envlayer.errors import SandboxPathError


def _inside(root: str, rel: str) -> bool:
    target = os.path.normpath(os.path.join(root, rel))
    return target == root or target.startswith(root + os.sep)


def safe_extract(payload: bytes, dest: str, *, strip_first: bool) -> None:
    """Extract a tar into ``dest``, dropping the first path component when ``strip_first``.

    Every member is checked before anything is written: absolute names, ``..`` escapes,
    and symlinks or hardlinks resolving outside ``dest`` raise :class:`SandboxPathError`.
    Device files and FIFOs are skipped. Pure (no Docker); unit-tested directly.
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
                member = member.replace(linkname=link, deep=False)
            elif not (member.isfile() or member.isdir()):
                continue
            plan.append(member.replace(name=rel, deep=False))
        for member in plan:
            tar.extract(member, root, filter="data")
