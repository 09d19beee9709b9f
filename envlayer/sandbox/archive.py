"""Tar archives moved in and out of sandboxes: unpacking one that came out of a sandbox
without letting it escape, and summing what one holds.

Used by every backend's ``download_dir`` / ``upload_dir``: an archive produced inside the
sandbox is untrusted input.

Each member is extracted with the safety of ``tarfile``'s ``"data"`` filter
(:func:`extract_data`, :func:`check_data`), on every Python envlayer supports.

``tarfile.data_filter`` (and ``TarInfo.replace``) exist from Python 3.11.4 and 3.12; Debian
12's own ``python3`` is 3.11.2. There :func:`extract_data` applies the same rules itself,
at extraction time (so symlinks extracted by earlier members are followed, as the filter
does):

* the member's real target path (and, for a link, the real path it points to) must stay
  inside ``root``; absolute link targets are refused;
* only regular files, directories, symlinks and hard links are extracted (others raise);
* modes lose setuid/setgid/sticky and group/other write; regular files keep owner
  read/write (and keep execute bits only when the owner had them); directories get the
  owner's full rights;
* owners in the archive are ignored: files belong to the extracting user.

Every refusal raises :class:`~envlayer.errors.SandboxPathError` naming the member, on
either path.
"""

from __future__ import annotations

import copy
import io
import os
import tarfile

from envlayer.errors import FileTooLarge, SandboxPathError
from envlayer.transfer import TransferSummary

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")
_FILTER_ERRORS: tuple[type[Exception], ...] = (tarfile.FilterError,) if HAS_DATA_FILTER else ()
_ALREADY_SAFE: dict[str, str] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
"""How the fallback tells a ``tarfile`` that has filters (where the fallback is forced, as in
tests) that its member was made safe already, so it does not warn of a missing filter."""


def with_changes(member: tarfile.TarInfo, **changes: object) -> tarfile.TarInfo:
    """A shallow copy of ``member`` with ``changes`` applied (``TarInfo.replace`` of 3.12)."""
    changed = copy.copy(member)
    for name, value in changes.items():
        setattr(changed, name, value)
    return changed


def extract_data(tar: tarfile.TarFile, member: tarfile.TarInfo, root: str) -> None:
    """Extract ``member`` under ``root`` with the ``"data"`` filter's rules (see the module
    docstring). Raises :class:`SandboxPathError` for a member the rules refuse."""
    try:
        if HAS_DATA_FILTER:
            tar.extract(member, root, filter="data")
        else:
            tar.extract(data_safe(member, root), root, numeric_owner=True, **_ALREADY_SAFE)
    except _FILTER_ERRORS as exc:
        raise SandboxPathError(member.name, root) from exc


def check_data(member: tarfile.TarInfo, root: str) -> None:
    """Check, without writing anything, that ``member`` may be extracted under ``root`` by
    the ``"data"`` filter's rules (see the module docstring), judging against what is on
    disk now. Raises :class:`SandboxPathError` naming the member when it may not."""
    if HAS_DATA_FILTER:
        try:
            tarfile.data_filter(member, root)
        except tarfile.FilterError as exc:
            raise SandboxPathError(member.name, root) from exc
    else:
        data_safe(member, root)


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def data_safe(member: tarfile.TarInfo, root: str) -> tarfile.TarInfo:
    """The copy of ``member`` that is safe to extract under ``root`` as the ``"data"``
    filter defines it; raises :class:`SandboxPathError` when there is none."""
    root = os.path.realpath(root)
    name = member.name.lstrip("/")
    if os.path.isabs(name) or not _inside(root, os.path.realpath(os.path.join(root, name))):
        raise SandboxPathError(member.name, root)
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise SandboxPathError(f"{member.name} -> {member.linkname}", root)
        base = os.path.dirname(os.path.join(root, name)) if member.issym() else root
        if not _inside(root, os.path.realpath(os.path.join(base, member.linkname))):
            raise SandboxPathError(f"{member.name} -> {member.linkname}", root)
    mode = member.mode & 0o755
    if member.isreg() or member.islnk():
        if not mode & 0o100:
            mode &= ~0o111
        mode |= 0o600
    elif member.isdir():
        mode |= 0o700
    elif not member.issym():
        raise SandboxPathError(f"{member.name} (special file)", root)
    me_uid, me_gid = os.geteuid(), os.getegid()
    return with_changes(member, name=name, mode=mode, uid=me_uid, gid=me_gid, uname="", gname="")


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
