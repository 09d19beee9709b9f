"""Extract one tar member with the safety of ``tarfile``'s ``"data"`` filter, on every Python
envlayer supports.

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
import os
import tarfile

from envlayer.errors import SandboxPathError

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
