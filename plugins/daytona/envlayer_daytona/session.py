"""One Daytona session shell and the commands run in it (the wire side of ``exec``).

:class:`SessionShell` creates a session, starts it with :func:`~envlayer_daytona.script.session_setup`
and runs commands with :func:`~envlayer_daytona.script.command_script` (asynchronously), then
polls the spool files until the command ends or its deadline passes. Output goes through
the core's :class:`~envlayer.output.CappedBuffer` (caps and truncation metadata) and, uncapped,
to ``on_output`` as it arrives. On a deadline or an interrupt it kills the command's tree
with the core's kill script and still collects the output written so far. While a command
runs, ``refresh_activity`` is called every ``activity_interval`` seconds so Daytona's
auto-stop never fires mid-command.

Errors: :class:`NotStarted` when the command could not be sent (it did not run);
:class:`ShellGone` when the session shell died without reporting a status;
:class:`ProtocolError` when an answer from the sandbox cannot be parsed; the SDK's other
exceptions propagate (the backend translates them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envlayer.output import CappedBuffer, TruncationPolicy
from envlayer_daytona import script

OutputCallback = Callable[[str, bytes], None]


class SessionSetupFailed(Exception):
    """A new session shell did not answer its setup command as expected."""


class NotStarted(Exception):
    """Sending the command failed: it provably did not run (``__cause__`` is the SDK error)."""


class ProtocolError(Exception):
    """A poll answer could not be parsed (cut short, or the sandbox lacks ``od``/``tail``)."""


class ShellGone(Exception):
    """The session shell ended without recording the command's status (killed, or the sandbox
    stopped); whether the command ran is unknown."""


@dataclass
class Outcome:
    """What one command produced. ``exit_code`` is None when it timed out."""

    exit_code: int | None
    stdout: CappedBuffer
    stderr: CappedBuffer
    shell_alive: bool


class SessionShell:
    """One Daytona session of a sandbox, with the pid and directory of its shell.

    Not thread-safe: the backend serializes calls (a busy session makes it open another)."""

    def __init__(self, sandbox: Any, *, env: Mapping[str, str], start_dir: str | None, create_dir: bool) -> None:
        from daytona import SessionExecuteRequest

        self.sandbox = sandbox
        self.id = f"envlayer-{uuid.uuid4().hex[:16]}"
        sandbox.process.create_session(self.id)
        setup = script.session_setup(env, start_dir, create_dir)
        answer = sandbox.process.execute_session_command(self.id, SessionExecuteRequest(command=setup, run_async=False))
        lines = (answer.stdout or "").splitlines()
        if answer.exit_code not in (0, None) or len(lines) < 2 or not lines[0].strip().isdigit():
            self.close()
            raise SessionSetupFailed(
                f"the session shell did not start as expected (exit {answer.exit_code}): "
                f"{(answer.stderr or answer.stdout or '')[:300]}"
            )
        self.pid = int(lines[0])
        self.cwd = lines[1]
        self.alive = True

    def run(
        self,
        command: str | Sequence[str],
        *,
        isolated: bool,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: bytes | None,
        deadline: float | None,
        limit: int,
        policy: TruncationPolicy,
        on_output: OutputCallback | None,
        refresh: Callable[[], None],
        poll_interval: float,
        request_timeout: float,
        max_wait: float = 2.0,
    ) -> Outcome:
        """Run ``command`` to its end or to ``deadline`` (monotonic). Returns the outcome; a
        timeout (``exit_code`` None) has already killed the tree. ``KeyboardInterrupt`` (also
        from ``on_output``) kills the tree, then propagates. One poll waits in the sandbox for
        at most ``max_wait`` seconds, so ``refresh`` runs at least that often."""
        from daytona import SessionExecuteRequest

        exec_id = uuid.uuid4().hex
        stdin_path = None if stdin is None else f"{script.SPOOL}/{exec_id}.in"
        text = script.command_script(
            command, exec_id=exec_id, isolated=isolated, cwd=cwd, env=env, stdin_path=stdin_path
        )
        try:
            if stdin is not None:
                self.sandbox.fs.upload_file(stdin, stdin_path)
            self.sandbox.process.execute_session_command(self.id, SessionExecuteRequest(command=text, run_async=True))
        except Exception as exc:
            raise NotStarted(str(exc)) from exc
        reader = _Reader(self, exec_id, limit, policy, on_output, request_timeout)
        try:
            while True:
                refresh()
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self.kill(exec_id)
                    reader.drain()
                    return Outcome(None, reader.out, reader.err, False)
                wait = max_wait if deadline is None else min(max_wait, deadline - now)
                poll = reader.poll(wait=wait, final=False)
                if poll.exit_code is not None:
                    if poll.pwd and not isolated and not cwd and not env:
                        self.cwd = poll.pwd
                    if not poll.done:
                        reader.drain()
                    self.alive = poll.shell_alive
                    return Outcome(poll.exit_code, reader.out, reader.err, poll.shell_alive)
                if not poll.shell_alive:
                    self.alive = False
                    reader.drain()
                    raise ShellGone(f"the session shell {self.pid} ended without a status")
                if poll_interval > script.TICK and not poll.out and not poll.err:
                    time.sleep(min(poll_interval, 0.5))
        except BaseException as exc:
            if isinstance(exc, ShellGone | ProtocolError):
                raise
            if isinstance(exc, KeyboardInterrupt):
                self.kill(exec_id)
            raise

    def kill(self, exec_id: str) -> None:
        """Kill the command's tree (and the session shell, so it is replaced next time)."""
        self.alive = False
        self.sandbox.process.exec(script.kill_script(exec_id, self.pid))

    def close(self) -> None:
        """Delete the session (its shell ends); never raises."""
        self.alive = False
        try:
            self.sandbox.process.delete_session(self.id)
        except Exception:
            pass


class _Reader:
    """Reads a command's spool files chunk by chunk into capped buffers."""

    def __init__(
        self,
        shell: SessionShell,
        exec_id: str,
        limit: int,
        policy: TruncationPolicy,
        on_output: OutputCallback | None,
        request_timeout: float,
    ) -> None:
        self.shell = shell
        self.exec_id = exec_id
        self.out = CappedBuffer(limit, policy)
        self.err = CappedBuffer(limit, policy)
        self.on_output = on_output
        self.request_timeout = request_timeout

    def poll(self, *, wait: float, final: bool) -> script.Poll:
        text = script.poll_script(
            self.exec_id,
            out_offset=self.out.total,
            err_offset=self.err.total,
            wait=wait,
            shell_pid=self.shell.pid,
            live=self.on_output is not None,
            final=final,
        )
        answer = self.shell.sandbox.process.exec(text, timeout=int(wait + self.request_timeout))
        try:
            poll = script.parse_poll(answer.result or "")
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        for name, buffer, chunk in (("stdout", self.out, poll.out), ("stderr", self.err, poll.err)):
            if chunk:
                buffer.write(chunk)
                if self.on_output is not None:
                    self.on_output(name, chunk)
        return poll

    def drain(self) -> None:
        """Read whatever is left and remove the spool files."""
        for _ in range(10_000):
            if self.poll(wait=0, final=True).done:
                return
