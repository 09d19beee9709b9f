"""The persistent shell of a Modal environment: the core's protocol
(:class:`~envlayer.execution.shell_session.PersistentShell`, whose docstring states the semantics)
over one long-lived ``Sandbox.exec`` of the configured shell.

The exec runs the shell under the idle watchdog of :func:`envlayer_modal.stream.session_argv`,
with the environment's configured variables and ``ENVLAYER_SESSION`` as the exec's
environment (never in argv). Helpers (the kill script, removing the session's private
directory) run as separate one-shot execs; stdin over the core's inline limit is written
into the session's private directory through ``sb.filesystem``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from envlayer.execution.shell_script import SESSION_VAR
from envlayer.execution.shell_session import PersistentShell
from envlayer.execution.streams import ByteStream
from envlayer_modal.process import Process
from envlayer_modal.stream import ExecStream, session_argv

log = logging.getLogger("envlayer.modal")

Starter = Callable[[list[str], Mapping[str, str]], object]
"""Starts ``Sandbox.exec(*argv, env=env, text=False)`` and returns the SDK process."""
Helper = Callable[[list[str], bytes | None], tuple[int, bytes, bytes]]


def shell_session(
    start_exec: Starter,
    helper: Helper,
    *,
    shell: str,
    env: Mapping[str, str],
    cwd: str,
    idle_exit: int,
    upload: Callable[[str, bytes], None],
    ended: Callable[[BaseException], BaseException | None],
    guard: Callable[[Callable[[], None]], None],
) -> PersistentShell:
    """The session shell of an environment (not started yet). ``ended`` tells a refused
    write from a sandbox that had ended; ``guard`` runs each write (see
    :class:`~envlayer_modal.stream.ExecStream`)."""

    def open_stream() -> ByteStream:
        environment = {**env, SESSION_VAR: uuid.uuid4().hex}
        return ExecStream(Process(start_exec(session_argv(shell, idle_exit), environment)), ended, guard)

    def run_aside(argv: list[str]) -> None:
        code, out, err = helper(argv, None)
        if code != 0:
            log.warning("modal: helper %s exited %s: %s", argv[0], code, err.decode(errors="replace").strip())
        else:
            log.debug("modal: %s", out.decode(errors="replace").strip())

    return PersistentShell(open_stream, run_aside=run_aside, shell=shell, start_dir=cwd, upload=upload)
