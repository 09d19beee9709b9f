"""Where a user's brokers keep their sockets, and which broker serves a caller.

The directory is ``$ENVLAYER_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/envlayer``, else
``/tmp/envlayer-<uid>``. It is created with mode 0700 when missing; an existing one is
used only when it is a real directory (not a symlink) owned by this user and closed to
group and others: anything else raises ``ValueError`` saying why (the caller then runs
in-process and says why).

A broker runs with exactly its caller's working directory and environment, so that
every backend behaves through it as it does in-process (the local backend's directory
and inherited variables, ``DOCKER_HOST``, ``KUBECONFIG``, API keys, config files found
from the directory). :func:`context_digest` names that context; a caller whose context
differs gets another broker, as does a caller running another envlayer installation
(interpreter, location or version). Variables a shell changes on its own (``PWD``,
``OLDPWD``, ``SHLVL``, ``_``) are not part of the context.

Standard library only (the client imports this on every call).
"""

from __future__ import annotations

import os
import stat
import sys
import zlib

from envlayer import __version__

TYPE_CHECKING = False  # typing costs milliseconds to import; type checkers read this as True
if TYPE_CHECKING:
    from collections.abc import Mapping

RUNTIME_DIR_VAR = "ENVLAYER_RUNTIME_DIR"
VOLATILE_VARS = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
"""Variables a shell sets by itself; they do not select a broker."""

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


def context_entries(cwd: str, environ: Mapping[str, str]) -> list[str]:
    """The caller context a broker must match: the installation, the directory, then
    sorted ``NAME=VALUE``."""
    return [INSTALLATION, cwd, *sorted(f"{k}={v}" for k, v in environ.items() if k not in VOLATILE_VARS)]


def context_digest(cwd: str, environ: Mapping[str, str]) -> str:
    """16 hex digits naming the broker of this context (a collision is harmless: the
    broker compares the full context and refuses one that differs)."""
    data = "\0".join(context_entries(cwd, environ)).encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


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


def unlink_held(fd: int, path: str) -> None:
    """Remove ``path`` when it still names ``fd``'s file (whose lock the caller holds)."""
    if still_linked(fd, path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
