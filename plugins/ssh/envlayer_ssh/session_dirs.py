"""The session directories envlayer keeps on the host, and how none is left behind.

Every session shell has a private directory ``${TMPDIR:-/tmp}/.envlayer-session-<id>``
(the core's :func:`envlayer.execution.shell_script.init_script` makes and uses it). On SSH the
login user's ``TMPDIR`` is shared by everything that user runs, so envlayer answers for
what it leaves there:

* ``cleanup()`` removes the directory of a live session before it returns (the shell
  removes it too as it exits, but not before the channel is gone: a check right after
  ``cleanup()``, or a connection closed at once, would otherwise find it there).
* Each session shell, as it starts (first start, restart, after a reconnect), writes
  its pid to ``<dir>/holder`` and removes, up to :data:`SWEEP_LIMIT` per start, the
  session directories of the login user whose holder no longer runs: so a session that
  died with its connection, or whose ``cleanup()`` could not reach the host, is cleaned
  up by the next one. Only directories of the login user named ``.envlayer-session-*``
  (not symlinks) are removed, and never one whose holder runs. Two kinds wait until
  untouched for :data:`IDLE_MINUTES` minutes: a directory holding saved ``state`` (its
  shell ended, by ``exit N`` or a closed connection, and its session restores that state
  when it next runs a command: the session may still be alive in its process), and one
  without a holder (from an envlayer before holders, or one being made at that instant).

Nothing here runs in one-shot mode, which keeps no directory on the host.
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING

from envlayer_ssh.channel_io import run_simple

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")

PREFIX = ".envlayer-session-"
"""Name prefix of a session directory (as :func:`envlayer.execution.shell_script.init_script` names it)."""
SWEEP_LIMIT = 20
"""At most this many dead sessions' directories are removed per shell start."""
IDLE_MINUTES = 60
"""A directory that holds saved state, or has no holder file, is removed only when
untouched for this long."""
_REMOVE_TIMEOUT = 15.0


def claim_script(session_id: str) -> bytes:
    """Shell text a session shell runs before the core's init script: removes dead
    sessions' directories (module rules) and claims its own with its pid."""
    own = shlex.quote(PREFIX + session_id)
    return (
        f'__el_t="${{TMPDIR:-/tmp}}"; __el_me="$__el_t"/{own}; __el_n=0\n'
        f'for __el_d in "$__el_t"/{PREFIX}*; do\n'
        '  [ "$__el_d" != "$__el_me" ] && [ -d "$__el_d" ] && [ ! -h "$__el_d" ] && [ -O "$__el_d" ] || continue\n'
        "  __el_p=; { read -r __el_p <\"$__el_d/holder\"; } 2>/dev/null\n"
        '  case "$__el_p" in ""|*[!0-9]*) __el_p=;; esac\n'
        '  [ -n "$__el_p" ] && kill -0 "$__el_p" 2>/dev/null && continue\n'
        '  if [ -z "$__el_p" ] || [ -e "$__el_d/state" ]; then\n'
        f'    __el_old=$(find "$__el_d" -maxdepth 0 -mmin +{IDLE_MINUTES} 2>/dev/null)\n'
        '    [ -n "$__el_old" ] || continue\n'
        "  fi\n"
        '  rm -rf -- "$__el_d" 2>/dev/null\n'
        f'  __el_n=$((__el_n + 1)); [ "$__el_n" -lt {SWEEP_LIMIT} ] || break\n'
        "done\n"
        'mkdir -m 700 -p -- "$__el_me" 2>/dev/null && echo "$$" >| "$__el_me/holder"\n'
        "unset __el_t __el_me __el_n __el_d __el_p __el_old\n"
    ).encode()


def remove_now(pool: TargetPool, state_dir: str) -> None:
    """Remove a closed session's directory over a helper channel before ``cleanup()``
    returns, when a connection is up (never reconnects for it: a later session sweeps
    it). Best effort: a failure is logged at DEBUG."""
    if not state_dir or not pool.any_alive:
        return
    try:
        code, _, err = run_simple(pool, shlex.join(["rm", "-rf", "--", state_dir]), timeout=_REMOVE_TIMEOUT)
    except Exception:
        log.debug("ssh: could not remove %s", state_dir, exc_info=True)
        return
    if code != 0:
        log.debug("ssh: removing %s exited %s: %s", state_dir, code, err.decode(errors="replace").strip())
