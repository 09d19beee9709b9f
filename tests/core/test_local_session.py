"""The local backend's persistent session and its one-shot mode, on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envlayer.capabilities import Capability, supports
from envlayer.local.backend import LocalEnvironment, LocalOptions


@pytest.fixture
def make_local(tmp_path: Path):  # type: ignore[no-untyped-def]
    made: list[LocalEnvironment] = []

    def make(**kw: object) -> LocalEnvironment:
        kw.setdefault("cwd", str(tmp_path))
        env = LocalEnvironment(LocalOptions(**kw))  # type: ignore[arg-type]
        made.append(env)
        return env

    yield make
    for env in made:
        env.cleanup()


def test_cd_and_export_persist_in_session_mode(make_local, tmp_path: Path) -> None:
    env = make_local()
    assert supports(env, Capability.PERSISTENT_SESSION)
    (tmp_path / "sub").mkdir()
    env.exec("cd sub && export GREETING=hello && f() { echo fn-$1; }").check()
    assert env.exec("pwd; echo $GREETING; f x").stdout_text == f"{tmp_path / 'sub'}\nhello\nfn-x\n"
    # per-call cwd/env hold for that call only
    assert env.exec("pwd; echo $ONCE", cwd="/", env={"ONCE": "1"}).stdout_text == "/\n1\n"
    assert env.exec("pwd; echo ${ONCE:-unset}").stdout_text == f"{tmp_path / 'sub'}\nunset\n"


def test_oneshot_mode_keeps_nothing(make_local, tmp_path: Path) -> None:
    env = make_local(exec_mode="oneshot")
    assert not supports(env, Capability.PERSISTENT_SESSION)
    (tmp_path / "sub").mkdir()
    env.exec("cd sub && export GREETING=hello").check()
    assert env.exec("pwd; echo ${GREETING:-unset}").stdout_text == f"{tmp_path}\nunset\n"


def test_set_e_then_false_keeps_the_session_usable_with_its_exports(make_local, tmp_path: Path) -> None:
    env = make_local()
    env.exec("export KEEP=yes; cd /tmp; set -e").check()
    failed = env.exec("false")
    assert failed.exit_code == 1
    assert env.exec("echo $KEEP; pwd").stdout_text == "yes\n/tmp\n"


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_deleted_working_directory_falls_back_to_nearest_parent(make_local, tmp_path: Path, mode: str) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    env = make_local(cwd=str(deep), exec_mode=mode)
    assert env.exec("pwd").stdout_text == f"{deep}\n"
    os.rmdir(deep)
    os.rmdir(deep.parent)
    moved = env.exec("pwd; touch made-here")
    assert moved.exit_code == 0 and moved.stdout_text == f"{tmp_path / 'a'}\n"
    assert str(deep) in moved.notice and str(tmp_path / "a") in moved.notice
    assert (tmp_path / "a" / "made-here").exists()
    again = env.exec("pwd")
    assert again.ok and again.stdout_text == f"{tmp_path / 'a'}\n"
    # the session moved for good; one-shot mode still starts from the deleted `cwd` each time
    assert (again.notice == "") == (mode == "session")
    # an explicit per-call cwd that does not exist is still an error
    assert env.exec("true", cwd=str(tmp_path / "nope")).exit_code == 126


def test_cleanup_ends_the_shell_but_not_its_background_jobs(make_local, tmp_path: Path) -> None:
    env = make_local()
    shell_pid = int(env.exec("echo $$").stdout_text)
    job_pid = int(env.exec("sleep 300 > /dev/null 2>&1 & echo $!").stdout_text)
    try:
        env.cleanup()  # ends the shell and reaps it
        with pytest.raises(ProcessLookupError):
            os.kill(shell_pid, 0)
        os.kill(job_pid, 0)  # still running
    finally:
        try:
            os.kill(job_pid, 9)
        except ProcessLookupError:
            pass


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize(
    ("holder", "state", "hours_idle", "removed"),
    [
        ("dead", False, 0, True),  # its shell was killed: nothing else removes it
        ("alive", False, 2, False),  # a running session's
        (None, False, 2, True),  # from a shell killed before it claimed it (or an older envlayer)
        (None, False, 0, False),  # may be being made at this instant
        ("dead", True, 0, False),  # saved state: its session may restart the shell and restore it
        ("dead", True, 2, True),
    ],
)
def test_a_session_shell_starting_removes_dead_sessions_directories(
    make_local, tmp_path: Path, holder: str | None, state: bool, hours_idle: int, removed: bool
) -> None:
    """A session shell killed by a signal (its owner killed with its process group, say)
    cannot remove its private directory; the next local session shell that starts does."""
    scratch = tmp_path / "tmp"
    left = scratch / ".envlayer-session-0123456789abcdef"
    left.mkdir(parents=True, mode=0o700)
    if holder is not None:
        pid = os.getpid() if holder == "alive" else dead_pid()
        (left / "holder").write_text(f"{pid}\n")
    if state:
        (left / "state").write_text("export KEPT=1\n")
    idle = time.time() - hours_idle * 3600
    os.utime(left, (idle, idle))
    make_local(env={"TMPDIR": str(scratch)}).exec("true").check()
    assert left.exists() is not removed


OWNER = """
import os, signal, sys
from envlayer.local.backend import LocalEnvironment, LocalOptions
env = LocalEnvironment(LocalOptions(cwd=sys.argv[1]))
print(env.exec('echo "${TMPDIR:-/tmp}/.envlayer-session-$ENVLAYER_SESSION"').stdout_text, end="", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_session_whose_owner_is_killed_removes_its_directory(tmp_path: Path) -> None:
    """A local session shell's input ends only when its owner is gone (killed: no cleanup, no
    finalizer): nobody will restore saved state, so the shell removes its directory."""
    owner = subprocess.run(
        [sys.executable, "-c", OWNER, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    left = Path(owner.stdout.strip())
    deadline = time.monotonic() + 10
    while left.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left.exists(), f"{left} holds {os.listdir(left)}"
