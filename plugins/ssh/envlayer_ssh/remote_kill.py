"""Kill a command's process tree on the remote host, from a separate channel.

The work is done by the core's in-sandbox kill script (:mod:`envlayer.execution.tree_kill`,
which documents what is killed); this module runs it over SSH for one-shot commands
(session commands are killed by the core's :class:`~envlayer.execution.shell_session.PersistentShell`
through the same helper channel).
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer.execution.shell_session import KILL_GRACE_SECONDS
from envlayer.execution.tree_kill import kill_script_argv
from envlayer_ssh.channel_io import run_simple

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")


_KILL_TIMEOUT = 15.0


def kill_remote(pool: TargetPool, shell: str, exec_id: str) -> None:
    """Kill the tree of command ``exec_id`` on ``pool``'s host (see :mod:`envlayer.execution.tree_kill`).

    Best effort and bounded
    (about ``_KILL_TIMEOUT`` seconds): a failure is logged at WARNING, never raised, so the
    caller can still report the timeout.
    """
    argv = kill_script_argv(shell, exec_id, grace=KILL_GRACE_SECONDS)
    line = shlex.join(argv)
    try:
        code, out, err = run_simple(pool, line, timeout=_KILL_TIMEOUT)
    except BackendUnavailable as exc:
        log.warning("ssh: could not kill command %s on %s: %s", exec_id, pool.target.describe(), exc)
        return
    if code != 0:
        log.warning("ssh: the kill script for %s exited %s: %s", exec_id, code, err.decode(errors="replace").strip())
    else:
        log.debug("ssh: %s", out.decode(errors="replace").strip())
