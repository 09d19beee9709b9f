"""Files and directories over exec: ``cat`` for one file, ``tar`` for a directory.

Every operation is one exec in the pod driven by a :data:`Runner` (``argv, stdin ->
(exit code, stdout, stderr)``), so it needs only ``sh``, ``cat``, ``wc`` and (for
directories) ``tar`` in the image, and it works on any volume the pod mounts.

* ``read``: size checked in the pod first (``FileTooLarge`` before any byte moves);
  missing -> ``SandboxFileNotFound``; a directory -> ``SandboxIsADirectory``.
* ``write``: creates parent directories; replacing a file keeps its mode.
* ``upload_dir``: a tar of the local directory (at most ``limit`` bytes) unpacked in the pod.
* ``download_dir``: a tar of the remote directory (the pod stops it at ``limit`` bytes);
  every member is checked before anything is written, and one that would land outside
  the local directory (absolute, ``..``, a link pointing out) raises
  :class:`SandboxPathError`; devices and FIFOs are skipped.
* ``real_path``: ``readlink -f`` in the pod, for ``file_root`` confinement against symlinks.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable

from envlayer.sandbox.archive import safe_extract
from envlayer.errors import (
    BackendUnavailable,
    FileTooLarge,
    SandboxFileNotFound,
    SandboxIsADirectory,
)
from envlayer.transfer import TransferSummary

Runner = Callable[[list[str], bytes | None], tuple[int, bytes, bytes]]
_NOT_FOUND, _IS_DIR, _TOO_LARGE = 66, 67, 68

READ = (
    '[ -d "$1" ] && exit 67; [ -e "$1" ] || exit 66; s=$(wc -c < "$1") || exit 1; '
    '[ "$s" -gt "$2" ] && { echo "$s"; exit 68; }; exec cat -- "$1"'
)
WRITE = '[ -d "$1" ] && exit 67; mkdir -p -- "${1%/*}" 2>/dev/null; cat > "$1"'
PACK = '[ -d "$1" ] || exit 66; cd -- "$1" && tar cf - . | head -c "$2"'
UNPACK = 'mkdir -p -- "$1" && cd -- "$1" && tar xf -'
REAL = 'readlink -f -- "$1"; readlink -f -- "$2" || readlink -f -- "${2%/*}"'


def _failed(what: str, path: str, code: int, err: bytes) -> BackendUnavailable:
    return BackendUnavailable(
        f"{what} {path!r} failed in the pod (exit {code}): {err.decode(errors='replace').strip()[:300]}",
        hint="check permissions and free space in the pod; directory transfer needs tar in the image",
    )


def read(run: Runner, shell: str, path: str, limit: int) -> bytes:
    """The bytes of the file ``path`` (module rules)."""
    code, out, err = run([shell, "-c", READ, "envlayer-read", path, str(limit)], None)
    if code == 0:
        return out
    if code == _NOT_FOUND:
        raise SandboxFileNotFound(path)
    if code == _IS_DIR:
        raise SandboxIsADirectory(path)
    if code == _TOO_LARGE:
        raise FileTooLarge(path, int(out.strip() or 0), limit)
    raise _failed("reading", path, code, err)


def write(run: Runner, shell: str, path: str, data: bytes) -> None:
    """Create or replace ``path`` with ``data`` (module rules)."""
    code, _, err = run([shell, "-c", WRITE, "envlayer-write", path], data)
    if code == _IS_DIR:
        raise SandboxIsADirectory(path)
    if code != 0:
        raise _failed("writing", path, code, err)


def real_path(run: Runner, shell: str, root: str, path: str) -> tuple[str, str] | None:
    """(real root, real path) as the pod resolves them, or None when it cannot tell."""
    code, out, _ = run([shell, "-c", REAL, "envlayer-real", root, path], None)
    lines = out.decode(errors="replace").splitlines()
    return (lines[0], lines[1]) if code == 0 and len(lines) >= 2 else None


def upload_dir(run: Runner, shell: str, local: str, remote: str, limit: int) -> TransferSummary:
    """Copy the contents of host directory ``local`` into ``remote`` in the pod; returns
    the regular files copied and their bytes."""
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
    code, _, err = run([shell, "-c", UNPACK, "envlayer-unpack", remote], data)
    if code != 0:
        raise _failed("unpacking into", remote, code, err)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return _summary([m for m in tar.getmembers() if m.isfile()])


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


def _summary(files: list[tarfile.TarInfo]) -> TransferSummary:
    return TransferSummary(files=len(files), bytes=sum(m.size for m in files))
