"""`envlayer rm` against the real Docker daemon tells the truth: a task it does not
remove (running without --force, unknown, only data without --purge) is an error with
its reason (exit 1); several tasks go in one call; `--all` asks, or refuses without a
terminal and -y; tasks are also named by the ids and names `ls` shows, in full."""

from __future__ import annotations

import json
from typing import Any

import pytest


def _tasks(cli: Any, prof: str) -> dict[str, str]:
    """task -> status of the containers of profile ``prof``."""
    listed = json.loads(cli("ls", "--json", profile=prof).stdout)
    return {s["task"]: s["status"] for o in listed for s in o["sandboxes"] if s["status"] != "data"}


@pytest.fixture
def prof(cli: Any, profile: str) -> Any:
    """A profile of this test's own, emptied at the end."""
    name = f"{profile}-rm"
    yield name
    cli("rm", "--all", "--force", "--purge", "-y", profile=name)


def test_rm_of_a_running_or_unknown_task_fails_with_the_reason(cli: Any, prof: str) -> None:
    assert cli("exec", "--task", "busy", "true", profile=prof).returncode == 0
    running = cli("rm", "busy", profile=prof)
    assert running.returncode == 1
    assert "task 'busy': docker" in running.stderr and "(running) is still there; --force removes it" in running.stderr
    assert _tasks(cli, prof) == {"busy": "running"}
    unknown = cli("rm", "no-such-task", profile=prof)
    assert unknown.returncode == 1
    assert "no sandbox of task 'no-such-task'" in unknown.stderr
    only_data = cli("rm", "busy", "--force", profile=prof)
    assert only_data.returncode == 0, only_data.stderr
    again = cli("rm", "busy", profile=prof)
    assert again.returncode == 1 and "only durable data" in again.stderr and "--purge" in again.stderr


def test_rm_takes_several_tasks_and_the_ids_ls_shows(cli: Any, prof: str) -> None:
    for task in ("t1", "t2", "t3"):
        assert cli("exec", "--task", task, "true", profile=prof).returncode == 0
    ids = cli("ls", "-q", profile=prof).stdout.split()
    listed = json.loads(cli("ls", "--format", "json", profile=prof).stdout)
    by_task = {s["task"]: s["id"] for o in listed for s in o["sandboxes"] if s["status"] != "data"}
    assert set(by_task.values()) <= set(ids)
    table = cli("ls", profile=prof).stdout
    assert all(s["id"] in table for o in listed for s in o["sandboxes"])  # full ids, as rm takes them
    out = cli("rm", "t1", by_task["t2"], "--force", "--purge", "--json", profile=prof)
    assert out.returncode == 0, out.stderr
    assert {s["task"] for o in json.loads(out.stdout) for s in o["sandboxes"]} == {"t1", "t2"}
    assert _tasks(cli, prof) == {"t3": "running"}


def test_rm_all_needs_a_terminal_or_yes(cli: Any, prof: str) -> None:
    for task in ("a1", "a2"):
        assert cli("exec", "--task", task, "true", profile=prof).returncode == 0
    refused = cli("rm", "--all", "--force", profile=prof)
    assert refused.returncode == 1
    assert "no terminal" in refused.stderr and "-y" in refused.stderr
    assert _tasks(cli, prof) == {"a1": "running", "a2": "running"}
    kept = cli("rm", "--all", "-y", profile=prof)
    assert kept.returncode == 0 and "kept: task 'a1': docker" in kept.stderr and "(running)" in kept.stderr
    done = cli("rm", "--all", "--force", "-y", profile=prof)
    assert done.returncode == 0, done.stderr
    assert _tasks(cli, prof) == {}


def _rm_all_on_a_terminal(answer: bytes, prof: str) -> tuple[int, bytes]:
    """``envlayer rm --all --force`` with a terminal as stdin and stderr, answering
    ``answer`` to its question: (exit code, what the terminal showed)."""
    import os
    import pty
    import select
    import subprocess
    import time

    from envlayer.testing.secrets import ENVLAYER_SCRIPT

    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(ENVLAYER_PROFILE=prof)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [ENVLAYER_SCRIPT, "rm", "--all", "--force", "--backend", "docker"],
        stdin=secondary, stdout=subprocess.DEVNULL, stderr=secondary, env=environ,
    )  # fmt: skip
    try:
        shown, deadline = b"", time.monotonic() + 120
        while b"[y/N]" not in shown:
            assert proc.poll() is None and time.monotonic() < deadline, f"no question asked: {shown!r}"
            if select.select([primary], [], [], 1.0)[0]:
                shown += os.read(primary, 4096)
        os.write(primary, answer)
        return proc.wait(timeout=120), shown
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
        os.close(secondary)


def test_rm_all_asks_on_a_terminal(cli: Any, prof: str) -> None:
    assert cli("exec", "--task", "q1", "true", profile=prof).returncode == 0
    code, shown = _rm_all_on_a_terminal(b"n\n", prof)
    assert code == 1 and f"remove 1 sandbox(es) of 1 task(s) in profile '{prof}'?".encode() in shown
    assert _tasks(cli, prof) == {"q1": "running"}
    code, _ = _rm_all_on_a_terminal(b"y\n", prof)
    assert code == 0 and _tasks(cli, prof) == {}
