"""The fake Daytona's model of a sandbox's OS user (the create request's ``user``, which the
SDK fills from ``CreateSandboxBaseParams.os_user``: daytona/_sync/daytona.py ``_create``).

What the real service does with a user the image lacks, and which directory a non-root user's
commands start in, is not documented; the fake assumes (fake_daytona.md says so): an image
without the user is refused at create with 400 naming the user and the image, and the
user's commands start in its home directory (from the image's ``/etc/passwd``), created
owned by the user when the image lacks it.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class OsUser:
    """A sandbox's user as the image's ``/etc/passwd`` defines it."""

    name: str
    uid: int
    gid: int
    home: str


ROOT = OsUser("root", 0, 0, "/root")


def find_user(passwd: bytes | None, name: str) -> OsUser | None:
    """The ``/etc/passwd`` entry of ``name`` (or of uid ``name`` when it is numeric)."""
    for line in (passwd or b"").decode(errors="replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and name in (fields[0], fields[2]) and fields[2].isdigit() and fields[3].isdigit():
            return OsUser(fields[0], int(fields[2]), int(fields[3]), fields[5] or "/")
    return None


def home_archive(user: OsUser) -> bytes:
    """A tar of the user's home directory (mode 0755, owned by the user), for Docker's
    ``put_archive`` at ``/`` of the container before it starts."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(posixpath.normpath(user.home).lstrip("/") or ".")
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        info.uid, info.gid = user.uid, user.gid
        info.mtime = int(time.time())
        tar.addfile(info)
    return buf.getvalue()
