"""How a session shell's private directory is claimed, and how dead sessions' are removed.

Every session shell has a private directory ``${TMPDIR:-/tmp}/.envlayer-session-<id>``
(:func:`envlayer.execution.shell_script.init_script` makes and uses it; the shell's close
script removes it). A shell killed by a signal (its owner killed with its process group, a
container or host stopping it) cannot remove it, so the backends whose temp directory
outlives a session (local, SSH) send :func:`claim_script` before the init script:

* the starting shell writes its pid to ``<dir>/holder``;
* it removes, up to :data:`SWEEP_LIMIT` per start, the session directories of the same
  user whose holder no longer runs (an exited process not yet reaped, a zombie in
  ``/proc/<pid>/stat``, counts as gone: an orphan's reaper may be slow). Only directories of that user named
  ``.envlayer-session-*`` (not symlinks) are removed, and never one whose holder runs
  (a holder pid reused by another process keeps its directory: the safe side). Two kinds
  wait until untouched for :data:`IDLE_MINUTES` minutes (one ``find`` looks at all of
  them, up to the limit, in the shell's positional parameters, which are then cleared:
  the claim runs first in a new shell, which has none): a directory holding saved
  ``state`` (its shell ended, by ``exit N`` or a closed input, and its session restores
  that state when it next runs a command: the session may still be alive in its
  process), and one without a holder (from an envlayer before holders, a shell killed
  before it claimed it, or one being made at that instant).
"""

from __future__ import annotations

import shlex

PREFIX = ".envlayer-session-"
"""Name prefix of a session directory (as :func:`envlayer.execution.shell_script.init_script` names it)."""
SWEEP_LIMIT = 20
"""At most this many dead sessions' directories are removed per shell start."""
IDLE_MINUTES = 60
"""A directory that holds saved state, or has no holder file, is removed only when
untouched for this long."""


def claim_script(session_id: str) -> bytes:
    """Shell text a session shell runs before :func:`~envlayer.execution.shell_script.init_script`:
    removes dead sessions' directories (module rules) and claims its own with its pid."""
    own = shlex.quote(PREFIX + session_id)
    return (
        f'__el_t="${{TMPDIR:-/tmp}}"; __el_me="$__el_t"/{own}; __el_n=0; set --\n'
        f'for __el_d in "$__el_t"/{PREFIX}*; do\n'
        '  [ "$__el_d" != "$__el_me" ] && [ -d "$__el_d" ] && [ ! -h "$__el_d" ] && [ -O "$__el_d" ] || continue\n'
        '  __el_p=; { read -r __el_p <"$__el_d/holder"; } 2>/dev/null\n'
        '  case "$__el_p" in ""|*[!0-9]*) __el_p=;; esac\n'
        '  __el_z=; { read -r __el_z <"/proc/$__el_p/stat"; } 2>/dev/null\n'
        '  case "$__el_z" in *") Z "*) ;; *) [ -n "$__el_p" ] && kill -0 "$__el_p" 2>/dev/null && continue;; esac\n'
        '  if [ -z "$__el_p" ] || [ -e "$__el_d/state" ]; then set -- "$@" "$__el_d"\n'
        '  else rm -rf -- "$__el_d" 2>/dev/null; fi\n'
        f'  __el_n=$((__el_n + 1)); [ "$__el_n" -lt {SWEEP_LIMIT} ] || break\n'
        "done\n"
        f'[ $# -eq 0 ] || find "$@" -maxdepth 0 -mmin +{IDLE_MINUTES} -exec rm -rf -- {{}} + 2>/dev/null\n'
        'set --; mkdir -m 700 -p -- "$__el_me" 2>/dev/null && echo "$$" >| "$__el_me/holder"\n'
        "unset __el_t __el_me __el_n __el_d __el_p __el_z\n"
    ).encode()
