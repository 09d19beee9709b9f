"""The persistent shell: one long-lived channel per environment, commands framed by sentinels.

Protocol (one block per command, written to the shell's stdin; nothing is echoed since
there is no pty):

* the command runs in the shell itself through ``eval`` (so ``cd`` and ``export``
  persist, and a syntax error stays inside the eval), with stdin from ``/dev/null`` or
  from a private (0600) temp file holding the caller's bytes, written by ``printf`` in
  the block itself or, above ``INLINE_STDIN_MAX``, uploaded over SFTP first; per-call ``cwd``/``env`` run it in
  a subshell, so they apply to that call only;
* then the shell prints ``\\n<token>`` on stderr and
  ``\\n<token> <exit code> <uptime> <cwd> <token>`` on stdout. The token is random per
  command, so output can never fake it. The reader strips the sentinels and the newline
  before them.

``exit N`` ends the shell: its EXIT trap saves the exported variables to a private
state file (mode 0600) and prints the sentinels, so the call returns ``N`` normally; the
next call starts a new shell in the last working directory that sources the state file.
After a timeout the shell is killed (SIGKILL: no trap runs), so the next shell starts in
the last working directory with the environment's configured variables only.
"""

from __future__ import annotations

import logging
import shlex
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer.proctree import EXEC_ID_VAR
from envlayer_ssh import script
from envlayer_ssh.channel_io import Collector, SentinelSplitter, exit_code, pump, run_simple
from envlayer_ssh.errors import ConnectionLost

if TYPE_CHECKING:
    from envlayer_ssh.pool import Lease, TargetPool

log = logging.getLogger("envlayer.ssh")

_START_TIMEOUT = 30.0
INLINE_STDIN_MAX = 65536
"""Per-call stdin up to this size travels inside the command block (as a ``printf``
format); larger stdin is uploaded over SFTP first (far faster than the shell parsing
megabytes of escapes)."""
STDIN_DIR = "/tmp"


@dataclass
class Outcome:
    """How one command ended: ``timed_out``, or finished with ``exit_code``.
    ``shell_gone``: the shell's channel ended without the command's sentinels (the shell
    was replaced by ``exec``, dropped envlayer's EXIT trap, or its channel was closed)."""

    exit_code: int
    timed_out: bool = False
    shell_gone: bool = False


class ShellSession:
    """A persistent remote shell. Not thread-safe: the environment serializes calls."""

    def __init__(
        self,
        pool: TargetPool,
        *,
        shell: str,
        env: Mapping[str, str],
        cwd: str | None,
        upload: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.pool = pool
        self.upload = upload
        """Writes a private (0600) remote file; used for large per-call stdin."""
        self.shell = shell
        self.env = dict(env)
        self.start_cwd = cwd
        self.cwd: str | None = None
        """The shell's working directory after the last command (None before the first)."""
        self.pid = 0
        self.state_path = f"${{TMPDIR:-/tmp}}/.envlayer-state-{uuid.uuid4().hex}"
        self._lease: Lease | None = None
        self._sync: tuple[int, float] | None = None

    @property
    def alive(self) -> bool:
        lease = self._lease
        if lease is None:
            return False
        ch = lease.channel
        return not (ch.closed or ch.eof_received or ch.exit_status_ready()) and lease.connection.alive

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> str | None:
        """Start (or restart) the shell. Returns None, or an error text when the
        configured working directory does not exist on a first start.

        A restart goes to the last known working directory, falling back to the
        configured one, then the login directory (logged at WARNING).
        Raises :class:`BackendUnavailable` when the shell cannot be started.
        """
        self.close_now()
        lease = self.pool.open(long_lived=True)
        self._lease = lease
        try:
            lease.channel.exec_command(f"exec {shlex.quote(self.shell)}")
        except Exception as exc:
            self.close_now()
            raise BackendUnavailable(
                f"cannot start {self.shell} on {self.pool.target.describe()}: {exc}",
                hint="check the shell option and the server's log",
            ) from exc
        state = self.state_path
        tries = [d for d in (self.cwd, self.start_cwd) if d]
        cd = " || ".join(f"cd -- {script.quote_path(d)} 2>/dev/null" for d in tries)
        init = (
            "__envlayer_exit() {\n"
            "  __el_rc=$?\n"
            f"  (umask 077; export -p > {state}) 2>/dev/null\n"
            "  printf '\\n%s\\n' \"$__el_tok\" >&2\n"
            '  printf \'\\n%s %s exit %s %s\\n\' "$__el_tok" "$__el_rc" "$PWD" "$__el_tok"\n'
            "}\n"
            "trap __envlayer_exit EXIT\n"
            f"if [ -f {state} ]; then . {state}; rm -f {state}; else\n"
            f"{script.export_lines(self.env)}:\nfi\n"
            "__el_nocwd=0\n" + (f"{cd} || __el_nocwd=1\n" if cd else "")
        )
        try:
            lease.channel.sendall(init.encode())
        except Exception as exc:
            self.close_now()
            raise BackendUnavailable(f"the shell on {self.pool.target.describe()} closed at start: {exc}") from exc
        first_start = self.cwd is None
        collector = Collector(4096, "head", None)
        outcome = self.run(
            'printf "%s %s" "$$" "$__el_nocwd"',
            exec_id="start",
            stdin=None,
            deadline=time.monotonic() + _START_TIMEOUT,
            collector=collector,
        )
        text = collector.buffers["stdout"].getvalue().decode(errors="replace").split()
        if outcome.timed_out or outcome.exit_code != 0 or len(text) != 2:
            err = collector.buffers["stderr"].getvalue().decode(errors="replace").strip()
            self.close_now()
            raise BackendUnavailable(
                f"the shell {self.shell} on {self.pool.target.describe()} did not start: {err or outcome}",
                hint="check the shell option; it must be a POSIX sh",
            )
        self.pid = int(text[0])
        if text[1] == "1":
            if first_start:
                missing = self.start_cwd or ""
                self.cwd = None
                self.close_now()
                return f"working directory does not exist: {missing}\n"
            log.warning("ssh: working directory %s is gone; the restarted shell is in %s", tries[0], self.cwd)
        return None

    def close(self) -> None:
        """End the shell (removing its state file) and free its channel. Idempotent.

        A shell that already ended (``exit``, a dropped connection) may have left its
        state file; it is removed over another channel when the connection is up (never
        reconnecting just for that).
        """
        lease = self._lease
        if lease is not None and self.alive:
            try:
                lease.channel.sendall(f"trap - EXIT; rm -f {self.state_path}; exit 0\n".encode())
            except Exception:
                log.debug("ssh: could not send exit to the session shell", exc_info=True)
            self.close_now()
            return
        self.close_now()
        if self.pid and self.pool.any_alive:
            try:
                run_simple(self.pool, f"rm -f {self.state_path}", timeout=5.0)
            except BackendUnavailable:
                log.debug("ssh: could not remove the session state file", exc_info=True)

    def close_now(self) -> None:
        """Free the channel at once, without asking the shell to exit (it may be busy)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    # --- commands -------------------------------------------------------------------

    def since_cs(self, sent_at: float) -> int:
        """The remote clock (centiseconds of uptime) at or before which a command sent at
        local time ``sent_at`` cannot have started; 0 when unknown.

        The last trailer read the uptime before we received it, so the remote clock at
        ``sent_at`` is at least that reading plus the local time elapsed since. One tick
        of margin covers the clocks' truncation to centiseconds.
        """
        if self._sync is None:
            return 0
        remote_cs, received_at = self._sync
        return max(0, remote_cs + int((sent_at - received_at) * 100) - 1)

    def run(
        self,
        body: str,
        *,
        exec_id: str,
        stdin: bytes | None,
        deadline: float | None,
        collector: Collector,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Outcome:
        """Run ``body`` in the shell; see the module docstring for the framing.

        On timeout the shell is left running: the caller kills it (see
        :mod:`envlayer_ssh.remote_kill`) and the session restarts on the next call.
        Raises :class:`ConnectionLost` when the connection dropped mid-command.
        """
        lease = self._lease
        assert lease is not None
        channel = lease.channel
        token = f"__ENVLAYER_{uuid.uuid4().hex}__"
        tok = token.encode()
        run = f"eval {shlex.quote(body)}"
        if cwd or env:
            run = "( " + (script.cd_line(cwd) + "\n" if cwd else "") + script.export_lines(env or {}) + run + "\n)"
        lines = [f"__el_tok={token}; {EXEC_ID_VAR}={exec_id}; export {EXEC_ID_VAR}"]
        redirect = "</dev/null"
        if stdin is not None and len(stdin) > INLINE_STDIN_MAX and self.upload is not None:
            path = f"{STDIN_DIR}/.envlayer-in-{exec_id}"
            self.upload(path, stdin)
            lines.append(f"__el_in={path}")
            redirect = '<"$__el_in"'
        elif stdin is not None:
            lines.append(
                f"__el_in={STDIN_DIR}/.envlayer-in-{exec_id}; "
                f'(umask 077; printf {script.printf_format(stdin)} > "$__el_in")'
            )
            redirect = '<"$__el_in"'
        lines.append(f"{{ {run}\n}} {redirect}")
        lines.append("__el_rc=$?")
        if stdin is not None:
            lines.append('rm -f "$__el_in"')
        lines.append("read __el_up __el_x 2>/dev/null </proc/uptime || __el_up=-")
        lines.append("printf '\\n%s\\n' \"$__el_tok\" >&2")
        lines.append('printf \'\\n%s %s %s %s %s\\n\' "$__el_tok" "$__el_rc" "$__el_up" "$PWD" "$__el_tok"\n')
        out = SentinelSplitter(tok, lambda b: collector.write("stdout", b))
        err = SentinelSplitter(tok, lambda b: collector.write("stderr", b))
        end = b" " + tok + b"\n"

        def on_data(stream: str, data: bytes) -> None:
            (out if stream == "stdout" else err).feed(data)

        def done() -> bool:
            return err.found and out.trailer is not None and out.trailer.endswith(end)

        try:
            channel.sendall("\n".join(lines).encode())
        except Exception as exc:
            self.close_now()
            raise ConnectionLost(
                f"the session shell on {self.pool.target.describe()} failed while the command was "
                f"being sent ({type(exc).__name__}: {exc}); it may or may not have run",
                hint="check the remote state before running it again; the next call reconnects",
            ) from exc
        outcome = pump(channel, on_data, done, deadline)
        if outcome == "timeout":
            return Outcome(124, timed_out=True)
        if outcome == "done":
            assert out.trailer is not None
            fields = out.trailer[1 : -len(end)].decode(errors="surrogateescape").split(" ", 2)
            code, uptime, cwd_now = int(fields[0]), fields[1], fields[2]
            self.cwd = cwd_now
            if uptime == "exit":  # printed by the EXIT trap: the shell is ending
                self.close_now()
            elif uptime != "-":
                whole, _, frac = uptime.partition(".")
                self._sync = (int(whole) * 100 + int((frac + "00")[:2]), time.monotonic())
            return Outcome(code)
        # EOF without sentinels: the shell ended (exec, its own EXIT trap) or the link dropped.
        out.flush()
        err.flush()
        channel.status_event.wait(1.0)
        if self._lease is not lease:  # closed on our side (cleanup from another thread)
            return Outcome(exit_code(channel), shell_gone=True)
        if channel.exit_status < 0 and not lease.connection.alive:
            self.close_now()
            raise ConnectionLost(
                f"the connection to {self.pool.target.describe()} dropped while a command was "
                "running; it may or may not have run (and may still be running)",
                hint="check the remote state before running it again; the next call reconnects",
            )
        code = exit_code(channel)
        self.close_now()
        return Outcome(code, shell_gone=True)
