"""Where a user's brokers keep their sockets, and which broker serves a caller.

The directory is ``$ENVLAYER_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/envlayer``, else
``/tmp/envlayer-<uid>``. It is created with mode 0700 when missing; an existing one is
used only when it is a real directory (not a symlink) owned by this user and closed to
group and others: anything else raises ``ValueError`` saying why (the caller then runs
in-process and says why).

One broker serves a user and an envlayer installation (interpreter, location, version):
:data:`INSTALLATION_DIGEST` names it. Each call sends its working directory and
environment; the broker loads the configuration from them and keeps one environment per
backend configuration, task, the variables that backend reads and its client identity
(see :mod:`envlayer.cli.broker.sessions`). A broker whose installation changed since it
started (a plugin installed, envlayer upgraded in place) hands over to a new one
(:mod:`envlayer.cli.broker.installation`).

Standard library only (the client imports this on every call).
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import time
import zlib

from envlayer import __version__

TYPE_CHECKING = False  # typing costs milliseconds to import; type checkers read this as True
if TYPE_CHECKING:
    from collections.abc import Mapping

RUNTIME_DIR_VAR = "ENVLAYER_RUNTIME_DIR"
MAX_SOCKET_PATH = 107
"""Longest Unix socket path Linux accepts (bytes, without the final NUL)."""


def candidate(environ: Mapping[str, str]) -> str:
    """The runtime directory this environment selects (not checked)."""
    explicit = environ.get(RUNTIME_DIR_VAR)
    if explicit:
        return explicit
    xdg = environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "envlayer")
    return f"/tmp/envlayer-{os.getuid()}"


def checked(path: str) -> str:
    """``path``, created 0700 when missing. Raises ``ValueError`` (naming it and why) when it
    cannot be created, is a symlink or not a directory, is owned by another user, is
    open to group or others, or is not writable."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ValueError(f"cannot create the runtime directory {path}: {exc.strerror}") from None
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ValueError(f"cannot use the runtime directory {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"the runtime directory {path} is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"the runtime directory {path} is not a directory")
    if st.st_uid != os.getuid():
        raise ValueError(f"the runtime directory {path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        raise ValueError(
            f"the runtime directory {path} has mode {stat.S_IMODE(st.st_mode):04o}: open to group or others"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"the runtime directory {path} is not writable")
    return path


INSTALLATION = f"{sys.executable}\0{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}\0{__version__}"
"""This interpreter, envlayer's location and version: a broker runs the code of the
installation that started it, so another installation gets another broker."""


INSTALLATION_LABEL = f"envlayer {__version__} at {os.path.dirname(os.path.dirname(os.path.dirname(__file__)))}"
"""The installation in words, for ``envlayer broker status`` and ``stop``."""


INSTALLATION_DIGEST = f"{zlib.crc32(INSTALLATION.encode(errors='surrogateescape')):08x}"
"""8 hex digits naming this installation's broker in the runtime directory."""


def broker_path(directory: str, digest: str, suffix: str) -> str:
    """``<directory>/broker-<digest>.<suffix>`` (``sock``, ``pid``, ``lock``, ``log``; who
    removes each is in :mod:`envlayer.cli.broker.leftovers`).
    Raises ``ValueError`` when a socket path would be too long for Linux."""
    path = os.path.join(directory, f"broker-{digest}.{suffix}")
    if suffix == "sock" and len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ValueError(f"the socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    return path


def still_linked(fd: int, path: str) -> bool:
    """True when ``path`` still names the file open as ``fd``. A lock file is removed by
    its holder before it lets go, so a lock taken on a file that ``path`` no longer names
    protects nothing: take it again on the file that is there now."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def lock_linked(path: str, timeout: float, poll: float) -> int | None:
    """An fd of the file ``path`` names, created (0600) when missing, holding its exclusive
    ``flock``; retried every ``poll`` seconds while another process holds it, or while the
    file won was removed meanwhile (:func:`still_linked`). None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                return None
            time.sleep(poll)
            continue
        if still_linked(fd, path):
            return fd
        os.close(fd)  # removed by the process that held it: take the current file


def unlink_held(fd: int, path: str) -> None:
    """Remove ``path`` when it still names ``fd``'s file (whose lock the caller holds)."""
    if still_linked(fd, path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
