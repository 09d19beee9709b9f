"""File transfer over the pool's one SFTP channel.

Guaranteed:

* ``read`` refuses directories and files over the size cap before transferring a byte.
* ``write`` is atomic: the data goes to a temp file in the same directory, then a
  ``posix-rename`` replaces the target (a reader never sees half a file); an existing
  file keeps its mode; missing parent directories are created. The rename would replace
  a read-only file, so an existing file is first opened for writing (no truncation): a
  file the login user may not write is refused and left untouched.
* Every permission the server refuses raises :class:`SandboxPermissionDenied` naming the
  path (a ``PermissionError``).
* With a ``root``, the real path (symlinks resolved by the server) must stay under the
  real root, for the file and for the deepest existing ancestor of a file to create.
* Directory transfer copies regular files and directories, keeps permission bits,
  skips symlinks and special files (logged at DEBUG), and checks every file against the
  size cap before copying anything. Upload is one tar stream when the remote has
  ``tar`` (probed once per environment), else SFTP file by file; download lists the tree
  over SFTP and takes the files' contents in tar streams (:mod:`envlayer_ssh.tar_download`),
  over SFTP only what those did not bring (or everything, without ``tar``).

* An operation cut by a lost connection runs once more on a new connection. Each is safe
  to repeat, and the client often learns that a connection died only when it sends (a
  server restart it has not yet read, a forgotten NAT entry).

Raised: ``SandboxFileNotFound``, ``SandboxIsADirectory``, ``SandboxPathError``,
``FileTooLarge``, ``SandboxPermissionDenied``; ``BackendUnavailable`` when the connection
fails again (or cannot be re-established).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import posixpath
import shlex
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from envlayer.errors import (
    BackendUnavailable,
    EnvlayerError,
    FileTooLarge,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
    SandboxPermissionDenied,
)
from envlayer.transfer import TransferSummary
from envlayer_ssh import sdk, tar_download, tar_upload
from envlayer_ssh.channel_io import run_simple

if TYPE_CHECKING:
    import paramiko

    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")
_PREFETCH_REQUESTS = 64
_READ_CHUNK = 32768
"""Read requests in flight while reading a file. Unbounded (paramiko's default), a read of
tens of MiB floods OpenSSH's sftp-server, which drops the connection."""
T = TypeVar("T")


def _transport_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Run a file operation, once more on a new connection when a lost connection cut it
    (every operation here is safe to repeat: reads, and writes that land whole by rename);
    a second loss becomes :class:`BackendUnavailable`."""

    @functools.wraps(func)
    def wrapper(self: RemoteFiles, *args: Any, **kwargs: Any) -> T:
        try:
            return func(self, *args, **kwargs)
        except Exception as exc:
            if not _connection_lost(self.pool, exc):
                raise
            where = self.pool.target.describe()
            log.info("ssh: %s on %s was cut by a lost connection; running it again", func.__name__, where)
        try:
            return func(self, *args, **kwargs)
        except Exception as exc:
            if not _connection_lost(self.pool, exc):
                raise
            raise BackendUnavailable(
                f"file transfer with {self.pool.target.describe()} failed: {type(exc).__name__}: {exc}",
                hint="the next call reconnects; check the remote file before relying on it",
            ) from exc

    return wrapper


def _connection_lost(pool: TargetPool, exc: BaseException) -> bool:
    """True when ``exc`` says the connection (not the server's answer) failed."""
    if isinstance(exc, EnvlayerError):
        return False
    if isinstance(exc, (EOFError, sdk.paramiko.SSHException)):
        return True
    # paramiko reports a closed channel as a bare OSError("Socket is closed").
    return isinstance(exc, OSError) and exc.errno is None and not pool.sftp_alive


def _read_upto(fh: paramiko.SFTPFile, most: int) -> bytes:
    """Up to ``most`` bytes of ``fh`` in linear time (paramiko's one-call ``read(n)``
    grows one bytes object chunk by chunk: quadratic, minutes for 50 MiB)."""
    chunks: list[bytes] = []
    total = 0
    while total < most:
        chunk = fh.read(min(_READ_CHUNK, most - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _missing(exc: OSError) -> bool:
    return isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOENT


@contextmanager
def _denied_as(shown: str, operation: str) -> Iterator[None]:
    """Turn the server's permission refusal (``EACCES``/``EPERM``, which paramiko raises
    without a file name) into :class:`SandboxPermissionDenied` naming ``shown``."""
    try:
        yield
    except EnvlayerError:
        raise
    except OSError as exc:
        if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
            raise SandboxPermissionDenied(shown, operation) from None
        raise


class RemoteFiles:
    """File operations on one target. Paths given here are absolute (the caller
    resolves them against its working directory and checks them lexically)."""

    def __init__(self, pool: TargetPool) -> None:
        self.pool = pool
        self._tar_flavour: str | None = ""
        """The remote ``tar`` for directory upload (see :mod:`envlayer_ssh.tar_upload`):
        ``""`` until probed, then ``"gnu"``, ``"other"`` or ``None`` (SFTP file by file)."""

    # --- confinement ------------------------------------------------------------

    def _realpath(self, sftp: paramiko.SFTPClient, path: str) -> str:
        """The server's realpath of ``path``, or of its deepest existing ancestor with
        the missing components appended."""
        tail: list[str] = []
        current = path
        while True:
            try:
                real = sftp.normalize(current)
                return posixpath.join(real, *reversed(tail)) if tail else real
            except OSError as exc:
                if not _missing(exc) or current == "/":
                    raise
                tail.append(posixpath.basename(current))
                current = posixpath.dirname(current)

    @_transport_errors
    def check_root(self, path: str, root: str | None, shown: str) -> None:
        """Raise :class:`SandboxPathError` when ``path`` really lies outside ``root``."""
        if root is None:
            return
        with self.pool.sftp_lock:
            sftp = self.pool.sftp()
            real_root = self._realpath(sftp, root)
            real = self._realpath(sftp, path)
        if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
            raise SandboxPathError(shown, real_root)

    # --- single files ------------------------------------------------------------

    @_transport_errors
    def home(self) -> str:
        """The login directory (where relative SFTP paths start)."""
        with self.pool.sftp_lock:
            return self.pool.sftp().normalize(".")

    @_transport_errors
    def read(self, path: str, limit: int, shown: str) -> bytes:
        with self.pool.sftp_lock, _denied_as(shown, "read"):
            sftp = self.pool.sftp()
            try:
                attrs = sftp.stat(path)
                if stat.S_ISDIR(attrs.st_mode or 0):
                    raise SandboxIsADirectory(shown)
                size = attrs.st_size or 0
                if size > limit:
                    raise FileTooLarge(shown, size, limit)
                with sftp.open(path, "rb") as fh:
                    fh.prefetch(size, max_concurrent_requests=_PREFETCH_REQUESTS)
                    data = _read_upto(fh, limit + 1)
            except OSError as exc:
                if _missing(exc):
                    raise SandboxFileNotFound(shown) from None
                raise
        if len(data) > limit:
            raise FileTooLarge(shown, len(data), limit)
        return data

    @_transport_errors
    def write(self, path: str, data: bytes, shown: str) -> None:
        parent = posixpath.dirname(path)
        tmp = posixpath.join(parent, f".envlayer-{uuid.uuid4().hex[:12]}")
        with self.pool.sftp_lock, _denied_as(shown, "write"):
            sftp = self.pool.sftp()
            mode = None
            try:
                attrs = sftp.stat(path)
                if stat.S_ISDIR(attrs.st_mode or 0):
                    raise SandboxIsADirectory(shown)
                mode = stat.S_IMODE(attrs.st_mode or 0)
                sftp.open(path, "a").close()  # may this user write it? (append: no truncation, no read right needed)
            except OSError as exc:
                if not _missing(exc):
                    raise
            self._makedirs(sftp, parent)
            try:
                with sftp.open(tmp, "wb") as fh:
                    fh.set_pipelined(True)
                    fh.write(data)
                if mode is not None:
                    sftp.chmod(tmp, mode)
                sftp.posix_rename(tmp, path)
            except BaseException:
                try:
                    sftp.remove(tmp)
                except Exception:
                    self.pool.stale_files.add(tmp)  # the connection is gone: removed once it is back
                raise
        remove_stale(self.pool)

    @_transport_errors
    def write_private(self, path: str, data: bytes) -> None:
        """Create ``path`` readable by the login user only (0600 before any byte is written)."""
        with self.pool.sftp_lock:
            sftp = self.pool.sftp()
            with sftp.open(path, "wb") as fh:
                sftp.chmod(path, 0o600)
                fh.set_pipelined(True)
                fh.write(data)

    def _makedirs(self, sftp: paramiko.SFTPClient, path: str) -> None:
        missing: list[str] = []
        current = path
        while current not in ("", "/"):
            try:
                attrs = sftp.stat(current)
            except OSError as exc:
                if not _missing(exc):
                    raise
                missing.append(current)
                current = posixpath.dirname(current)
                continue
            if not stat.S_ISDIR(attrs.st_mode or 0):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", current)
            break
        for directory in reversed(missing):
            try:
                sftp.mkdir(directory)
            except OSError:
                if not stat.S_ISDIR(sftp.stat(directory).st_mode or 0):  # lost a race: fine if it is a dir
                    raise

    # --- directories ----------------------------------------------------------

    @_transport_errors
    def upload_dir(self, local: str, remote: str, limit: int) -> TransferSummary:
        """Copy the local tree ``local`` to ``remote``; returns the files copied and their bytes."""
        if not os.path.isdir(local):
            raise NotADirectoryError(errno.ENOTDIR, "not a local directory", local)
        files: list[tuple[str, str]] = []
        total = 0
        dirs: list[str] = [remote]
        for dirpath, dirnames, filenames in os.walk(local):
            rel = os.path.relpath(dirpath, local)
            base = remote if rel == "." else posixpath.join(remote, *rel.split(os.sep))
            for name in dirnames:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    log.debug("ssh: upload_dir skips symlinked directory %s", full)
                    continue
                dirs.append(posixpath.join(base, name))
            for name in filenames:
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode):
                    log.debug("ssh: upload_dir skips %s (not a regular file)", full)
                    continue
                if st.st_size > limit:
                    raise FileTooLarge(full, st.st_size, limit)
                files.append((full, posixpath.join(base, name)))
                total += st.st_size
        if self._has_tar() and self._tar_flavour:
            rel = [(posixpath.relpath(d, remote), d) for d in dirs[1:]]
            tar_upload.upload(
                self.pool,
                self._tar_flavour,
                remote,
                [(os.path.join(local, *r.split("/")), r) for r, _ in rel],
                [(src, posixpath.relpath(dst, remote)) for src, dst in files],
            )
            return TransferSummary(files=len(files), bytes=total)
        with self.pool.sftp_lock:
            sftp = self.pool.sftp()
            for directory in dirs:
                self._makedirs(sftp, directory)
            for src, dst in files:
                sftp.put(src, dst, confirm=False)
                sftp.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))
        return TransferSummary(files=len(files), bytes=total)

    @_transport_errors
    def download_dir(self, remote: str, local: str, limit: int, shown: str) -> TransferSummary:
        """Copy the remote tree ``remote`` into ``local``; returns the files copied and their bytes."""
        with self.pool.sftp_lock:
            sftp = self.pool.sftp()
            try:
                if not stat.S_ISDIR(sftp.stat(remote).st_mode or 0):
                    raise NotADirectoryError(errno.ENOTDIR, "not a remote directory", shown)
            except OSError as exc:
                if _missing(exc):
                    raise SandboxFileNotFound(shown) from None
                raise
            entries = list(self._walk(sftp, remote, ()))
            for rel, attrs in entries:
                if stat.S_ISREG(attrs.st_mode or 0) and (attrs.st_size or 0) > limit:
                    raise FileTooLarge(posixpath.join(remote, *rel), attrs.st_size or 0, limit)
            os.makedirs(local, exist_ok=True)
            regular = {
                posixpath.join(*rel): os.path.join(local, *rel) for rel, a in entries if stat.S_ISREG(a.st_mode or 0)
            }
            for rel, attrs in entries:
                if stat.S_ISDIR(attrs.st_mode or 0):
                    dst = os.path.join(local, *rel)
                    os.makedirs(dst, exist_ok=True)
                    os.chmod(dst, stat.S_IMODE(attrs.st_mode or 0) | 0o700)
            fetched = tar_download.fetch(self.pool, remote, regular) if regular and self._has_tar() else set()
            total = 0
            for rel, attrs in entries:
                if stat.S_ISREG(attrs.st_mode or 0):
                    dst = regular[posixpath.join(*rel)]
                    if posixpath.join(*rel) not in fetched:
                        sftp.get(posixpath.join(remote, *rel), dst)
                    os.chmod(dst, stat.S_IMODE(attrs.st_mode or 0) | 0o600)
                    total += attrs.st_size or 0
        return TransferSummary(files=len(regular), bytes=total)

    def _has_tar(self) -> bool:
        """Whether the remote has ``tar`` (probed once per environment)."""
        if self._tar_flavour == "":
            self._tar_flavour = tar_upload.remote_tar(self.pool)
        return self._tar_flavour is not None

    def _walk(self, sftp: paramiko.SFTPClient, top: str, rel: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        """(relative parts, attrs) of directories (before their contents) and regular files."""
        for attrs in sorted(sftp.listdir_attr(posixpath.join(top, *rel)), key=lambda a: a.filename):
            parts = (*rel, attrs.filename)
            mode = attrs.st_mode or 0
            if stat.S_ISDIR(mode):
                yield parts, attrs
                yield from self._walk(sftp, top, parts)
            elif stat.S_ISREG(mode):
                yield parts, attrs
            else:
                log.debug("ssh: download_dir skips %s (symlink or special file)", posixpath.join(top, *parts))


_STALE_TIMEOUT = 15.0


def remove_stale(pool: TargetPool) -> None:
    """Remove the temp files of writes a dropped connection cut (``pool.stale_files``),
    over a helper channel (reconnecting if needed). Called after each write and at
    ``cleanup()``; nothing to do, and no round trip, when there are none. A failure is
    logged at WARNING with the paths (they stay on the host), never raised."""
    if not pool.stale_files:
        return
    with pool.sftp_lock:
        paths = sorted(pool.stale_files)
        if not paths:
            return
        try:
            code, _, err = run_simple(pool, shlex.join(["rm", "-f", "--", *paths]), timeout=_STALE_TIMEOUT)
        except Exception as exc:
            code, err = -1, str(exc).encode()
        if code == 0:
            pool.stale_files.difference_update(paths)
            return
    log.warning(
        "ssh: could not remove the temp files of writes cut by a dropped connection on %s: %s (%s)",
        pool.target.describe(),
        " ".join(paths),
        err.decode(errors="replace").strip(),
    )
