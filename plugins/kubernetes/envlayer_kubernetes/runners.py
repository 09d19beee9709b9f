"""The exec runners of the Kubernetes backend, on the core's exec parts. Each command is an
exec websocket (:class:`~envlayer_kubernetes.channel.ExecChannel`, a core byte stream).

* :class:`SessionRunner`: the environment's persistent shell, the core's
  :class:`~envlayer.execution.shell_session.PersistentShell` over one long-lived shell exec; the
  kill script, the removal of the session's private directory and the staging of large
  stdin run in other execs (:func:`run_helper`).
* :func:`run_oneshot`: one exec per command (``exec_mode = "oneshot"``, and calls that
  find the session busy), under the wrapper of :mod:`envlayer_kubernetes.wrapper`; the
  exit code comes from the status channel. A command too long for the exec's URL travels
  on stdin (:func:`~envlayer_kubernetes.wrapper.command_over_stdin`).
* :func:`run_helper`: envlayer's own short commands (files, the kill script):
  ``(exit code, stdout, stderr)``, uncapped.

Every exec reads the environment's variables (and a call's ``env``) from its stdin first,
never from argv (see :mod:`envlayer_kubernetes.wrapper`). Both runners kill through a
second exec while the command's stream keeps being drained
(:func:`envlayer.execution.streams.drain_while`), so a flood never holds up its own kill.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from envlayer.errors import BackendUnavailable
from envlayer.execution.cancel import killer_for
from envlayer.execution.collector import OutputCollector
from envlayer.execution.shell_script import SESSION_VAR
from envlayer.execution.shell_session import KILL_GRACE_SECONDS, PersistentShell, status_unknown
from envlayer.execution.streams import drain_while
from envlayer.execution.tree_kill import kill_script_argv
from envlayer.request import ExecRequest
from envlayer.result import INTERRUPT_EXIT_CODE, ExecResult
from envlayer_kubernetes.channel import V5, ExecChannel, start_writer
from envlayer_kubernetes.client import Cluster
from envlayer_kubernetes.options import KubernetesOptions
from envlayer_kubernetes.wrapper import (
    RUN_COMMAND_VAR,
    SESSION_START,
    bounded_stdin_argv,
    command_over_stdin,
    env_line,
    oneshot_argv,
)

HELPER_TIMEOUT = 300.0
KILL_TIMEOUT = 15.0


@dataclass(frozen=True)
class ExecTarget:
    """Where commands run: the cluster, the pod, the options and the environment every
    command starts with."""

    cluster: Cluster
    pod: str
    options: KubernetesOptions
    env: Mapping[str, str]

    def open(self, argv: list[str], *, stdin: bool, tty: bool = False) -> ExecChannel:
        """Start ``argv`` in the pod. Raises ``NotStarted`` / :class:`BackendUnavailable`."""
        return ExecChannel.open(self.cluster, self.pod, argv, stdin=stdin, timeout=self.options.api_timeout, tty=tty)


def run_helper(
    target: ExecTarget, argv: list[str], data: bytes | None = None, *, timeout: float = HELPER_TIMEOUT
) -> tuple[int, bytes, bytes]:
    """Run one of envlayer's own commands (no wrapper, no environment) to its end; stdin
    ``data`` is closed after (v5) or bounded (v4). Raises ``NotStarted`` (it did not start)
    or :class:`BackendUnavailable` (the stream broke, or still running after ``timeout``)."""
    if data is not None and target.cluster.protocol != V5:
        argv = bounded_stdin_argv(target.options.shell, argv, len(data))
    channel = target.open(argv, stdin=data is not None)
    writer = start_writer(channel, data, close=True) if data is not None else None
    out: list[bytes] = []
    err: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while (chunks := channel.read(deadline)) is not None:
            if not chunks:
                raise BackendUnavailable(
                    f"an internal command in pod {target.pod} did not finish in {timeout:.0f} s",
                    hint="the pod may be overloaded; retry",
                )
            for name, chunk in chunks:
                (out if name == "stdout" else err).append(chunk)
    finally:
        channel.close()
        if writer is not None:
            writer.join(1.0)
    code = channel.exit_status()
    return (255 if code is None else code), b"".join(out), b"".join(err)


def kill_command(target: ExecTarget, exec_id: str, *, shell_pid: int = 0, since_cs: int = 0) -> None:
    """Kill the process tree of ``exec_id`` in the pod with the core's kill script (best
    effort: a pod that is gone has nothing left to kill)."""
    argv = kill_script_argv(
        target.options.shell, exec_id, shell_pid=shell_pid, since_cs=since_cs, grace=KILL_GRACE_SECONDS
    )
    try:
        run_helper(target, argv, timeout=KILL_TIMEOUT)
    except Exception:
        pass


def run_oneshot(target: ExecTarget, request: ExecRequest, *, cwd: str) -> ExecResult:
    """Run ``request`` in its own exec (see the module docstring)."""
    options = target.options
    data = request.stdin
    closable = target.cluster.protocol == V5
    command = request.process_command(options.shell)
    script = command_over_stdin(command)
    argv = oneshot_argv(
        options.shell,
        command if script is None else RUN_COMMAND_VAR,
        exec_id=request.exec_id,
        cwd=cwd,
        stdin=None if data is None else len(data),
        closable=closable,
    )
    channel = target.open(argv, stdin=True)
    prologue = env_line({**target.env, **request.env}, command=script)
    writer = start_writer(channel, prologue + (data or b""), close=data is None or closable)
    collector = OutputCollector.for_request(request, options)

    def kill() -> None:
        kill_command(target, request.exec_id)

    try:
        try:
            with killer_for(request.cancel, kill):
                while (chunks := channel.read(request.deadline)) is not None:
                    if not chunks:
                        drain_while(channel, collector, kill)
                        return collector.result(request, 124, timed_out=True)
                    for name, chunk in chunks:
                        collector.write(name, chunk)
        except BaseException:
            drain_while(channel, collector, kill)
            raise
        code = channel.exit_status()
        if code is None and not request.cancelled:
            raise status_unknown(f"the command's exec in pod {target.pod} ({channel.failure_message()})")
        return collector.result(request, INTERRUPT_EXIT_CODE if code is None else code)
    finally:
        channel.close()
        writer.join(1.0)


class SessionRunner:
    """The environment's persistent shell. ``target()`` gives the current
    :class:`ExecTarget`. Callers hold the environment's session lock while running a
    command; a busy session is the caller's cue to run one-shot instead."""

    def __init__(self, target: ExecTarget) -> None:
        self.target = target
        self.shell = PersistentShell(
            self._open,
            run_aside=self._aside,
            shell=target.options.shell,
            start_dir=target.options.workdir,
        )

    @property
    def cwd(self) -> str | None:
        """The shell's working directory after its last command (None before)."""
        return self.shell.cwd

    def _open(self) -> ExecChannel:
        target = self.target
        channel = target.open([target.options.shell, "-c", SESSION_START, target.options.shell], stdin=True)
        try:
            channel.write(env_line({**target.env, SESSION_VAR: uuid.uuid4().hex}))
        except OSError:
            channel.close()
            raise
        channel.start_keepalive()
        return channel

    def _aside(self, argv: list[str]) -> None:
        run_helper(self.target, argv, timeout=KILL_TIMEOUT)

    def run(self, request: ExecRequest) -> ExecResult:
        """Run ``request`` in the shell (the caller holds the session lock)."""
        return self.shell.run_request(request, self.target.options)

    def close(self) -> None:
        """End the shell (best effort; never raises)."""
        try:
            self.shell.close()
        except Exception:
            pass
