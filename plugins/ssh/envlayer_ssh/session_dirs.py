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

from envlayer.execution.session_dirs import IDLE_MINUTES, PREFIX, SWEEP_LIMIT, claim_script
from envlayer_ssh.channel_io import run_simple

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")

__all__ = ["IDLE_MINUTES", "PREFIX", "SWEEP_LIMIT", "claim_script", "remove_now"]

_REMOVE_TIMEOUT = 15.0


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
