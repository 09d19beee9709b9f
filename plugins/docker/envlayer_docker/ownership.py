"""The container's user owns its working directory and durable data from the start.

Docker creates a missing working directory, and the root of a new named volume, owned
by root. A container whose user (the ``user`` option, else the image's ``USER``) is not
root could then not write where every command starts. So when envlayer creates such a
container, it hands those directories (:attr:`ContainerSpec.owned_dirs
<envlayer_docker.container.ContainerSpec>`: the working directory unless the user mounts
it, and the durable workspace and home volumes) to that user: the directory itself, not
what is inside it, so nothing the user put there changes hands. A durable volume keeps that owner when its container is
replaced; the next container with the same user finds it so, and a container with
another user takes the directory over.

The user is resolved as Docker resolves it (``moby/sys/user`` ``GetExecUser``): a name
is looked up in the image's ``/etc/passwd`` (its primary group is the gid), a numeric
uid takes the primary group of its passwd entry when there is one (else gid 0), and a
``:group`` part is a number or a name from ``/etc/group``. The files are read through
the archive API (no process runs in the container), and the directory is handed over by
extracting a one-entry tar archive with that owner onto it (the daemon applies the
entry's owner and mode to an existing directory). A name that is not in the image is a
:class:`~envlayer.errors.ConfigError`.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from typing import Any

from envlayer.errors import ConfigError
from envlayer_docker import sdk
from envlayer_docker.files import FileTransfer

_GO_SETGID = 1 << 22
_GO_STICKY = 1 << 20


def _read_image_file(api: Any, container_id: str, path: str) -> str:
    """The text of ``path`` in the container, following up to 4 symlinks ('' when it is
    missing or not a regular file)."""
    for _ in range(5):
        try:
            stream, _ = api.get_archive(container_id, path)
        except sdk.errors.NotFound:
            return ""
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.next()
            if member is not None and member.issym():
                path = posixpath.normpath(posixpath.join(posixpath.dirname(path), member.linkname))
                continue
            handle = archive.extractfile(member) if member is not None and member.isfile() else None
            return handle.read().decode("utf-8", "replace") if handle is not None else ""
    return ""


def _entries(text: str) -> list[list[str]]:
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#") and line.count(":") >= 3]


def _missing(what: str, name: str, image: str, file: str) -> ConfigError:
    return ConfigError(
        f"the image {image} has no {what} {name!r} (it is not in its {file})",
        source="options",
        key="user",
        hint=f"create it in the image (e.g. `RUN useradd {name}` in its Dockerfile), or give a numeric uid:gid",
    )


_UNKNOWN = ("unable to find user ", "unable to find group ")


def unknown_user(exc: Any, image: str) -> ConfigError | None:
    """The :class:`ConfigError` for the daemon's refusal to start a container whose user
    or group the image lacks (``unable to find user app: no matching entries in passwd
    file``); ``None`` for any other failure. Pure."""
    text = str(getattr(exc, "explanation", None) or exc)
    for prefix in _UNKNOWN:
        if prefix in text:
            name = text.split(prefix, 1)[1].split(":", 1)[0].strip()
            what = prefix.split()[-1]
            return _missing(what, name, image, "/etc/passwd" if what == "user" else "/etc/group")
    return None


def resolve_ids(api: Any, container_id: str, user: str, image: str) -> tuple[int, int]:
    """(uid, gid) of ``user`` (``name``, ``uid``, ``name:group`` or ``uid:gid``) in the
    container's own account files, resolved as Docker does (module docstring).
    Raises :class:`ConfigError` for a name the image does not know."""
    name, _, group = user.partition(":")
    passwd: list[list[str]] | None = None
    if name.isdigit():
        uid, gid = int(name), 0
        if not group:
            passwd = _entries(_read_image_file(api, container_id, "/etc/passwd"))
            gid = next((int(e[3]) for e in passwd if e[2] == name and e[3].isdigit()), 0)
    else:
        passwd = _entries(_read_image_file(api, container_id, "/etc/passwd"))
        entry = next((e for e in passwd if e[0] == name), None)
        if entry is None or not (entry[2].isdigit() and entry[3].isdigit()):
            raise _missing("user", name, image, "/etc/passwd")
        uid, gid = int(entry[2]), int(entry[3])
    if group.isdigit():
        gid = int(group)
    elif group:
        groups = _entries(_read_image_file(api, container_id, "/etc/group"))
        found = next((e for e in groups if e[0] == group and e[2].isdigit()), None)
        if found is None:
            raise _missing("group", group, image, "/etc/group")
        gid = int(found[2])
    return uid, gid


def _mode_of(api: Any, container_id: str, path: str) -> int:
    """Permission bits of ``path`` in the container (``HEAD .../archive``), 0o755 when unknown."""
    stat = FileTransfer(api, container_id, tmpfs_paths=[], owner=(0, 0), helper=_no_helper).stat(path)
    if stat is None:
        return 0o755
    mode = stat.mode & 0o777
    if stat.mode & _GO_SETGID:
        mode |= 0o2000
    if stat.mode & _GO_STICKY:
        mode |= 0o1000
    return mode


def _no_helper(argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
    raise AssertionError("stat runs no command in the container")  # pragma: no cover - never called


def give_to(api: Any, container_id: str, directories: list[str], ids: tuple[int, int]) -> None:
    """Make each of ``directories`` (absolute, existing in the container) owned by
    ``ids``, keeping its mode; its contents are not touched."""
    for path in directories:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            entry = tarfile.TarInfo(posixpath.basename(path))
            entry.type = tarfile.DIRTYPE
            entry.uid, entry.gid = ids
            entry.mode = _mode_of(api, container_id, path)
            entry.mtime = int(time.time())
            archive.addfile(entry)
        api.put_archive(container_id, posixpath.dirname(path), buffer.getvalue())


def hand_over(api: Any, container_id: str, *, user: str | None, image: str, directories: list[str]) -> None:
    """Give ``directories`` to ``user`` (nothing to do for root or the image's user).
    Raises :class:`ConfigError` when the image lacks the named user or group."""
    if not user or not directories or user in ("root", "0", "0:0"):
        return
    ids = resolve_ids(api, container_id, user, image)
    if ids != (0, 0):
        give_to(api, container_id, directories, ids)
