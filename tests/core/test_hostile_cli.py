"""Hostile commands through the real `envlayer` CLI on the local backend: floods with a
timeout, a real SIGINT during a flood, and bad timeouts refused before anything runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envlayer.testing.hostile import ENVLAYER, cli_env, cli_flood, cli_interrupt_flood

FLOODS = ["yes", "cat /dev/zero", "yes >&2", "cat /dev/zero >&2"]


@pytest.mark.parametrize("flood", FLOODS)
def test_flood_with_timeout_exits_124_on_time(tmp_path: Path, flood: str) -> None:
    run = cli_flood(["--backend", "local"], flood=flood, cwd=tmp_path)
    assert run.returncode == 124, run.stderr
    assert "timed out" in run.stderr


@pytest.mark.parametrize("flood", ["yes", "cat /dev/zero >&2"])
def test_sigint_during_flood_exits_130_fast(tmp_path: Path, flood: str) -> None:
    marker = tmp_path / "pid"
    run = cli_interrupt_flood(["--backend", "local"], flood=f"echo $$ > {marker}; {flood}", cwd=tmp_path)
    assert run.returncode == 130, run.stderr
    pid = int(marker.read_text())
    assert not _running(pid), "the flood survived"


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a zombie runs nothing; its reaping
    belongs to whatever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e308", "-inf"])
def test_bad_timeout_is_a_clear_error_and_nothing_runs(tmp_path: Path, value: str) -> None:
    out = subprocess.run(
        [ENVLAYER, "exec", "--backend", "local", f"--timeout={value}", "--", "touch", "ran"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(),
        timeout=60,
    )
    assert out.returncode == 125
    assert "timeout" in out.stderr and "hint:" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "ran").exists()
