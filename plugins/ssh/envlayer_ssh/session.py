"""The persistent shell of an ssh environment: the core's protocol
(:class:`~envlayer.execution.shell_session.PersistentShell`, whose docstring states the semantics)
over one long-lived channel running the configured shell.

The channel runs ``exec <shell>`` with no pty (nothing is echoed); the environment's
configured variables are exported first, then the shell claims its private directory
and removes dead sessions' ones (:mod:`envlayer_ssh.session_dirs`). Helpers (the kill script, removing the
session's private directory) run on a second channel. A command's stdin over 4 KiB travels
raw over the channel behind its script (one round trip, where an SFTP upload takes three:
open, chmod, close).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer.execution.shell_script import export_lines
from envlayer.execution.shell_session import PersistentShell
from envlayer_ssh.channel_io import run_simple
from envlayer_ssh.session_dirs import claim_script
from envlayer_ssh.stream import ChannelStream

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")

_ASIDE_TIMEOUT = 15.0


def shell_session(
    pool: TargetPool,
    *,
    shell: str,
    env: Mapping[str, str],
    cwd: str | None,
) -> PersistentShell:
    """The session shell of an environment on ``pool``'s host (not started yet)."""

    def open_stream() -> ChannelStream:
        lease = pool.open(long_lived=True)
        try:
            lease.channel.exec_command(f"exec {shlex.quote(shell)}")
        except Exception as exc:
            lease.release()
            raise BackendUnavailable(
                f"cannot start {shell} on {pool.target.describe()}: {exc}",
                hint="check the shell option and the server's log",
            ) from exc
        stream = ChannelStream(lease)
        try:
            stream.write(export_lines(env).encode() + claim_script(session.session_id))
        except OSError as exc:
            stream.close()
            raise BackendUnavailable(f"the shell on {pool.target.describe()} closed at start: {exc}") from exc
        return stream

    def run_aside(argv: list[str]) -> None:
        code, out, err = run_simple(pool, shlex.join(argv), timeout=_ASIDE_TIMEOUT)
        if code != 0:
            log.warning("ssh: helper %s exited %s: %s", argv[0], code, err.decode(errors="replace").strip())
        else:
            log.debug("ssh: %s", out.decode(errors="replace").strip())

    session = PersistentShell(open_stream, run_aside=run_aside, shell=shell, start_dir=cwd)
    return session
