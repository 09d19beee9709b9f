"""The shared in-sandbox kill script, run directly on this machine's /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import time

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
    target = _start("kill-me-1", "sleep 3151 & setsid sleep 3152 & sleep 3153")
    bystander = _start("keep-me-1", "sleep 3154")
    try:
        assert len(_wait_members(target, "kill-me-1", 4)) == 4
        assert _wait_members(bystander, "keep-me-1", 1)
        out = subprocess.run(kill_script_argv("/bin/sh", "kill-me-1"), capture_output=True, timeout=30, check=True)
        assert len(killed_pids(out.stdout)) >= 3
        target.wait(timeout=5)
        assert tree_members(target.pid, "kill-me-1") == []
        assert bystander.poll() is None, "a process of another command was killed"
    finally:
        for proc, marker in ((target, "kill-me-1"), (bystander, "keep-me-1")):
            for pid in tree_members(proc.pid, marker):
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()


def test_killed_pids_parses_the_report() -> None:
    assert killed_pids(b"noise\nkilled 12 34 \n") == [12, 34]
    assert killed_pids(b"killed \n") == []
    assert killed_pids(b"") == []
