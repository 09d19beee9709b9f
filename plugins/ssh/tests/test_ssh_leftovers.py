"""Nothing of envlayer's stays on the host after ``cleanup()``, whatever happened to the
connection: the login user's temp directory (the sessions' ``TMPDIR``, which this test
sshd gives every session, so concurrent runs do not see each other's files) is listed
before and after runs with dropped and re-established connections.

A drop that outlives the environment (cleanup while the host is unreachable) leaves its
session directory behind; the next environment of the same user removes it, and never a
directory a live session holds.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest
from envlayer_ssh.errors import ConnectionLost
from envlayer_ssh.session_dirs import SWEEP_LIMIT, claim_script
from ssh_testserver import SSHServer, _descendants

from envlayer.errors import BackendUnavailable

pytestmark = pytest.mark.ssh


def _envlayer_files(server: SSHServer) -> list[str]:
    """envlayer's entries in the login user's temp directory (names starting ``.envlayer``)."""
    return sorted(name for name in os.listdir(server.tmpdir) if name.startswith(".envlayer"))


def _drop_during(server: SSHServer, env, command: str) -> None:
    """Run ``command`` while the server is restarted under it (the connection drops)."""
    timer = threading.Timer(0.7, server.restart)
    timer.start()
    try:
        with pytest.raises(ConnectionLost):
            env.exec(command, timeout=30)
    finally:
        timer.join()


def test_dropped_and_reestablished_sessions_leave_nothing(own_sshd: SSHServer, make_env) -> None:
    before = _envlayer_files(own_sshd)
    between = make_env(own_sshd)
    during = make_env(own_sshd)
    staged = make_env(own_sshd)
    oneshot = make_env(own_sshd, mode="oneshot", cwd=own_sshd.tmpdir)
    for env in (between, during, staged):
        env.exec("cd /tmp && export KEPT=1").check()
    own_sshd.restart()  # a drop between calls
    assert between.exec("echo again").stdout == b"again\n"
    _drop_during(own_sshd, during, "sleep 20")  # a drop mid-command
    assert during.exec("echo after").stdout == b"after\n"
    big = b"x" * (200 * 1024)  # staged in the session directory, not sent inline
    assert staged.exec("wc -c", stdin=big).stdout_text.strip() == str(len(big))
    oneshot.write_file("kept.txt", b"data")
    assert oneshot.exec("cat kept.txt; rm kept.txt").stdout == b"data"
    for env in (between, during, staged, oneshot):
        env.cleanup()
    assert _envlayer_files(own_sshd) == before


def _wait_until_gone(pid: int, deadline_seconds: float = 30) -> None:
    """Poll (with a deadline) until process ``pid`` no longer exists on this host."""
    deadline = time.monotonic() + deadline_seconds
    while os.path.exists(f"/proc/{pid}"):
        assert time.monotonic() < deadline, f"process {pid} is still there"
        time.sleep(0.02)


def test_a_later_session_removes_what_a_dead_one_left(own_sshd: SSHServer, make_env) -> None:
    before = _envlayer_files(own_sshd)
    live = make_env(own_sshd)
    live.exec("export KEEP=1").check()
    held = set(_envlayer_files(own_sshd)) - set(before)
    assert len(held) == 1, "one session directory per live session"
    dead = make_env(own_sshd, max_connections=3)
    assert dead._pool is not live._pool, "the dead session has a connection of its own"
    dead.exec("true").check()
    left = set(_envlayer_files(own_sshd)) - set(before) - held
    assert len(left) == 1
    pid = dead._session.pid
    os.kill(pid, signal.SIGKILL)  # its shell dies (saving no state: nothing waits for it)
    _wait_until_gone(pid)
    dead._pool.connections[0].transport().close()  # and its connection is gone
    dead.cleanup()  # cannot reach the host any more: its directory stays
    assert left <= set(_envlayer_files(own_sshd))
    later = make_env(own_sshd)
    later.exec("true").check()
    remaining = set(_envlayer_files(own_sshd)) - set(before)
    assert not remaining & left, "the later session removed what the dead one left"
    assert held <= remaining, "the live session's directory is kept"
    assert live.exec('printf %s "$KEEP"').stdout == b"1"
    later.cleanup()
    live.cleanup()
    assert _envlayer_files(own_sshd) == before


def test_claim_script_removes_only_dead_sessions_of_the_login_user(sshd: SSHServer, make_env) -> None:
    """The shell text every session shell runs at start, run in a scratch TMPDIR: the
    directories of dead holders go (at most SWEEP_LIMIT per run), and so do an unclaimed
    one and a dead holder's with saved state once untouched for long; a live holder's, a
    fresh unclaimed one, a dead holder's with fresh saved state (its session restores it
    at its next call), a symlink, another user's and other names stay; the shell claims
    its own."""
    env = make_env(sshd, mode="oneshot")
    scratch = env.exec("mktemp -d").stdout_text.strip()
    dead = [f".envlayer-session-dead{i:02d}" for i in range(SWEEP_LIMIT + 3)]
    try:
        env.exec(
            f"cd {scratch} && mkdir {' '.join(dead)} .envlayer-session-live .envlayer-session-fresh "
            ".envlayer-session-stale .envlayer-session-waiting .envlayer-session-waited other "
            "&& for d in .envlayer-session-dead* .envlayer-session-wait*; do echo 999999999 > $d/holder; done "
            "&& touch .envlayer-session-waiting/state .envlayer-session-waited/state "
            "&& (sleep 300 >/dev/null 2>&1 & echo $! > .envlayer-session-live/holder) "
            "&& touch -d '2 hours ago' .envlayer-session-stale .envlayer-session-waited "
            "&& ln -s other .envlayer-session-link"
        ).check()
        foreign = os.path.join(scratch, ".envlayer-session-foreign")  # this test runs as root: another user
        os.mkdir(foreign)
        with open(os.path.join(foreign, "holder"), "w") as fh:
            fh.write("999999999\n")
        kept = [".envlayer-session-foreign", ".envlayer-session-fresh", ".envlayer-session-link"]
        kept += [".envlayer-session-live", ".envlayer-session-mine", ".envlayer-session-waiting"]
        env.exec(claim_script("mine").decode(), env={"TMPDIR": scratch}).check()
        first = env.exec(f"ls -A {scratch}").stdout_text.split()
        aged = [".envlayer-session-stale", ".envlayer-session-waited"]
        assert sorted(first) == sorted(dead[SWEEP_LIMIT:] + kept + aged + ["other"])
        env.exec(claim_script("mine").decode(), env={"TMPDIR": scratch}).check()
        second = env.exec(f"ls -A {scratch}").stdout_text.split()
        assert sorted(second) == sorted([*kept, "other"])
        holder = env.exec(f"cat {scratch}/.envlayer-session-mine/holder").stdout_text.strip()
        assert holder.isdigit()
    finally:
        shutil.rmtree(os.path.join(scratch, ".envlayer-session-foreign"), ignore_errors=True)
        env.exec(f"kill $(cat {scratch}/.envlayer-session-live/holder) 2>/dev/null; rm -rf {scratch}")


def _temp_files(directory: str) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith(".envlayer-"))


def _cut_write(server: SSHServer, env, directory: str) -> None:
    """Start a 64 MiB write into ``directory``; once its temp file exists, stop (SIGSTOP)
    every process of ``server`` so the rest cannot arrive, then kill the server: the
    write can only fail, and its temp file cannot be removed then."""

    def freeze_then_kill() -> None:
        deadline = time.monotonic() + 60
        while not _temp_files(directory) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert server.proc is not None
        for pid in [server.proc.pid, *_descendants(server.proc.pid)]:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        server.stop()

    killer = threading.Thread(target=freeze_then_kill)
    killer.start()
    try:
        with pytest.raises(BackendUnavailable):
            env.write_file("big.bin", b"x" * (64 * 1024 * 1024))
    finally:
        killer.join()


@pytest.mark.parametrize("then", ["write", "cleanup"])
def test_a_write_cut_by_a_drop_leaves_no_temp_file(own_sshd: SSHServer, make_env, then: str) -> None:
    """The temp file of a write cut by a drop is removed once the host can be reached
    again: by the next write, or at ``cleanup()``."""
    directory = own_sshd.tmpdir
    env = make_env(own_sshd, mode="oneshot", cwd=directory)
    _cut_write(own_sshd, env, directory)
    assert _temp_files(directory), "the drop left the write's temp file"
    own_sshd.start()
    if then == "write":
        env.write_file("small.txt", b"ok")
        assert _temp_files(directory) == []
    env.cleanup()
    assert _temp_files(directory) == []
    assert not os.path.exists(os.path.join(directory, "big.bin"))


def test_a_session_waiting_to_restore_its_state_is_not_swept(own_sshd: SSHServer, make_env) -> None:
    """``exit N`` ends a session's shell and saves its state for the next call; a session
    starting in between must leave that directory alone."""
    waiting = make_env(own_sshd)
    assert waiting.exec("export KEPT=1; exit 3").exit_code == 3
    make_env(own_sshd).exec("true").check()
    assert waiting.exec('printf %s "${KEPT:-lost}"').stdout == b"1"
