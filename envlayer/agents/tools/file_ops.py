"""File operations in a sandbox beyond read/write (list, stat, delete, move, mkdir),
driven only through ``exec`` with POSIX sh and the ``find``/``stat``/``mv``/``rm``
every supported image has (GNU coreutils or BusyBox).

Paths travel as arguments of ``sh -c SCRIPT sh PATH...``, never inside the script, so
no quoting is involved. Names come back NUL-terminated, so any byte but NUL in a name
survives. When the environment has ``file_root``, every path is checked against it
first (lexically, like :meth:`envlayer.Environment.resolve_path`) and nothing runs for a
path outside it.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import asdict, dataclass
from typing import Any

from envlayer.dispatch import run
from envlayer.environment import Environment
from envlayer.errors import EnvlayerError, SandboxFileNotFound, SandboxIsADirectory
from envlayer.result import ExecResult

_STAT = 'stat -c "%F/%s/%Y/%a" -- "$f" && printf "%s\\0" "$f"'
_EACH = f"for f; do {_STAT}; done"
NOT_FOUND = 3
"""Exit status the scripts use for "no such path"."""
EXISTS = 4
"""Exit status for "the destination exists" (``move`` without ``overwrite``)."""
_TYPES = {
    "regular file": "file",
    "regular empty file": "file",
    "directory": "directory",
    "symbolic link": "symlink",
}


@dataclass(frozen=True)
class Entry:
    """One path as ``stat`` saw it: ``type`` is file, directory, symlink or other;
    ``mtime`` is seconds since the epoch; ``mode`` the permission bits in octal."""

    path: str
    type: str
    size: int
    mtime: int
    mode: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class FileOpError(EnvlayerError):
    """The sandbox refused a file operation (its message is included)."""


def confine(env: Environment, path: str) -> str:
    """``path`` checked against the environment's ``file_root`` (relative paths count
    from ``cwd``, else from ``file_root``); returned as given when there is no root.

    Raises: :class:`~envlayer.errors.SandboxPathError` outside the root,
    :class:`~envlayer.errors.InvalidArgument` for an empty path or a NUL byte."""
    root = env.options.file_root
    if root is None:
        env.resolve_path(path, "/")  # the same checks of empty paths and NUL bytes
        return path
    return env.resolve_path(path, env.options.cwd or root)


def _run(env: Environment, script: str, *paths: str, timeout: float = 60) -> ExecResult:
    return run(env, ["sh", "-c", script, "sh", *paths], timeout=timeout)


def _parse(stdout: bytes) -> list[Entry]:
    entries = []
    for record in stdout.split(b"\0"):
        head, _, name = record.partition(b"\n")
        fields = head.decode("utf-8", "replace").rsplit("/", 3)
        if not name or len(fields) != 4:
            continue
        kind, size, mtime, mode = fields
        entries.append(Entry(name.decode("utf-8", "replace"), _TYPES.get(kind, "other"), int(size), int(mtime), mode))
    return entries


def _failed(result: ExecResult, path: str, doing: str) -> EnvlayerError:
    if result.exit_code == NOT_FOUND:
        return SandboxFileNotFound(path)
    return FileOpError(
        f"could not {doing} {path!r} (exit {result.exit_code}): {result.stderr_text.strip()[:500]}",
        hint="check the path and its permissions, e.g. with terminal `ls -ld PATH`",
    )


def stat(env: Environment, path: str) -> Entry:
    """The entry of ``path`` itself (a symlink is not followed).

    Raises: SandboxFileNotFound, FileOpError."""
    full = confine(env, path)
    result = _run(env, f'f="$1"; [ -e "$f" ] || [ -L "$f" ] || exit {NOT_FOUND}; {_STAT}', full)
    entries = _parse(result.stdout)
    if not result.ok or not entries:
        raise _failed(result, path, "stat")
    return entries[0]


def list_dir(env: Environment, path: str, *, depth: int, limit: int) -> tuple[list[Entry], bool]:
    """The entries under directory ``path`` down to ``depth`` levels (1: its children),
    sorted by path, at most ``limit`` of them; the flag is True when more were cut.

    Raises: SandboxFileNotFound, FileOpError (e.g. not a directory)."""
    full = confine(env, path)
    script = (
        f'[ -e "$1" ] || exit {NOT_FOUND}; [ -d "$1" ] || {{ echo "not a directory" >&2; exit 2; }}; '
        f'find "$1" -mindepth 1 -maxdepth "$2" -exec sh -c {shlex.quote(_EACH)} sh {{}} +'
    )
    result = _run(env, script, full, str(depth))
    if not result.ok:
        raise _failed(result, path, "list")
    entries = sorted(_parse(result.stdout), key=lambda e: e.path)
    return entries[:limit], len(entries) > limit


def delete(env: Environment, path: str, *, recursive: bool) -> Entry:
    """Delete ``path`` (a directory only with ``recursive``); returns what was deleted.

    Raises: SandboxFileNotFound, SandboxIsADirectory (a directory without
    ``recursive``), FileOpError."""
    entry = stat(env, path)
    if entry.type == "directory" and not recursive:
        raise SandboxIsADirectory(path)
    result = _run(env, 'rm -rf -- "$1"' if recursive else 'rm -f -- "$1"', confine(env, path))
    if not result.ok:
        raise _failed(result, path, "delete")
    return entry


def move(env: Environment, source: str, destination: str, *, overwrite: bool) -> Entry:
    """Move (rename) ``source`` to ``destination``; without ``overwrite`` an existing
    destination is an error. Missing parents of the destination are created. Returns
    the moved entry at its new path.

    Raises: SandboxFileNotFound (source), FileOpError (destination exists, or mv failed)."""
    src, dst = confine(env, source), confine(env, destination)
    guard = "" if overwrite else f'if [ -e "$2" ] || [ -L "$2" ]; then exit {EXISTS}; fi; '
    script = (
        f'[ -e "$1" ] || [ -L "$1" ] || exit {NOT_FOUND}; {guard}mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2"'
    )
    result = _run(env, script, src, dst)
    if result.exit_code == EXISTS:
        raise FileOpError(
            f"destination {destination!r} exists", hint="pass overwrite=true to replace it, or choose another path"
        )
    if not result.ok:
        raise _failed(result, source, "move")
    return stat(env, destination)


def make_dir(env: Environment, path: str) -> Entry:
    """Create directory ``path`` and its missing parents (no error if it exists).

    Raises: FileOpError (e.g. a file is in the way)."""
    result = _run(env, 'mkdir -p -- "$1"', confine(env, path))
    if not result.ok:
        raise _failed(result, path, "create directory")
    return stat(env, path)


def join(directory: str, relative: str) -> str:
    """``relative`` under ``directory``; raises ValueError when it is absolute or climbs
    out with ``..``."""
    clean = posixpath.normpath(relative)
    if relative.startswith("/") or clean == ".." or clean.startswith("../") or clean == ".":
        raise ValueError(f"{relative!r} must be a relative path inside the directory")
    return posixpath.join(directory, clean)
