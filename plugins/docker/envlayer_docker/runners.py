"""The exec runners of the Docker backend: each takes an :class:`~envlayer.request.ExecRequest`
and returns a finished :class:`~envlayer.result.ExecResult`.

* :class:`SessionRunner`: the environment's persistent shell, the core's
  :class:`~envlayer.execution.shell_session.PersistentShell` over an attached ``docker exec -i sh``;
  the kill script and other helpers run in a second exec (:func:`run_helper`).
* :func:`run_oneshot`: one ``docker exec`` per command (``exec_mode = "oneshot"``, and
  calls that find the session busy), framed by the wrapper of :mod:`envlayer_docker.oneshot`.
* :func:`run_helper`: envlayer's own short commands (file operations, staging large
  stdin, the kill script): ``(exit code, stdout, stderr)``, uncapped.

Both runners and the helpers end on the wrapper's trailer, never on the exec's end: the
daemon ends an exec only once every process holding its output let go (up to about 4 s
later), and handles one container's exec ends one at a time, so a background job that
still holds an ended exec's output (a session shell closed by a persist-mode cleanup
or killed by a timeout) would hold every later helper for seconds.

Both runners kill through a second exec while the command's stream keeps being drained
(:func:`envlayer.execution.streams.drain_while`), so a flood can never hold up its own kill.
Daemon errors go through :func:`envlayer_docker.errors.translated`; a container found gone
before a command started raises :class:`~envlayer_docker.errors.ContainerGone`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.execution.cancel import killer_for
from envlayer.execution.collector import OutputCollector
from envlayer.execution.shell_script import SESSION_VAR
from envlayer.execution.shell_session import (
    KILL_GRACE_SECONDS,
    PersistentShell,
    output_lost,
    read_framed,
    status_unknown,
)
from envlayer.execution.streams import drain_while
from envlayer.execution.tree_kill import EXEC_ID_VAR, kill_script_argv
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer_docker.errors import translated
from envlayer_docker.oneshot import LEASE_PRELUDE, oneshot_argv
from envlayer_docker.options import DockerOptions
from envlayer_docker.transport import AttachStream

_HELPER_TIMEOUT = 300.0
_KILL_TIMEOUT = 15.0
_EXIT_STATUS_WAIT = 2.0


@dataclass(frozen=True)
class ExecTarget:
    """Where commands run: the daemon client, the options, the container in use (an
    ``Attached``), the user, and the environment every command starts with."""

    api: Any
    options: DockerOptions
    container: Any
    user: str | None
    env: Mapping[str, str]


def start_exec(
    target: ExecTarget, argv: list[str], *, env: Mapping[str, str], workdir: str, stdin: bool, doing: str
) -> AttachStream:
    """Create and start an exec, attached. Raises ``ContainerGone`` / ``BackendUnavailable``."""
    api = target.api
    with translated(doing, target.options):
        eid = api.exec_create(
            target.container.id,
            argv,
            stdin=stdin,
            stdout=True,
            stderr=True,
            tty=False,
            environment=dict(env),
            workdir=workdir,
            user=target.user or "",
        )["Id"]
        attached = api.exec_start(eid, socket=True)
    return AttachStream(api, eid, attached, container=target.container, options=target.options)


def _feed(stream: AttachStream, data: bytes) -> threading.Thread:
    def feed() -> None:
        try:
            if data:
                stream.write(data)
        except OSError:
            pass  # the command exited without reading all of it
        stream.end_input()

    writer = threading.Thread(target=feed, name="envlayer-docker-stdin", daemon=True)
    writer.start()
    return writer


def run_helper(
    target: ExecTarget, argv: list[str], data: bytes | None = None, *, timeout: float = _HELPER_TIMEOUT
) -> tuple[int, bytes, bytes]:
    """Run one of envlayer's own commands (no session state, cwd ``/``, stdin ``data``)
    under the one-shot wrapper, and return once its trailer arrived (see the module
    docstring). A missing program gives 127, as in a shell.

    Raises ``ContainerGone`` (it did not start), :class:`BackendUnavailable` (daemon
    errors, the container gone while it ran, or still running after ``timeout`` seconds).
    """
    wrapped, marker = oneshot_argv(target.options.shell, argv, cwd="/", touch_lease=False)
    stream = start_exec(target, wrapped, env=target.env, workdir="/", stdin=data is not None, doing="running a helper")
    writer = _feed(stream, data) if data is not None else None
    collector = OutputCollector(None, "head")
    try:
        framed = read_framed(stream, marker, collector, time.monotonic() + timeout)
        if framed.timed_out:
            raise BackendUnavailable(
                f"an internal command ({argv[0]}) did not finish within {timeout:.0f}s", hint="check the container"
            )
        code = framed.trailer.exit_code if framed.trailer is not None else stream.exit_status(_EXIT_STATUS_WAIT)
    finally:
        stream.close()
        if writer is not None:
            writer.join(1.0)
    buffers = collector.buffers
    return (255 if code is None else code), buffers["stdout"].getvalue(), buffers["stderr"].getvalue()


def run_oneshot(target: ExecTarget, request: ExecRequest, *, cwd: str, touch_lease: bool) -> ExecResult:
    """Run ``request`` in its own exec (see the module docstring)."""
    options = target.options
    argv, marker = oneshot_argv(options.shell, request.process_command(options.shell), cwd=cwd, touch_lease=touch_lease)
    env = {**target.env, **request.env, EXEC_ID_VAR: request.exec_id}
    stream = start_exec(target, argv, env=env, workdir="/", stdin=request.stdin is not None, doing="starting a command")
    writer = _feed(stream, request.stdin) if request.stdin is not None else None
    collector = OutputCollector.for_request(request, options)

    def kill() -> None:
        kill_argv = kill_script_argv(options.shell, request.exec_id, grace=KILL_GRACE_SECONDS)
        try:
            run_helper(target, kill_argv, timeout=_KILL_TIMEOUT)
        except Exception:
            pass  # a container that is gone has nothing left to kill

    try:
        try:
            with killer_for(request.cancel, kill):
                framed = read_framed(stream, marker, collector, request.deadline)
        except BaseException:
            drain_while(stream, collector, kill)
            raise
        if framed.timed_out:
            drain_while(stream, collector, kill)
            return collector.result(request, 124, timed_out=True)
        if framed.trailer is not None:
            return collector.result(request, framed.trailer.exit_code)
        code = stream.exit_status(_EXIT_STATUS_WAIT)
        if code is None:
            raise status_unknown("the command's exec")
        if code == 0:
            raise output_lost("the command's exec")  # the wrapper exits 0 only after its trailer
        return collector.result(request, _oci_code(code, collector))
    finally:
        stream.close()
        if writer is not None:
            writer.join(1.0)


def _oci_code(code: int, collector: OutputCollector) -> int:
    """Docker reports 126 for an exec whose binary is missing; say 127 as a shell would."""
    text = collector.buffers["stderr"].getvalue() + collector.buffers["stdout"].getvalue()
    return 127 if code == 126 and b"executable file not found" in text else code


class SessionRunner:
    """The environment's persistent shell. ``target()`` gives the current
    :class:`ExecTarget` (the container changes after a recovery). Callers hold
    the environment's session lock while running a command; a busy session is the
    caller's cue to run one-shot instead."""

    def __init__(self, target: Callable[[], ExecTarget]) -> None:
        self._target = target
        options = target().options
        self.options = options
        self._stream: AttachStream | None = None
        self.shell = PersistentShell(self._open, run_aside=self._aside, shell=options.shell, start_dir=options.workdir)

    @property
    def cwd(self) -> str | None:
        """The shell's working directory after its last command (None before)."""
        return self.shell.cwd

    def _open(self) -> AttachStream:
        target = self._target()
        env = {**target.env, SESSION_VAR: uuid.uuid4().hex}
        stream = start_exec(
            target, [self.options.shell], env=env, workdir=self.options.workdir, stdin=True, doing="starting a shell"
        )
        self._stream = stream
        return stream

    def _aside(self, argv: list[str]) -> None:
        run_helper(self._target(), argv, timeout=_KILL_TIMEOUT)

    def run(self, request: ExecRequest, *, touch_lease: bool) -> ExecResult:
        """Run ``request`` in the shell (the caller holds the session lock). A shell idle for
        longer than ``lease_interval`` is probed first: the container may have been
        restarted meanwhile, leaving the stream open but the shell gone."""
        stream = self._stream
        if (
            self.shell.alive
            and stream is not None
            and time.monotonic() - self.shell.last_used > self.options.lease_interval
            and not stream.running()
        ):
            self.shell.abandon()
        return self.shell.run_request(request, self.options, prelude=LEASE_PRELUDE if touch_lease else "")

    def close(self) -> None:
        """End the shell (best effort; never raises)."""
        try:
            self.shell.close()
        except Exception:
            pass
