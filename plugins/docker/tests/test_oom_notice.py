"""A command killed by the container's memory limit says so (exit 137 and a notice
naming the limit), through the API and the CLI; a `kill -9` in the same container after
that OOM kill is not blamed on it (the real daemon, a 64 MiB container)."""

from __future__ import annotations

from typing import Any

GREEDY = "dd if=/dev/zero bs=300M count=1 of=/dev/null"
"""Needs a 300 MiB buffer: more than the limit and its swap allowance."""


def test_a_command_killed_by_the_memory_limit_says_so(make_env: Any) -> None:
    env = make_env(memory_mb=64)
    killed = env.exec(GREEDY)
    assert killed.exit_code == 137
    assert "killed: out of memory (memory_mb=64)" in killed.notice
    other = env.exec("sh -c 'kill -9 $$'")
    assert other.exit_code == 137 and "out of memory" not in other.notice
    assert env.exec("echo alive").stdout_text == "alive\n"


def test_the_cli_notes_the_out_of_memory_kill(cli: Any, profile: str) -> None:
    prof = f"{profile}-oom"
    try:
        out = cli("exec", "-o", "memory_mb=64", "--no-broker", GREEDY, profile=prof)
        assert out.returncode == 137
        assert "envlayer: note: killed: out of memory (memory_mb=64)" in out.stderr
    finally:
        cli("rm", "--all", "--force", "--purge", "-y", profile=prof)
