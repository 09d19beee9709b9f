"""``file_root`` confinement against symlinks, checked inside the sandbox.

:meth:`Environment.resolve_path` confines paths lexically; a symlink under the root can
still point out of it. Backends that run commands in the sandbox resolve both the root and
the target there (:data:`CONFINE`: ``cd -P`` to the root and to the nearest existing
directory on the way to the target) and refuse a target outside the root.
:func:`confined_path` does both for a backend's file calls.
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

OUTSIDE = 25
"""Exit status of :data:`CONFINE` for a path outside the root."""

CONFINE = (
    'if [ -n "$2" ] && cd -P -- "$2" 2>/dev/null; then r=${PWD%/}; '
    'if [ -L "$1" ] && [ ! -d "$1" ]; then t=$(command readlink -f -- "$1") || t=; '
    'else p=$1; while [ -n "$p" ] && [ ! -d "$p" ]; do p=${p%/*}; done; '
    'if cd -P -- "${p:-/}" 2>/dev/null; then t=${PWD%/}${1#"$p"}; else t=; fi; fi; '
    f'[ -z "$t" ] || case $t in "$r"|"$r"/*) ;; *) exit {OUTSIDE};; esac; fi; '
)
"""Shell: exit OUTSIDE when the real path of ``$1`` (normalized, absolute) lies outside
the real ``$2`` (when set). Real paths come from ``cd -P`` (a builtin: no program runs):
of the root, and of the nearest existing directory on the way to ``$1`` (what does not
exist yet is created under it); only a symlink to a file asks ``readlink -f``. Where
none answers (no root, no ``readlink``), the lexical check stands. It changes the
script's directory: the scripts use absolute paths only."""


def check_real_path(helper: Helper, path: str, full: str, root: str) -> None:
    """Raise :class:`SandboxPathError` when absolute ``full`` (the caller's ``path``)
    really lies outside absolute ``root`` in the sandbox (:data:`CONFINE`, run by
    ``helper``). When the sandbox cannot answer, the lexical check stands."""
    code, _, _ = helper(["sh", "-c", CONFINE + "exit 0", "envlayer-real", full, root], None)
    if code == OUTSIDE:
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
