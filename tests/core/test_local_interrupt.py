"""An interrupted exec (SIGINT in the calling process) kills the command's whole tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from envlayer.execution.tree_kill import tree_members

CHILD = """
import sys
from envlayer.local.backend import LocalEnvironment
env = LocalEnvironment()
print("ready", flush=True)
try:
    env.exec("sleep {a} & setsid sleep {b} & echo started > {marker}; sleep {c}")
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


# Durations unique to this run: the suite runs in several checkouts at once on one machine,
# and another run's sleepers must never count as ours.
SLEEPS = [str(n) for n in range(3000 + os.getpid() % 50_000 * 3, 3003 + os.getpid() % 50_000 * 3)]


def _sleepers() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd[:2] in ([b"sleep", n.encode()] for n in SLEEPS) and state != b"Z":
            found.append(int(pid))
    return found


def test_keyboard_interrupt_kills_the_tree(tmp_path: Path) -> None:
    assert _sleepers() == [], "stray sleepers from another run"
    marker = tmp_path / "started"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(marker=marker, a=SLEEPS[0], b=SLEEPS[1], c=SLEEPS[2])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while (not marker.exists() or len(_sleepers()) < 3) and time.monotonic() < deadline:
            time.sleep(0.02)  # the marker is written before `sleep 3143` has started
        assert len(_sleepers()) == 3
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline() == "interrupted\n"
        proc.wait(timeout=10)
        assert _sleepers() == []
    finally:
        proc.kill()
        proc.wait()
        for pid in _sleepers():
            os.kill(pid, signal.SIGKILL)


def test_tree_members_finds_group_and_marker(tmp_path: Path) -> None:
    probe = f"probe-{uuid.uuid4().hex}"  # this run's only: another run has the same test
    env = dict(os.environ, ENVLAYER_EXEC_ID=probe)
    leader = subprocess.Popen(["sh", "-c", "setsid sleep 305 & sleep 306"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        members: list[int] = []
        while len(members) < 3 and time.monotonic() < deadline:
            members = tree_members(leader.pid, probe)
            time.sleep(0.02)
        assert leader.pid in members and len(members) == 3
        assert tree_members(leader.pid, None) != members  # the setsid child is found only by its marker
    finally:
        for pid in tree_members(leader.pid, probe):
            os.kill(pid, signal.SIGKILL)
        leader.wait()
