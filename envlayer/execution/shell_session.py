"""The persistent-shell protocol: commands run one after another in one long-lived shell
in the sandbox, over any :class:`~envlayer.execution.streams.ByteStream`.

A backend supplies three things and gets session semantics identical to every other
backend's (the conformance kit checks them):

* ``open_stream()``: start a POSIX ``sh`` in the sandbox reading its script from stdin
  (no tty), in the environment's working directory and with the environment's variables
  plus ``ENVLAYER_SESSION``, and return the stream to it;
* ``run_aside(argv)``: run a short helper command in the sandbox through a *second*
  channel (another exec, another SSH channel), waiting for it to end; used to kill a
  command (the core's :mod:`envlayer.execution.tree_kill` script) and to remove the session's
  private directory;
* optionally ``upload(path, data)``: write a private file in the sandbox, used for a
  command's stdin over :data:`~envlayer.execution.shell_script.PRINTF_SMALL` bytes, for a
  backend that writes one for less than a round trip on its stream costs (the local
  backend writes the file itself; Daytona's stream writes are API calls too); it takes
  no deadline, so the session waits for it only until the call's (on a thread): one that
  has not finished by then makes the call a timeout, and the command never runs. Without
  it such stdin goes raw behind the command's script, as a file call's bytes do: the
  shell acknowledges, then exactly those bytes follow, taken by ``head -c`` into the
  session's private file ``in-<exec id>`` (see :func:`~envlayer.execution.shell_script.call_script`);
  stdin up to that size travels inside the script as a ``printf`` format;
* optionally ``ended_idle()``, for a backend whose sandbox ends session shells left idle
  (Modal's watchdog): asked when the stream ended during a command that envlayer did not
  kill, it answers True when the sandbox proves the shell was waiting for its next
  command when it was ended, so the command never started.

The semantics (also stated in the :class:`~envlayer.environment.Environment` contract):

* A command without per-call ``cwd``/``env`` runs in the shell itself: ``cd``,
  ``export``, ``set -e``/``set -u``/``set -x``, functions and variables persist to the
  next call. A syntax error fails that call (exit 2) and nothing else.
* With a per-call ``cwd`` or ``env`` the command runs in a subshell that applies them:
  they hold for that call only, and nothing the command changes persists. A relative
  ``cwd`` is taken from the shell's current directory; a missing one gives exit 126.
* A command that ends the shell (``exit N``; a failure under ``set -e``; an unset
  variable under ``set -u``) returns its status as the call's exit code. The next call
  runs in a new shell that keeps the working directory, the exported variables and the
  shell options (``set -e`` stays on); non-exported variables, functions, aliases and
  traps are gone. That is documented, so ``recovered`` stays empty.
* A timeout or an interrupt kills the command's process tree *and* the shell. The next
  call runs in a new shell in the last working directory with only the environment's
  configured variables, and its result says so in ``recovered``
  (:data:`RESTARTED_AFTER_KILL`). The same holds when the shell vanished without its
  EXIT trap (killed from outside, ``exec`` into another program, a command's own EXIT
  trap): that call returns the shell's exit status as the transport reports it. The
  timeout holds while a call's raw input is sent too: a shell (or transport) that stops
  taking it makes the call a timeout at its deadline (the stream's ``write`` keeps it,
  see :class:`~envlayer.execution.streams.ByteStream`).
* An EXIT trap set by a command is replaced by the session's at the next call (the
  session needs it to keep state across ``exit``); other traps persist.
* The kill never depends on the command's output being read: while it runs, the stream
  keeps being read (and what exceeds the caps dropped), see :func:`drain_while`.
* A shell ended as idle before it started the command (``ended_idle()`` says so) is
  replaced and the command runs in the new shell, up to :data:`IDLE_END_RETRIES` times;
  ``recovered`` then says state was reset if the ended shell held any (it had run a
  command, or continued the state an ``exit`` saved).
* A transport that is lost (daemon gone, connection dropped) makes the call raise the
  stream's :class:`~envlayer.errors.BackendUnavailable`: the command may or may not
  have finished, and no exit code is invented.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from envlayer.errors import BackendUnavailable, InvalidArgument
from envlayer.execution.collector import OutputCollector
from envlayer.execution.shell_script import (
    ANY_SHELL,
    PRINTF_SMALL,
    CallStyle,
    MarkerScanner,
    Trailer,
    ack_of,
    call_script,
    close_script,
    command_text,
    handshake_command,
    init_script,
    marker_of,
    new_seed,
    parse_trailer,
    plain_call_script,
    script_call,
)
from envlayer.execution.streams import ByteStream, StreamEnded, WriteTimedOut, call_within, drain_while, write_by
from envlayer.execution.tree_kill import kill_script_argv
from envlayer.request import ExecRequest, ScriptRequest
from envlayer.result import ExecResult

if TYPE_CHECKING:
    from envlayer.options import BaseOptions

log = logging.getLogger("envlayer.session")

RESTARTED_AFTER_KILL = "session shell restarted: exported variables and shell options were reset"
"""``ExecResult.recovered`` of the first call after the session shell was killed."""

KILL_GRACE_SECONDS = 1
"""Seconds the kill script gives the command's processes between SIGTERM and SIGKILL."""

IDLE_END_RETRIES = 3
"""How many times in a row one call runs its command in a new shell because the last one
was ended as idle before starting it; then the call raises (the sandbox's idle limit is
shorter than a command takes to reach the shell)."""

_EXIT_STATUS_WAIT = 2.0
_START_TIMEOUT = 30.0


class ShellStartError(BackendUnavailable):
    """The session shell could not be started or did not answer its handshake."""


_NOT_EXECUTED = (126, 127)
"""Exit codes of a program that could not be run (POSIX ``sh``, ``docker exec``): a shell
that ran the handshake answers it with 0."""


def shell_missing(shell: str) -> InvalidArgument:
    """The error for a ``shell`` option naming no program the sandbox can run: bad input
    (the environment stays usable with another shell), not an outage."""
    return InvalidArgument(
        "shell",
        f"the shell {shell} does not exist in the sandbox (or cannot be run there)",
        hint="set the shell option to a POSIX sh the sandbox has, e.g. -o shell=/bin/sh",
    )


class _EndedIdle(Exception):
    """The shell was ended as idle before it started the command (see ``ended_idle``);
    whatever was read before the end is already in the collector."""


class ShellOutcome(NamedTuple):
    """How one command in the session ended.

    ``exit_code`` is the command's status (124 with ``timed_out``). ``shell_ended``: the
    shell is gone after this call (the command ended it, or it was killed). ``recovered``
    is what the result's ``recovered`` should say (see :data:`RESTARTED_AFTER_KILL`).
    """

    exit_code: int
    timed_out: bool = False
    shell_ended: bool = False
    recovered: str = ""


_FINISHED = tuple(ShellOutcome(code) for code in range(256))
"""The outcome of a command that ended with each exit status, the shell still there (made
once: most calls end so)."""


class Framed:
    """How reading one framed command ended: its ``trailer``; or ``timed_out`` (the
    deadline passed first); or neither (the stream ended before the trailer).
    ``after``: what arrived behind the end markers (output of background jobs). A plain
    class (one is made per call): read it, never change it."""

    __slots__ = ("after", "timed_out", "trailer")

    def __init__(
        self, trailer: Trailer | None = None, timed_out: bool = False, after: tuple[tuple[str, bytes], ...] = ()
    ) -> None:
        self.trailer, self.timed_out, self.after = trailer, timed_out, after


def read_framed(
    stream: ByteStream,
    marker: bytes,
    collector: OutputCollector,
    deadline: float | None,
    pending: list[tuple[str, bytes]] | None = None,
    on_ack: tuple[bytes, Callable[[], None]] | None = None,
    stderr_marked: bool = True,
) -> Framed:
    """Read one command's output from ``stream`` into ``collector`` until both end
    markers (see :mod:`envlayer.execution.shell_script`), the stream's end, or ``deadline``.
    ``pending`` chunks (read earlier) are processed first, and taken off that list. On
    the stream's end, bytes held back as a possible marker start are delivered. Bytes read
    behind the markers are returned in ``Framed.after``. ``on_ack``: ``(ack, send)``,
    ``send()`` is called once, as soon as ``ack`` (removed from the output) is read on
    stdout. Without ``stderr_marked`` (a stream that keeps the order of writes across its
    outputs, whose shell prints no stderr marker: ``init_script(stderr_marker=False)``) the
    command's stderr is what came before the stdout trailer and what the stream holds right
    after it (one more look, always: see :attr:`ProcessStream.keeps_write_order
    <envlayer.execution.streams.ProcessStream.keeps_write_order>`). Exceptions (from the
    stream, ``send`` or the collector's callback) propagate; the caller kills the command."""
    out = MarkerScanner(marker, trailer=True)
    err = MarkerScanner(marker, trailer=False) if stderr_marked else None
    stdout = out if on_ack is None else _AckedStdout(out, *on_ack)
    write = collector.write
    chunks = pending[:] if pending else None
    if pending:
        pending.clear()  # delivered here, so a new try of the command does not repeat them
    while True:
        if chunks:
            for name, data in chunks:
                write(name, stdout.feed(data) if name == "stdout" else data if err is None else err.feed(data))
            if out.done:
                if stdout is not out:
                    stdout.release()
                if err is None:
                    for name, data in stream.read(time.monotonic()) or ():  # stderr written before the trailer
                        write(name, out.feed(data) if name == "stdout" else data)
                    after = (("stdout", out.after),) if out.after else ()
                    return Framed(trailer=parse_trailer(out.trailer), after=after)
                if err.done:
                    after = tuple((name, s.after) for name, s in (("stdout", out), ("stderr", err)) if s.after)
                    return Framed(trailer=parse_trailer(out.trailer), after=after)
        chunks = stream.read(deadline)
        if chunks is None:
            write("stdout", stdout.flush())
            if err is not None:
                write("stderr", err.flush())
            return Framed()
        if not chunks:
            return Framed(timed_out=True)


class _AckedStdout:
    """Stdout's scanner ``out`` behind one that takes ``ack`` out of the stream and calls
    ``send`` once it has passed; bytes before and after it go on to ``out`` in order."""

    def __init__(self, out: MarkerScanner, ack: bytes, send: Callable[[], None]) -> None:
        self.out, self.send = out, send
        self.scanner = MarkerScanner(ack, trailer=False)

    def feed(self, data: bytes) -> bytes:
        scanner = self.scanner
        if scanner.done:
            return self.out.feed(data)
        passed = scanner.feed(data)
        if not scanner.done:
            return self.out.feed(passed)
        self.send()
        after, scanner.after = scanner.after, b""
        return self.out.feed(passed) + self.out.feed(after)

    def release(self) -> bytes:
        """Pass on what is held back as a possible start of ``ack`` (the stream ended, or
        the call did: then it lands behind the end markers, in ``out.after``)."""
        return self.out.feed(self.scanner.flush())

    def flush(self) -> bytes:
        return self.release() + self.out.flush()


def _send_input(stream: ByteStream, data: bytes, deadline: float | None) -> None:
    """Send a call's raw input (see :func:`~envlayer.execution.shell_script.script_call`)
    by ``deadline``: :class:`WriteTimedOut` propagates (the call is then a timeout). A
    stream that broke meanwhile is left to the read that follows (it sees the end, or the
    trailer saying the input was lost)."""
    try:
        write_by(stream, data, deadline)
    except OSError:
        log.debug("session: the stream broke while a call's input was sent", exc_info=True)


def status_unknown(what: str) -> BackendUnavailable:
    """The error for a command whose process ended without the sandbox reporting a status."""
    return BackendUnavailable(
        f"{what} ended during the command and the sandbox did not report its exit status; "
        "the command may or may not have finished",
        hint="check its effects before running it again; the next call starts afresh",
    )


def output_lost(what: str) -> BackendUnavailable:
    """The error for a command that finished but whose output did not arrive in full (the
    sandbox's transport closed the stream before delivering it): never report the part
    that came as the whole."""
    return BackendUnavailable(
        f"{what} finished but its output did not arrive in full (the stream was closed before "
        "delivering it, as happens under heavy load); the command ran and was NOT re-run",
        hint="check its effects, then read what it produced again (e.g. from a file)",
    )


def _ended_idle_too_often() -> BackendUnavailable:
    return BackendUnavailable(
        f"the sandbox ended the session shell as idle before it started the command, {IDLE_END_RETRIES + 1} "
        "times in a row: its idle limit for session shells is shorter than a command takes to reach the shell; "
        "the command never ran",
        hint="raise the backend's idle limit for session shells (for Modal, `session_idle_exit`)",
    )


class PersistentShell:
    """One session shell over a :class:`ByteStream`; see the module docstring.

    Not thread-safe: the owner runs one command at a time (other threads may use another
    exec mode, as Docker does). ``start_dir`` is where a new shell starts when none ran
    before; afterwards a restart goes to the last directory the shell reported.
    """

    def __init__(
        self,
        open_stream: Callable[[], ByteStream],
        *,
        run_aside: Callable[[list[str]], object],
        shell: str = "/bin/sh",
        start_dir: str | None = None,
        upload: Callable[[str, bytes], None] | None = None,
        ended_idle: Callable[[], bool] | None = None,
    ) -> None:
        self.open_stream = open_stream
        self.run_aside = run_aside
        self.ended_idle = ended_idle
        self.shell = shell
        self.upload = upload
        self.start_dir = start_dir
        self.session_id = uuid.uuid4().hex
        self.state_dir = ""
        """The session's private directory in the sandbox, as the shell reported it."""
        self.stream: ByteStream | None = None
        self._ends_seen_on_write = False
        """Writing to the stream of a gone shell raises :class:`StreamEnded` (see
        :class:`~envlayer.execution.streams.ByteStream`)."""
        self._style = ANY_SHELL
        """How calls are written for this shell (see :class:`CallStyle`): a stderr marker
        unless the stream says it ``keeps_write_order`` (see
        :class:`~envlayer.execution.streams.ByteStream`), the command run as a function's
        body where the handshake says so."""
        self.pid = 0
        self.cwd: str | None = None
        """The shell's working directory after the last command (None before the first)."""
        self.last_used = 0.0
        self._clock: tuple[int, float] | None = None
        self._killed = False
        self._holds_state = False
        """The current shell holds state a new one would lose: it ran a command, or it
        continued the state an ``exit`` saved."""
        self._continues_exit = False
        self._behind: list[tuple[str, bytes]] = []
        """Output read behind the last command's end markers: the next call's first output."""

    @property
    def alive(self) -> bool:
        """True while a started shell is believed to be running."""
        return self.stream is not None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> str | None:
        """Start a shell (closing any previous one) and run the handshake.

        Returns ``None``, or an error text when ``start_dir`` does not exist on the very
        first start (the caller reports it as the command's exit 126). Raises
        :class:`ShellStartError` when the shell does not answer, or the stream's
        :class:`BackendUnavailable` when the transport fails.
        """
        self._drop_stream()
        self._holds_state, self._continues_exit = self._continues_exit, False
        first = self.cwd is None
        target = self.cwd or self.start_dir
        stream = self.open_stream()
        self.stream = stream
        self._ends_seen_on_write = getattr(stream, "ends_seen_on_write", False)
        marked = not getattr(stream, "keeps_write_order", False)
        self._style = CallStyle(stderr_marker=marked)
        collector = OutputCollector(4096, "head")
        try:
            stream.write(init_script(session_id=self.session_id, start_dir=target, stderr_marker=marked))
            outcome = self._run_on(
                stream,
                ExecRequest.build(handshake_command(), timeout=_START_TIMEOUT),
                collector,
                stdin_path=None,
            )
        except OSError as exc:
            self._drop_stream()
            raise ShellStartError(
                f"the shell {self.shell} closed its input at start: {exc}", hint="check the `shell` option"
            ) from exc
        words = collector.buffers["stdout"].getvalue().split(b" ", 3)
        if outcome.timed_out or outcome.exit_code != 0 or len(words) != 4 or self.stream is None:
            err = collector.buffers["stderr"].getvalue().decode(errors="replace").strip()
            self._drop_stream()
            if not outcome.timed_out and outcome.exit_code in _NOT_EXECUTED:
                raise shell_missing(self.shell) from None
            raise ShellStartError(
                f"the session shell {self.shell} did not start ({err or outcome})",
                hint="check that the `shell` option names a POSIX sh that exists in the sandbox",
            )
        self.pid = int(words[0])
        self._style = CallStyle(stderr_marker=marked, function_eval=words[2] == b"1", shaken=True)
        self.state_dir = words[3].decode("utf-8", "surrogateescape")
        if words[1] == b"1" and target:
            if first:
                self.cwd = None
                self.close()
                return f"working directory does not exist: {target}\n"
            log.warning("session: working directory %s is gone; the new shell is in %s", target, self.cwd)
        return None

    def close(self) -> None:
        """End the shell: a live one is asked to exit and remove its private directory;
        otherwise the directory is removed through ``run_aside`` (best effort). Idempotent."""
        stream = self.stream
        if stream is not None:
            try:
                stream.write(close_script())
            except OSError:
                pass
            self._drop_stream()
        elif self.pid and self.state_dir:
            try:
                self.run_aside([self.shell, "-c", 'rm -rf -- "$1"', "envlayer-rm", self.state_dir])
            except Exception:
                log.debug("session: could not remove %s", self.state_dir, exc_info=True)
        self.pid = 0

    def abandon(self) -> None:
        """Forget a shell found dead from outside (e.g. its exec no longer runs): the next
        call starts a new one, and its result says state was lost."""
        self._killed = True
        self._drop_stream()

    def _leftover(self) -> list[tuple[str, bytes]]:
        """What one look at the stream of a shell found gone finds (output its background
        jobs wrote before it ended; one look, so a job still flooding it cannot hold the
        call): the next try's first output."""
        return (self.stream.read(time.monotonic()) if self.stream is not None else None) or []

    def _drop_stream(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.close()

    # --- commands -------------------------------------------------------------------------

    def run_request(self, request: ExecRequest, options: BaseOptions, *, prelude: str = "") -> ExecResult:
        """Run ``request`` (``prelude`` first, in the same write) and return its result,
        output capped by ``options``: what a backend's session does with one call."""
        collector = OutputCollector.for_request(request, options)
        outcome = self.run(request, collector, prelude=prelude)
        return collector.result(request, outcome.exit_code, timed_out=outcome.timed_out, recovered=outcome.recovered)

    def run(self, request: ExecRequest, collector: OutputCollector, *, prelude: str = "") -> ShellOutcome:
        """Run ``request`` in the shell, starting (or restarting) it first if needed.

        A shell found gone before the command was sent (its stream already ended), or
        ended as idle before it started it (``ended_idle``), is restarted and the command
        runs in the new one: it provably had not started.
        What background jobs wrote since the last call (also what was read behind its
        end markers) comes first in this call's output: none of it is dropped.
        Raises :class:`BackendUnavailable` (from the stream) when the transport is lost;
        ``KeyboardInterrupt`` and other exceptions from the read (or from the output
        callback) propagate after the command's tree and the shell were killed.
        """
        pending, self._behind = self._behind, []
        found_gone, idle_ends = False, 0
        while True:
            try:
                return self._attempt(request, collector, prelude, pending)
            except StreamEnded:
                # gone before the command went out (found by the write, or the check for an
                # ended stream raced the end): the command runs in a new shell
                if found_gone:
                    raise status_unknown("the new session shell") from None
                found_gone = True
                self._killed = True
                pending += self._leftover()
                self._drop_stream()
            except _EndedIdle:
                idle_ends += 1
                if idle_ends > IDLE_END_RETRIES:
                    raise _ended_idle_too_often() from None

    def _attempt(
        self, request: ExecRequest, collector: OutputCollector, prelude: str, pending: list[tuple[str, bytes]]
    ) -> ShellOutcome:
        """One try of :meth:`run`; raises :class:`StreamEnded` when the shell was found
        gone as the command was being sent (none of it went out)."""
        if self.stream is not None and (collector.on_output is not None or not self._ends_seen_on_write):
            # Output of earlier background jobs, or EOF. Needed for order only when the output
            # is streamed (a pipe keeps each stream's own order; an epoll-based stream may
            # still list the fds the last call's final read found ready, and a look now resets
            # that, so the callback sees the streams in the order they were written), and to
            # find a gone shell only when writing to it does not tell (``ends_seen_on_write``).
            early = self.stream.read(time.monotonic())
            if early is None:
                self._killed = True
                self._drop_stream()
            else:
                pending += early
        recovered = ""
        if self.stream is None:
            if self._killed:
                recovered = RESTARTED_AFTER_KILL
            error = self.start()
            if error is not None:
                collector.write("stderr", error.encode())
                return ShellOutcome(126, shell_ended=True)
            self._killed = False
            # The handshake's last read may have found both outputs ready; an epoll-based
            # stream keeps them on its ready list in that order and would report the
            # command's output in it. A look now (as before every later command) resets that,
            # so the output comes in the order it was written. An end seen here shows at the write.
            pending += self.stream.read(time.monotonic()) or []
        stream = self.stream
        assert stream is not None
        stdin, stdin_path, raw_stdin = request.stdin, None, None
        if stdin is not None:
            # up to PRINTF_SMALL bytes in the call's text; more through the backend's upload
            # where it has one (see the module docstring), else raw behind the text
            stdin_path = f"{self.state_dir}/in-{request.exec_id}"
            if len(stdin) > PRINTF_SMALL:
                if self.upload is None:
                    raw_stdin = stdin
                elif not self._uploaded(stdin_path, stdin, request.deadline):
                    return ShellOutcome(124, timed_out=True, recovered=recovered)
        try:
            outcome = self._run_on(
                stream,
                request,
                collector,
                stdin_path=stdin_path,
                raw_stdin=raw_stdin,
                prelude=prelude,
                pending=pending,
                user_command=True,
            )
        except _EndedIdle:
            self._killed = self._holds_state or bool(recovered)
            raise
        self._holds_state = True
        return (
            ShellOutcome(outcome.exit_code, outcome.timed_out, outcome.shell_ended, recovered) if recovered else outcome
        )

    def _uploaded(self, path: str, data: bytes, deadline: float | None) -> bool:
        """Whether the backend's ``upload`` of a call's stdin to ``path`` finished by
        ``deadline`` (waited for on a thread, :func:`~envlayer.execution.streams.call_within`:
        an upload hook takes no deadline). When it did not, nothing was sent to the shell:
        the call is a timeout and the shell goes on (a late upload's file stays in the
        session's private directory, removed with it)."""
        assert self.upload is not None
        if deadline is None:
            self.upload(path, data)
            return True
        try:
            call_within(lambda: self.upload(path, data), deadline)  # type: ignore[misc]
        except WriteTimedOut:
            log.warning("session: the upload of a call's stdin did not finish before its timeout; it did not run")
            return False
        return True

    def _run_on(
        self,
        stream: ByteStream,
        request: ExecRequest,
        collector: OutputCollector,
        *,
        stdin_path: str | None,
        raw_stdin: bytes | None = None,
        prelude: str = "",
        pending: list[tuple[str, bytes]] | None = None,
        user_command: bool = False,
    ) -> ShellOutcome:
        """Send ``request`` (its stdin, when it has one, staged at ``stdin_path``: from
        ``raw_stdin`` sent behind the text, or in the text when it is small, or uploaded
        before) and read its outcome (see :meth:`_ended` for ``user_command``: the shell's
        own handshake is not asked about)."""
        seed = new_seed()
        marker = marker_of(seed)
        if isinstance(request, ScriptRequest):
            raw = request.raw_input
            script = script_call(
                command_text(request.command),
                seed=seed,
                exec_id=request.exec_id,
                raw_input=None if raw is None else len(raw),
                prelude=prelude,
                in_shell=request.in_shell,
                style=self._style,
            )
        else:
            raw = raw_stdin
            script = self._call_text(request, seed, stdin_path, prelude, raw)
        on_ack = None if raw is None else (ack_of(seed), lambda: _send_input(stream, raw, request.deadline))
        sent_at = time.monotonic()
        self.last_used = sent_at
        try:
            try:
                stream.write(script)
            except StreamEnded:
                raise
            except OSError:
                return self._ended(stream, user_command)
            if request.cancel is None:  # most calls: no context to enter
                framed = read_framed(
                    stream, marker, collector, request.deadline, pending, on_ack, self._style.stderr_marker
                )
            else:
                with request.cancel.on_cancel(lambda: self._kill_from_elsewhere(request, sent_at)):
                    framed = read_framed(
                        stream, marker, collector, request.deadline, pending, on_ack, self._style.stderr_marker
                    )
            timed_out = framed.timed_out
        except StreamEnded:
            raise  # nothing was sent: nothing to kill
        except WriteTimedOut:
            timed_out = True  # the shell did not take the call's input by the deadline
        except BaseException:
            if self.stream is stream:
                self._kill(stream, request, collector, sent_at)
            raise
        if timed_out:
            self._kill(stream, request, collector, sent_at)
            return ShellOutcome(124, timed_out=True, shell_ended=True)
        if framed.trailer is None:
            return self._ended(stream, user_command)
        self._behind = list(framed.after)
        return self._finished(framed.trailer)

    def _call_text(
        self, request: ExecRequest, seed: int, stdin_path: str | None, prelude: str, raw: bytes | None
    ) -> bytes:
        """The script of a user's command (see :func:`call_script`): its stdin up to
        :data:`~envlayer.execution.shell_script.PRINTF_SMALL` bytes in the text, else
        ``raw`` behind it, or uploaded before."""
        stdin = request.stdin
        if stdin is None and request.cwd is None and not request.env and not request.unset_env and not prelude:
            return plain_call_script(request.command, seed, request.exec_id, self._style)
        inline = stdin if stdin is not None and len(stdin) <= PRINTF_SMALL else None
        return call_script(
            request.command,
            seed=seed,
            exec_id=request.exec_id,
            cwd=request.cwd,
            env=request.env,
            unset=request.unset_env or (),
            stdin_path=stdin_path,
            stdin_inline=inline,
            stdin_raw=None if raw is None else len(raw),
            prelude=prelude,
            style=self._style,
        )

    def _finished(self, trailer: Trailer) -> ShellOutcome:
        self.pid, self.cwd = trailer.pid, trailer.pwd
        if trailer.input_lost:
            log.warning("session: the shell could not take a call's input and ended itself; the next call starts anew")
            self._killed = True  # the next call's result says the shell was restarted
            self._drop_stream()
            return ShellOutcome(trailer.exit_code, shell_ended=True)
        if trailer.uptime_cs is not None:
            self._clock = (trailer.uptime_cs, time.monotonic())
        if trailer.shell_exiting:
            self._continues_exit = True  # the next shell restores what this one saved
            self._drop_stream()  # the shell saved its state and is exiting
            return ShellOutcome(trailer.exit_code, shell_ended=True)
        code = trailer.exit_code
        return _FINISHED[code] if 0 <= code < len(_FINISHED) else ShellOutcome(code)

    def _ended(self, stream: ByteStream, user_command: bool = False) -> ShellOutcome:
        """The stream ended before the trailer: the shell is gone without its trap, or the
        transport is lost (then ``exit_status`` raises). Raises :class:`_EndedIdle` when
        the sandbox says it ended the shell as idle before a ``user_command`` started."""
        if user_command and self.ended_idle is not None and not self._killed and self.ended_idle():
            self._drop_stream()
            raise _EndedIdle
        self._killed = True
        try:
            code = stream.exit_status(_EXIT_STATUS_WAIT)
        finally:
            self._drop_stream()
        if code is None:
            raise status_unknown("the session shell")
        return ShellOutcome(code, shell_ended=True)

    def _kill_from_elsewhere(self, request: ExecRequest, sent_at: float) -> None:
        """Cancellation (another thread): kill the command's tree and the shell through
        ``run_aside``; the reading thread then sees the stream end, keeps the output read
        so far, and the next call starts a new shell."""
        self._killed = True
        self.run_aside(
            kill_script_argv(
                self.shell,
                request.exec_id,
                shell_pid=self.pid,
                since_cs=self._since_cs(sent_at),
                grace=KILL_GRACE_SECONDS,
            )
        )

    def _kill(self, stream: ByteStream, request: ExecRequest, collector: OutputCollector, sent_at: float) -> None:
        """Kill the command's tree and the shell through ``run_aside`` while the stream
        keeps being drained; then drop the stream."""
        argv = kill_script_argv(
            self.shell, request.exec_id, shell_pid=self.pid, since_cs=self._since_cs(sent_at), grace=KILL_GRACE_SECONDS
        )
        self._killed = True

        def kill() -> None:
            try:
                self.run_aside(argv)
            except Exception:
                log.warning("session: the kill of command %s failed", request.exec_id, exc_info=True)

        try:
            drain_while(stream, collector, kill)
        finally:
            self._drop_stream()

    def _since_cs(self, sent_at: float) -> int:
        """The sandbox clock (centiseconds since boot) at or before which the command sent
        at local time ``sent_at`` cannot have started; 0 when unknown. The last trailer
        read the clock before we received it, so it is at least that reading plus the local
        time elapsed since; one tick of margin covers truncation."""
        if self._clock is None:
            return 0
        remote_cs, received_at = self._clock
        return max(0, remote_cs + int((sent_at - received_at) * 100) - 1)
