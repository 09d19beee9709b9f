"""The shared in-sandbox kill script, run directly on this machine's /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

from envlayer.execution.tree_kill import kill_script_argv, killed_pids, tree_members


def _start(marker: str, script: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, ENVLAYER_EXEC_ID=marker)
    return subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True)


def _wait_members(leader: subprocess.Popen[bytes], marker: str, count: int) -> list[int]:
    deadline = time.monotonic() + 60  # ends as soon as they are all there
    members: list[int] = []
    while time.monotonic() < deadline:
        members = tree_members(leader.pid, marker)
        if len(members) >= count:
            break
        time.sleep(0.02)
    return members


def test_kills_the_marked_tree_and_spares_other_commands() -> None:
    # markers of this run only: another run on the same machine runs this test too
    kill, keep = f"kill-me-{uuid.uuid4().hex}", f"keep-me-{uuid.uuid4().hex}"
    target = _start(kill, "sleep 3151 & setsid sleep 3152 & sleep 3153")
    bystander = _start(keep, "sleep 3154")
    try:
        assert len(_wait_members(target, kill, 4)) == 4
        assert _wait_members(bystander, keep, 1)
        out = subprocess.run(kill_script_argv("/bin/sh", kill), capture_output=True, timeout=30, check=True)
        assert len(killed_pids(out.stdout)) >= 3
        target.wait(timeout=5)
        assert tree_members(target.pid, kill) == []
        assert bystander.poll() is None, "a process of another command was killed"
    finally:
        for proc, marker in ((target, kill), (bystander, keep)):
            for pid in tree_members(proc.pid, marker):
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()


def _with_argv(word: str) -> list[int]:
    """Live (not zombie) processes with ``word`` as an argument."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if word.encode() in argv and state != b"Z":
            found.append(int(entry))
    return found


def test_a_session_shell_forking_during_the_scan_leaves_no_survivor() -> None:
    """The shell of a session may start a command's subshell while the script scans /proc
    (a cancel that comes as the command starts): the scan must see every child it makes.
    Here the "shell" forks a subshell every 10 ms, each running an unmarked sleep."""
    word = str(4_000_000 + uuid.uuid4().int % 1_000_000)  # a sleep length of this run only
    shell = subprocess.Popen(
        ["sh", "-c", f"while :; do ( exec sleep {word} ) & sleep 0.01; done"], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 30
        while len(_with_argv(word)) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        argv = kill_script_argv("/bin/sh", f"none-{uuid.uuid4().hex}", shell_pid=shell.pid, since_cs=0, grace=1)
        subprocess.run(argv, capture_output=True, timeout=60, check=True)
        shell.wait(timeout=5)
        time.sleep(0.2)  # a child forked just before the shell died would have exec'ed by now
        assert _with_argv(word) == [], "a child the shell made during the scan survived it"
    finally:
        shell.kill()
        shell.wait()
        for pid in _with_argv(word):
            os.kill(pid, signal.SIGKILL)


def test_killed_pids_parses_the_report() -> None:
    assert killed_pids(b"noise\nkilled 12 34 \n") == [12, 34]
    assert killed_pids(b"killed \n") == []
    assert killed_pids(b"") == []
