"""The persistent shell of a Modal environment: the core's protocol
(:class:`~envlayer.execution.shell_session.PersistentShell`, whose docstring states the semantics)
over one long-lived ``Sandbox.exec`` of the configured shell.

The exec runs the shell under the idle watchdog of :func:`envlayer_modal.stream.session_argv`
(a command sent as the watchdog ended the shell runs in a new one: ``ended_idle`` below),
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
from envlayer_modal.stream import ExecStream, idle_note, session_argv

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
    ended: Callable[[BaseException], BaseException | None],
    guard: Callable[[Callable[[], None]], None],
) -> PersistentShell:
    """The session shell of an environment (not started yet). ``ended`` tells a refused
    write from a sandbox that had ended; ``guard`` runs each write (see
    :class:`~envlayer_modal.stream.ExecStream`)."""

    token = ""  # ENVLAYER_SESSION of the current session exec, which names its idle note

    def open_stream() -> ByteStream:
        nonlocal token
        token = uuid.uuid4().hex
        argv = session_argv(shell, idle_exit, session.session_id, idle_note(token))
        return ExecStream(Process(start_exec(argv, {**env, SESSION_VAR: token})), ended, guard)

    def ended_idle() -> bool:
        """Whether the watchdog ended the shell between commands (it left its note, which
        this removes); one helper exec, asked only when a shell ended unexpectedly."""
        note = f"{session.state_dir}/{idle_note(token)}"
        code, _, _ = helper([shell, "-c", 'rm -- "$1" 2>/dev/null', "envlayer-idle", note], None)
        return code == 0

    def run_aside(argv: list[str]) -> None:
        code, out, err = helper(argv, None)
        if code != 0:
            log.warning("modal: helper %s exited %s: %s", argv[0], code, err.decode(errors="replace").strip())
        else:
            log.debug("modal: %s", out.decode(errors="replace").strip())

    session = PersistentShell(open_stream, run_aside=run_aside, shell=shell, start_dir=cwd, ended_idle=ended_idle)
    return session
