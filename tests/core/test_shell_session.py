"""The persistent-shell protocol (envlayer.execution.shell_session) over real local shells.

A small environment runs its commands through ``PersistentShell`` over a
``ProcessStream`` to a real dash, bash and busybox sh on this machine, with the kill
script run as a real second process; the public conformance kit (session semantics,
floods, bad input included) runs against it, plus the protocol's own edge cases.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlayer.capabilities import Capability
from envlayer.errors import BackendUnavailable
from envlayer.execution.collector import OutputCollector
from envlayer.execution.shell_script import INPUT_LOST, PRINTF_SMALL, ack_of, marker_of
from envlayer.execution.shell_session import (
    IDLE_END_RETRIES,
    RESTARTED_AFTER_KILL,
    PersistentShell,
    ScriptRequest,
    read_framed,
)
from envlayer.execution.streams import ByteStream, ProcessStream, StreamEnded, WriteTimedOut, call_within
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer.sandbox import files
from envlayer.testing import EnvironmentConformance, ExecContractConformance
from envlayer.testing.fixtures import cleaned_up, returned_within

SHELLS = [s for s in (["dash"], ["bash", "--posix"], ["busybox", "sh"]) if shutil.which(s[0])]


def _run_aside(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, timeout=30, check=False)


class SessionOverPipes(LocalEnvironment):
    """Local files, commands through the core's persistent-shell protocol."""

    capabilities = frozenset({Capability.STREAMING, Capability.PERSISTENT_SESSION, Capability.UNSET_ENV})
    shell_argv: list[str] = ["dash"]

    def __init__(self, options: LocalOptions) -> None:
        super().__init__(options)
        self.session = PersistentShell(
            lambda: ProcessStream.spawn(self.shell_argv, cwd=self.cwd),
            run_aside=_run_aside,
            start_dir=self.cwd,
        )

    def handle_request(self, request: ExecRequest) -> ExecResult:
        """Every call through the protocol (never one-shot, never a recovery retry)."""
        return self.run_shell(self.session, request)

    def cleanup(self) -> None:
        self.session.close()
        super().cleanup()


@pytest.fixture(params=SHELLS, ids=[s[0] for s in SHELLS])
def session_env(request: pytest.FixtureRequest) -> Iterator[SessionOverPipes]:
    with tempfile.TemporaryDirectory(prefix="envlayer-session-", ignore_cleanup_errors=True) as workdir:
        environment = SessionOverPipes(LocalOptions(cwd=workdir, timeout=60, max_output_bytes=1_000_000))
        environment.shell_argv = request.param
        yield from cleaned_up(environment)


class TestProtocolConformance(EnvironmentConformance, ExecContractConformance):
    """The whole kit, session semantics included, on each shell."""

    kills_escaped_processes = True

    @pytest.fixture
    def env(self, session_env: SessionOverPipes) -> SessionOverPipes:
        return session_env


def test_marker_split_across_reads_and_no_trailing_newline(session_env: SessionOverPipes) -> None:
    result = session_env.exec("printf 'a%.0s' $(seq 1 70000); printf tail")
    assert result.stdout == b"a" * 70000 + b"tail"


def test_background_job_output_goes_to_a_later_call_never_lost(session_env: SessionOverPipes) -> None:
    assert session_env.exec("(sleep 0.3; echo late) &").ok
    seen = b""
    for _ in range(20):
        seen += session_env.exec("sleep 0.1").stdout
        if b"late" in seen:
            break
    assert b"late" in seen


def test_shell_killed_from_outside_reports_its_status(session_env: SessionOverPipes) -> None:
    result = session_env.exec("kill -9 $$")
    assert result.exit_code == 137
    after = session_env.exec("echo back")
    assert after.stdout == b"back\n" and after.recovered == RESTARTED_AFTER_KILL


def test_a_shell_killed_between_calls_runs_the_next_command_in_a_new_shell_output_kept(
    session_env: SessionOverPipes,
) -> None:
    """The shell dies between two calls, after a background job of it wrote: the next
    command runs in a new shell (it provably had not started), after that output."""
    assert session_env.exec("(sleep 0.3; echo late) &").ok
    os.kill(session_env.session.pid, signal.SIGKILL)
    time.sleep(0.8)  # the job wrote and ended: nothing holds the old shell's pipes
    result = session_env.exec("echo back")
    assert (result.exit_code, result.stdout) == (0, b"late\nback\n")
    assert result.recovered == RESTARTED_AFTER_KILL


def test_errors_read_as_the_shell_itself_says_them(session_env: SessionOverPipes) -> None:
    """A command the session runs fails with the words its shell uses for a script, not
    those of the ``eval`` that runs it (``sh: 1: eval: foo: not found``), from the first
    call on (the handshake says which shells need the function form)."""
    missing = "envlayer_no_such_command_x"
    plain = subprocess.run([*session_env.shell_argv, "-c", missing], capture_output=True, text=True).stderr
    for _ in range(2):
        said = session_env.exec(missing).stderr_text
        assert "eval" not in said and missing in said
        assert said.split(missing, 1)[1] == plain.split(missing, 1)[1]


def test_stderr_written_last_belongs_to_its_own_call_whole(session_env: SessionOverPipes) -> None:
    """Local pipes keep the order of writes, so the shell prints no stderr marker: what a
    command writes on stderr just before it ends is still its own, all of it."""
    for size in (1, 4096, 65536, 200_000):
        result = session_env.exec(f"printf out; head -c {size} /dev/zero | tr '\\0' e >&2")
        assert (result.stdout, result.stderr) == (b"out", b"e" * size)
    for n in range(30):
        assert session_env.exec(f"echo {n} >&2").stderr == f"{n}\n".encode()


class _UnorderedPipes(ProcessStream):
    """Pipes that do not promise the order of writes across stdout and stderr (as a
    transport that forwards each stream on its own): the shell marks stderr too."""

    keeps_write_order = False


def test_a_stream_without_write_order_gets_a_stderr_marker(tmp_path: Path) -> None:
    env = SessionOverPipes(LocalOptions(cwd=str(tmp_path), timeout=60))
    env.session.open_stream = lambda: _UnorderedPipes.spawn(["dash"], cwd=env.cwd)
    try:
        for n in range(10):
            result = env.exec(f"echo out{n}; echo err{n} >&2")
            assert (result.stdout, result.stderr) == (f"out{n}\n".encode(), f"err{n}\n".encode())
        assert env.session._style.stderr_marker
    finally:
        env.cleanup()


class _WriteWithoutDeadline(ProcessStream):
    """A stream written to the contract from before writes took a deadline."""

    def write(self, data: bytes) -> None:  # type: ignore[override]
        super().write(data)


def test_a_stream_whose_write_takes_no_deadline_still_takes_raw_input(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = SessionOverPipes(LocalOptions(cwd=str(tmp_path), timeout=60))
    env.session.open_stream = lambda: _WriteWithoutDeadline.spawn(["dash"], cwd=env.cwd)
    env.session.upload = None  # a command's stdin over 4 KiB then goes raw behind its script
    try:
        with caplog.at_level("WARNING", logger="envlayer.session"):
            for _ in range(2):
                assert env.exec("wc -c", stdin=b"x" * 10_000).stdout_text.strip() == "10000"
        said = [r.getMessage() for r in caplog.records if "takes no deadline" in r.getMessage()]
        assert len(said) == 1 and "_WriteWithoutDeadline" in said[0]
    finally:
        env.cleanup()


def test_an_upload_of_stdin_that_outlasts_the_timeout_is_a_timeout_and_nothing_runs(tmp_path: Path) -> None:
    """A backend's ``upload`` hook takes no deadline: the session waits for it until the
    call's, then the call is a timeout; nothing was sent, so the command never ran and the
    shell goes on."""
    env = SessionOverPipes(LocalOptions(cwd=str(tmp_path), timeout=60))
    release = threading.Event()
    env.session.upload = lambda path, data: release.wait(60)
    try:
        stdin = b"x" * (PRINTF_SMALL + 1)
        result = returned_within(30, lambda: env.exec("touch ran; cat >/dev/null", stdin=stdin, timeout=1), release.set)
        assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b"")
        after = env.exec("ls; echo back")
        assert (after.stdout, after.recovered) == (b"back\n", ""), "nothing ran, and the shell was not restarted"
    finally:
        release.set()
        env.cleanup()


def test_writing_to_a_gone_process_says_none_of_it_went_out() -> None:
    stream = ProcessStream.spawn(["true"])
    try:
        stream.proc.wait(10)
        with pytest.raises(StreamEnded):
            stream.write(b"echo never\n")
    finally:
        stream.close()


class _EndedUnnoticed:
    """The stream of a shell that ended just after the check for an ended stream looked:
    that read still finds nothing, and the write finds the stream gone with none of the
    command sent (as an SSH channel whose connection dropped a moment earlier)."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream

    def read(self, deadline: float | None) -> list[tuple[str, bytes]]:
        return []

    def write(self, data: bytes) -> None:
        raise StreamEnded("the channel had closed")

    def exit_status(self, wait: float) -> int | None:
        return None

    def close(self) -> None:
        self.stream.close()


def test_a_shell_found_gone_while_sending_runs_the_command_in_a_new_shell(session_env: SessionOverPipes) -> None:
    session_env.exec("cd /tmp").check()
    shell = session_env.session
    assert shell.stream is not None
    shell.stream = _EndedUnnoticed(shell.stream)  # type: ignore[assignment]
    result = session_env.exec("echo again; pwd")
    assert result.stdout == b"again\n/tmp\n"
    assert result.recovered == RESTARTED_AFTER_KILL


class _LateReader(ProcessStream):
    """A reader that looks only every 0.2 s (as one starved of CPU on a loaded machine):
    each read finds everything written since the last one."""

    def read(self, deadline: float | None) -> list[tuple[str, bytes]] | None:
        time.sleep(0.2)
        return super().read(deadline)


class _EndedAsIdle(ProcessStream):
    """A shell that a sandbox's idle watchdog ends just before it reads a command that
    contains :attr:`late` (the first :attr:`ends` such commands): the process is killed
    and the command never written, as when it arrives after the watchdog's kill."""

    late = b"LATE"
    ends = 0
    ended: list[int] = []

    def write(self, data: bytes) -> None:
        if self.late in data and len(_EndedAsIdle.ended) < self.ends:
            _EndedAsIdle.ended.append(self.pid)
            self.proc.kill()
            self.proc.wait()
            return
        super().write(data)


def _idle_ending_shell(ends: int) -> PersistentShell:
    _EndedAsIdle.ends, _EndedAsIdle.ended = ends, []
    return PersistentShell(
        lambda: _EndedAsIdle.spawn(["dash"]), run_aside=_run_aside, ended_idle=lambda: bool(_EndedAsIdle.ended)
    )


def test_a_command_the_shell_was_ended_idle_before_reading_runs_in_a_new_shell() -> None:
    """Output a background job wrote before the call comes once, however many shells the
    command needed; the first call had no state to lose (``recovered`` empty), a later one
    had (exported variables: the new shell has only the configured ones)."""
    shell = _idle_ending_shell(ends=2)
    try:
        collector = OutputCollector(1000, "head")
        outcome = shell.run(ExecRequest.build("echo LATE"), collector)
        assert (outcome.exit_code, outcome.recovered, collector.buffers["stdout"].getvalue()) == (0, "", b"LATE\n")
        assert len(_EndedAsIdle.ended) == 2
        shell.run(ExecRequest.build("export A=1; (sleep 0.2; echo bg) &"), OutputCollector(1000, "head"))
        time.sleep(0.5)
        _EndedAsIdle.ends += 1
        collector = OutputCollector(1000, "head")
        outcome = shell.run(ExecRequest.build("echo LATE ${A-unset}"), collector)
        assert collector.buffers["stdout"].getvalue() == b"bg\nLATE unset\n"
        assert (outcome.exit_code, outcome.recovered, len(_EndedAsIdle.ended)) == (0, RESTARTED_AFTER_KILL, 3)
    finally:
        shell.close()


def test_a_shell_ended_idle_before_every_try_fails_the_call_with_what_to_raise() -> None:
    shell = _idle_ending_shell(ends=100)
    try:
        with pytest.raises(BackendUnavailable, match="never ran") as caught:
            shell.run(ExecRequest.build("echo LATE"), OutputCollector(1000, "head"))
        assert "session_idle_exit" in caught.value.hint
        assert len(_EndedAsIdle.ended) == 1 + IDLE_END_RETRIES
    finally:
        shell.close()


def test_a_new_shells_first_command_delivers_its_output_in_the_order_written() -> None:
    # The shell's start-up message (stderr) made the handshake's read find stderr ready
    # before stdout; epoll keeps both on its ready list in that order, and the first
    # command's read, finding both ready again, reported them so: its stderr first (a CI
    # flake of the terminal tool's merged output). Later commands were right: the look
    # for background output before each one reset the list.
    with tempfile.TemporaryDirectory(prefix="envlayer-session-") as workdir:
        argv = ["dash", "-c", "echo starting >&2; exec dash"]
        shell = PersistentShell(lambda: _LateReader.spawn(argv, cwd=workdir), run_aside=_run_aside)
        try:
            for _ in range(2):
                order: list[str] = []
                collector = OutputCollector(
                    1000, "head", on_output=lambda stream, chunk, order=order: order.append(stream)
                )
                outcome = shell.run(ExecRequest.build("echo out; echo err >&2"), collector)
                assert (outcome.exit_code, order) == (0, ["stdout", "stderr"])
                shell.close()  # the next run starts a new shell
        finally:
            shell.close()


def test_users_exit_trap_does_not_stop_the_session(session_env: SessionOverPipes) -> None:
    session_env.exec("trap 'echo bye' EXIT").check()
    result = session_env.exec("exit 4")
    assert result.exit_code == 4
    assert session_env.exec("echo on").stdout == b"on\n"


def test_exec_replacing_the_shell_gives_the_programs_status(session_env: SessionOverPipes) -> None:
    result = session_env.exec("exec sh -c 'exit 9'")
    assert result.exit_code == 9
    assert session_env.exec("echo on").stdout == b"on\n"


def test_large_stdin_inline(session_env: SessionOverPipes) -> None:
    payload = bytes(range(256)) * 400
    assert session_env.exec("cat", stdin=payload).stdout == payload


def test_missing_start_dir_is_exit_126() -> None:
    missing = tempfile.mkdtemp(prefix="envlayer-gone-")
    shutil.rmtree(missing)
    shell = PersistentShell(lambda: ProcessStream.spawn(["dash"]), run_aside=_run_aside, start_dir=missing)
    env = LocalEnvironment(LocalOptions())
    request = env.make_request("pwd")
    collector = OutputCollector(1000, "head")
    outcome = shell.run(request, collector)
    assert outcome.exit_code == 126 and missing.encode() in collector.buffers["stderr"].getvalue()
    shell.close()


def test_background_job_keeps_no_handle_on_the_session_stream(session_env: SessionOverPipes) -> None:
    """A job whose output goes elsewhere holds none of the session's fds: when the shell
    is replaced by a program that exits, the stream ends and the call returns that
    program's status (it used to wait for the job, here until the timeout)."""
    pid = session_env.exec("sleep 60 >/dev/null 2>&1 & echo $!").stdout_text.strip()
    try:
        result = session_env.exec("exec sh -c 'exit 9'", timeout=20)
        assert (result.exit_code, result.timed_out) == (9, False)
        assert session_env.exec(f"kill -0 {pid} && echo running").stdout == b"running\n"
    finally:
        session_env.exec(f"kill {pid}")


def test_commands_cannot_take_over_the_protocol_fds(session_env: SessionOverPipes) -> None:
    session_env.exec("exec 7>/dev/null 8>/dev/null").check()
    result = session_env.exec("echo still-framed", timeout=20)
    assert (result.stdout, result.timed_out, result.recovered) == (b"still-framed\n", False, "")


def test_background_output_comes_whole_in_later_calls(session_env: SessionOverPipes) -> None:
    """Output a job writes while calls come and go is never dropped (also when it arrives
    in the same read as a call's end markers) and never mixed into a line of a call."""
    started = session_env.exec("(i=0; while [ $i -lt 40 ]; do i=$((i + 1)); echo tick$i; sleep 0.02; done) &")
    # the job may print its first tick before the starting call's end markers: that is its output
    ticks = started.check().stdout_text.splitlines()
    for n in range(3000):
        lines = session_env.exec(f"sleep 0.01; echo mine{n}").check().stdout_text.splitlines()
        assert [line for line in lines if not line.startswith("tick")] == [f"mine{n}"], lines
        ticks += [line for line in lines if line.startswith("tick")]
        if "tick40" in ticks:
            break
    assert ticks == [f"tick{i}" for i in range(1, 41)]


# --- raw input: a file call's bytes behind its command (ScriptRequest.raw_input) ---------


def _take(env: SessionOverPipes, script: str, data: bytes, timeout: float = 60) -> ExecResult:
    request = dataclasses.replace(ScriptRequest.build(script, timeout=timeout), raw_input=data)
    return env.run_shell(env.session, request)


def _write_script(path: str) -> str:
    """The files module's session write, taking its data as raw input."""
    return files._script(files.write_script("__el_take"), [path, "", "cut"])


def test_raw_input_arrives_byte_for_byte_and_the_session_keeps_its_state(session_env: SessionOverPipes) -> None:
    session_env.exec("kept=1; cd /tmp").check()
    data = bytes(range(256)) * 300 + b"\ntouch pwned\necho oops\n"
    target = os.path.join(session_env.cwd, "out.bin")
    result = _take(session_env, _write_script(target), data)
    assert (result.exit_code, result.stdout) == (0, b""), result
    with open(target, "rb") as fh:
        assert fh.read() == data
    after = session_env.exec('echo "$kept $PWD"')
    assert (after.stdout, after.recovered) == (b"1 /tmp\n", "")
    assert not os.path.exists("/tmp/pwned") and not os.path.exists(os.path.join(session_env.cwd, "pwned"))


def test_input_the_shell_cannot_take_is_never_run_and_the_restart_is_told(session_env: SessionOverPipes) -> None:
    session_env.exec("ulimit -f 0").check()  # head is killed by its first write (SIGXFSZ), taking a part
    pwned = os.path.join(session_env.cwd, "pwned")
    result = _take(session_env, _write_script(os.path.join(session_env.cwd, "f")), f"touch {pwned}\n".encode() * 5000)
    assert result.exit_code == INPUT_LOST, result
    after = session_env.exec("echo back; ulimit -f")
    assert (after.stdout, after.recovered) == (b"back\nunlimited\n", RESTARTED_AFTER_KILL)
    assert not os.path.exists(pwned), "bytes of a file were run as commands"
    assert os.listdir(session_env.cwd) == [], "a temp file was left behind"


def test_a_script_that_fails_before_taking_its_input_gets_none_sent(session_env: SessionOverPipes) -> None:
    session_env.exec("kept=1").check()
    pwned = os.path.join(session_env.cwd, "pwned")
    result = _take(session_env, "exit 7", f"touch {pwned}\n".encode())
    assert result.exit_code == 7
    after = session_env.exec('echo "$kept"')
    assert (after.stdout, after.recovered) == (b"1\n", "")
    assert not os.path.exists(pwned)


class _InterruptedMidInput(ProcessStream):
    """Ctrl-C while a large write is sent: half of it went out when the interrupt came."""

    def write(self, data: bytes, deadline: float | None = None) -> None:
        if len(data) > 100_000:
            super().write(data[: len(data) // 2], deadline)
            raise KeyboardInterrupt
        super().write(data, deadline)


def test_ctrl_c_mid_input_leaves_the_old_file_no_temp_and_says_the_shell_restarted(
    session_env: SessionOverPipes,
) -> None:
    session_env.session.open_stream = lambda: _InterruptedMidInput.spawn(  # type: ignore[method-assign]
        session_env.shell_argv, cwd=session_env.cwd
    )
    target = os.path.join(session_env.cwd, "f.txt")
    with open(target, "wb") as fh:
        fh.write(b"old")
    session_env.exec("true").check()
    with pytest.raises(KeyboardInterrupt):
        _take(session_env, _write_script(target), b"n" * 300_000)
    with open(target, "rb") as fh:
        assert fh.read() == b"old"
    assert os.listdir(session_env.cwd) == ["f.txt"], "a temp file was left behind"
    after = session_env.exec("echo back")
    assert (after.stdout, after.recovered) == (b"back\n", RESTARTED_AFTER_KILL)


class _Chunks:
    """A stream that returns the given reads, then ends."""

    def __init__(self, reads: list[list[tuple[str, bytes]]]) -> None:
        self.reads = reads

    def read(self, deadline: float | None) -> list[tuple[str, bytes]] | None:
        return self.reads.pop(0) if self.reads else None


@pytest.mark.parametrize("acked", [True, False], ids=["acked", "failed-first"])
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_the_acknowledgement_is_taken_out_once_and_no_byte_around_it_is_lost(step: int, acked: bool) -> None:
    seed = 2**39 + 5
    marker, ack = marker_of(seed), ack_of(seed)
    stdout = b"bg1=E" + (ack if acked else b"") + b"bg2" + marker + b"0 7 - /" + marker + b"late=E"
    reads = [[("stdout", stdout[i : i + step])] for i in range(0, len(stdout), step)] + [[("stderr", marker)]]
    sent: list[int] = []
    collector = OutputCollector(None, "head")
    framed = read_framed(_Chunks(reads), marker, collector, None, on_ack=(ack, lambda: sent.append(1)))  # type: ignore[arg-type]
    assert sent == ([1] if acked else [])
    assert collector.buffers["stdout"].getvalue() == b"bg1=Ebg2"
    assert framed.trailer is not None and framed.trailer.pid == 7
    assert dict(framed.after)["stdout"] == b"late=E"


def test_without_a_stderr_marker_stderr_read_right_after_the_trailer_is_the_commands() -> None:
    """A stream that keeps the order of writes has what was written on stderr before the
    trailer ready once the trailer is read, but not always in the same read (the process
    writes on while a read takes the pipes in turn: seen as a lost ``echo oops >&2`` after
    a 100 KB flood, on two CPUs). The reader always looks once more."""
    seed = 2**39 + 7
    marker = marker_of(seed)
    late = [("stderr", b"later")]
    reads = [[("stdout", b"out" + marker + b"0 7 - /" + marker)], [("stderr", b"oops\n")], late]
    collector = OutputCollector(None, "head")
    stream = _Chunks(reads)
    read_framed(stream, marker, collector, None, stderr_marked=False)  # type: ignore[arg-type]
    assert (collector.buffers["stdout"].getvalue(), collector.buffers["stderr"].getvalue()) == (b"out", b"oops\n")
    assert stream.reads == [late], "one look, no more"


# --- a command's stdin: raw behind its script over PRINTF_SMALL, within the call's deadline ---


def _staged(env: SessionOverPipes) -> list[str]:
    """The staged stdin files left in the session's private directory."""
    return glob.glob(os.path.join(env.session.state_dir, "in-*"))


@pytest.mark.parametrize("size", [0, 1, PRINTF_SMALL + 1, 100 * 1024, 3 << 20])
def test_binary_stdin_reaches_the_command_whole_and_no_byte_runs(session_env: SessionOverPipes, size: int) -> None:
    lines = b"\ntouch pwned\necho oops\n"
    data = (bytes(range(256)) * (size // 256 + 1) + lines)[-size:] if size else b""
    session_env.exec("kept=1").check()
    result = session_env.exec("sha256sum; od -An -tx1 -N4 /proc/self/fd/0; cd /", stdin=data)
    assert (result.exit_code, result.stderr) == (0, b""), result
    assert result.stdout.split(b" ", 1)[0].decode() == hashlib.sha256(data).hexdigest()
    assert result.stdout.split(b"\n", 1)[1] == b"" or result.stdout.count(b"\n") == 2
    after = session_env.exec('echo "$kept $PWD"')
    assert (after.stdout, after.recovered) == (b"1 /\n", ""), "the command ran in the shell itself"
    assert not os.path.exists(os.path.join(session_env.cwd, "pwned")) and _staged(session_env) == []


def test_raw_stdin_is_a_private_file_with_per_call_cwd_env_and_unset(session_env: SessionOverPipes) -> None:
    data = b"\0no newline at the end" * 1000
    session_env.exec("export DROP=1").check()
    result = session_env.exec(
        'stat -L -c %a /proc/self/fd/0; echo "$PWD ${ADD-} ${DROP-unset}"; wc -c',
        stdin=data,
        cwd="/tmp",
        env={"ADD": "added"},
        unset_env=["DROP"],
    )
    assert result.stdout == f"600\n/tmp added unset\n{len(data)}\n".encode(), result
    assert session_env.exec("echo $DROP; pwd").stdout == f"1\n{session_env.cwd}\n".encode()


def test_a_syntax_error_with_raw_stdin_stays_inside_the_call(session_env: SessionOverPipes) -> None:
    session_env.exec("kept=1").check()
    result = session_env.exec("echo 'unterminated", stdin=b"x" * 10_000)
    assert result.exit_code == 2 and result.stdout == b""
    after = session_env.exec('echo "$kept"')
    assert (after.stdout, after.recovered) == (b"1\n", "") and _staged(session_env) == []


def test_stdin_the_shell_cannot_take_is_never_run_and_the_restart_is_told(session_env: SessionOverPipes) -> None:
    session_env.exec("ulimit -f 0").check()  # head is killed by its first write (SIGXFSZ), taking a part
    pwned = os.path.join(session_env.cwd, "pwned")
    result = session_env.exec("cat >/dev/null; echo ran", stdin=f"touch {pwned}\n".encode() * 5000)
    assert (result.exit_code, result.stdout) == (INPUT_LOST, b""), result
    after = session_env.exec("echo back; ulimit -f")
    assert (after.stdout, after.recovered) == (b"back\nunlimited\n", RESTARTED_AFTER_KILL)
    assert not os.path.exists(pwned), "bytes of a command's stdin were run as commands"
    assert _staged(session_env) == []


def _fake_head(env: SessionOverPipes) -> None:
    """Puts a ``head`` first on the shell's PATH that never reads: the shell acknowledges
    a call's stdin, then takes none of it (as a shell that stopped)."""
    env.exec('mkdir -p stuck && printf "#!/bin/sh\\nexec sleep 600\\n" > stuck/head && chmod +x stuck/head').check()
    env.exec('export PATH="$PWD/stuck:$PATH"').check()
    if not env.exec("command -v head").stdout.endswith(b"/stuck/head\n"):
        pytest.skip("this shell runs its own head (BusyBox's applet), not one from PATH")


def test_a_timeout_while_stdin_is_sent_kills_and_the_next_call_says_restarted(session_env: SessionOverPipes) -> None:
    _fake_head(session_env)
    shell = session_env.session.pid
    result = returned_within(
        60,
        lambda: session_env.exec("cat >/dev/null; echo ran", stdin=os.urandom(3 << 20), timeout=2),
        lambda: os.killpg(shell, signal.SIGKILL),  # the shell's group: head and its sleep too
    )
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
    after = session_env.exec("echo back")
    assert (after.stdout, after.recovered) == (b"back\n", RESTARTED_AFTER_KILL), after
    assert _staged(session_env) == [], "the staged stdin of the killed call was left behind"


def test_a_timeout_while_a_files_bytes_are_sent_kills_and_the_next_call_says_restarted(
    session_env: SessionOverPipes,
) -> None:
    _fake_head(session_env)
    shell = session_env.session.pid
    target = os.path.join(session_env.cwd, "f.bin")
    result = returned_within(
        60,
        lambda: _take(session_env, _write_script(target), os.urandom(3 << 20), timeout=2),
        lambda: os.killpg(shell, signal.SIGKILL),
    )
    assert (result.exit_code, result.timed_out) == (124, True), result
    after = session_env.exec("echo back")
    assert (after.stdout, after.recovered) == (b"back\n", RESTARTED_AFTER_KILL), after
    assert not os.path.exists(target)


def test_a_timeout_of_a_command_reading_raw_stdin_leaves_no_staged_file(session_env: SessionOverPipes) -> None:
    result = session_env.exec("sleep 60", stdin=b"y" * 100_000, timeout=1)
    assert (result.exit_code, result.timed_out) == (124, True)
    assert session_env.exec("echo back").recovered == RESTARTED_AFTER_KILL
    assert _staged(session_env) == []


def test_ctrl_c_while_stdin_is_sent_leaves_no_staged_file_and_says_restarted(session_env: SessionOverPipes) -> None:
    session_env.session.open_stream = lambda: _InterruptedMidInput.spawn(  # type: ignore[method-assign]
        session_env.shell_argv, cwd=session_env.cwd
    )
    session_env.exec("true").check()
    with pytest.raises(KeyboardInterrupt):
        session_env.exec("cat", stdin=b"n" * 300_000)
    after = session_env.exec("echo back")
    assert (after.stdout, after.recovered) == (b"back\n", RESTARTED_AFTER_KILL)
    assert _staged(session_env) == []


def test_a_write_to_a_process_that_does_not_read_ends_at_its_deadline() -> None:
    stream = ProcessStream.spawn(["sleep", "600"])
    try:
        with pytest.raises(WriteTimedOut):
            stream.write(b"x" * (1 << 20), time.monotonic() + 0.5)
    finally:
        stream.proc.kill()
        stream.proc.wait(30)
        stream.close()


def test_an_sdk_write_without_a_timeout_of_its_own_ends_at_its_deadline() -> None:
    release = threading.Event()
    try:
        with pytest.raises(WriteTimedOut):
            call_within(release.wait, time.monotonic() + 0.2)
    finally:
        release.set()
    assert call_within(lambda: 7, time.monotonic() + 30) == 7
