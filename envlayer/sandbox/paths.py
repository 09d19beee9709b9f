"""``file_root`` confinement against symlinks, checked inside the sandbox.

:meth:`Environment.resolve_path` confines paths lexically; a symlink under the root can
still point out of it. Backends that run commands in the sandbox resolve both the root and
the target there with ``readlink -f`` (for a file that does not exist yet, its parent) and
refuse a target outside the root. :func:`confined_path` does both for a backend's file calls.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlayer.errors import SandboxPathError

if TYPE_CHECKING:
    from envlayer.environment import Environment

Helper = Callable[[list[str], bytes | None], tuple[int, bytes, bytes]]
"""Runs an argv in the sandbox with optional stdin bytes: (exit code, stdout, stderr)."""

REAL_PATHS = 'readlink -f -- "$1"; readlink -f -- "$2" || readlink -f -- "${2%/*}"'


def check_real_path(helper: Helper, path: str, full: str, root: str) -> None:
    """Raise :class:`SandboxPathError` when absolute ``full`` (the caller's ``path``)
    really lies outside absolute ``root`` in the sandbox. When the sandbox cannot answer
    (no ``readlink``), the lexical check stands."""
    code, out, _ = helper(["sh", "-c", REAL_PATHS, "envlayer-real", root, full], None)
    lines = out.decode(errors="replace").splitlines()
    if code == 0 and len(lines) >= 2:
        real_root, real = lines[0], lines[1]
        if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
            raise SandboxPathError(path, root)


def confined_path(env: Environment, helper: Helper, path: str, workdir: str) -> str:
    """The absolute sandbox path of ``path`` (relative to ``workdir``), confined to
    ``env.options.file_root`` lexically (:meth:`Environment.resolve_path`) and, through
    ``helper`` in the sandbox, against symlinks (:func:`check_real_path`)."""
    full = env.resolve_path(path, workdir)
    root = env.options.file_root
    if root is not None:
        check_real_path(helper, path, full, posixpath.normpath(posixpath.join(workdir, root)))
    return full
