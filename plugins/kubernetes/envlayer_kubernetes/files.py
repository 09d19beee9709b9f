"""Directories over exec: ``tar`` in the pod (single files are the sandbox base's:
:mod:`envlayer.sandbox.files`, through the session or one exec).

Every operation is one exec in the pod driven by a :data:`Runner` (``argv, stdin ->
(exit code, stdout, stderr)``), so it needs only ``sh`` and ``tar`` in the image, and it
works on any volume the pod mounts.

* ``upload_dir``: a tar of the local directory (at most ``limit`` bytes, :func:`pack`)
  unpacked in the pod (:func:`unpack`).
* ``download_dir``: a tar of the remote directory (the pod stops it at ``limit`` bytes);
  every member is checked before anything is written, and one that would land outside
  the local directory (absolute, ``..``, a link pointing out) raises
  :class:`SandboxPathError`; devices and FIFOs are skipped.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable

from envlayer.errors import (
    BackendUnavailable,
    FileTooLarge,
    SandboxFileNotFound,
)
from envlayer.sandbox.archive import safe_extract, tar_summary
from envlayer.transfer import TransferSummary

Runner = Callable[[list[str], bytes | None], tuple[int, bytes, bytes]]
_NOT_FOUND = 66

PACK = '[ -d "$1" ] || exit 66; cd -- "$1" && tar cf - . | head -c "$2"'
UNPACK = 'mkdir -p -- "$1" && cd -- "$1" && tar xf -'


def _failed(what: str, path: str, code: int, err: bytes) -> BackendUnavailable:
    return BackendUnavailable(
        f"{what} {path!r} failed in the pod (exit {code}): {err.decode(errors='replace').strip()[:300]}",
        hint="check permissions and free space in the pod; directory transfer needs tar in the image",
    )


def pack(local: str, limit: int) -> bytes:
    """A tar of the contents of host directory ``local`` (at most ``limit`` bytes, else
    :class:`FileTooLarge` before anything is sent)."""
    if not os.path.isdir(local):
        raise FileNotFoundError(f"not a local directory: {local!r}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(local)):
            tar.add(os.path.join(local, entry), arcname=entry)
            if buf.tell() > limit:
                raise FileTooLarge(local, buf.tell(), limit)
    data = buf.getvalue()
    if len(data) > limit:
        raise FileTooLarge(local, len(data), limit)
    return data


def unpack(run: Runner, shell: str, data: bytes, remote: str) -> TransferSummary:
    """Unpack the tar ``data`` (:func:`pack`) into ``remote`` in the pod; returns the
    regular files copied and their bytes."""
    code, _, err = run([shell, "-c", UNPACK, "envlayer-unpack", remote], data)
    if code != 0:
        raise _failed("unpacking into", remote, code, err)
    return tar_summary(data)


def download_dir(run: Runner, shell: str, remote: str, local: str, limit: int) -> TransferSummary:
    """Copy the contents of ``remote`` in the pod into host directory ``local``; returns the
    regular files written and their bytes. Devices and FIFOs are skipped."""
    code, out, err = run([shell, "-c", PACK, "envlayer-pack", remote, str(limit + 1)], None)
    if code == _NOT_FOUND:
        raise SandboxFileNotFound(remote)
    if len(out) > limit:
        raise FileTooLarge(remote, len(out), limit)
    if code != 0:
        raise _failed("packing", remote, code, err)
    os.makedirs(local, exist_ok=True)
    try:
        return safe_extract(out, local, strip_first=False)
    except tarfile.TarError as exc:
        raise _failed("packing", remote, code, str(exc).encode()) from exc
