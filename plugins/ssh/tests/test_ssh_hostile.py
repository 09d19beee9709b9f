"""Hostile commands on SSH, both modes, through the real `envlayer` CLI: floods with a
timeout and a real SIGINT during a flood (the API side, leftovers included, is checked by
the conformance kit's flood tests)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions
from ssh_testserver import SSHServer

from envlayer.testing.hostile import cli_flood, cli_interrupt_flood

pytestmark = pytest.mark.ssh

MODES = ["session", "oneshot"]


def _config(server: SSHServer, mode: str, tmp_path: Path) -> list[str]:
    """CLI options reaching ``server`` through a config file."""
    lines = ["[backends.ssh]"] + [
        f"{key} = {json.dumps(value)}" for key, value in server.options(exec_mode=mode).items()
    ]
    path = tmp_path / f"envlayer-{mode}.toml"
    path.write_text("\n".join(lines) + "\n")
    return ["--config", str(path), "--backend", "ssh"]


def _left_running(server: SSHServer, marker: str) -> str:
    env = SSHEnvironment(SSHOptions(**server.options(exec_mode="oneshot")))
    try:
        return env.exec(f"ps -eo pid,args | grep -e {marker} | grep -v grep || true").stdout_text
    finally:
        env.cleanup()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flood", ["yes", "cat /dev/zero >&2"])
def test_cli_flood_with_timeout_exits_124_on_time(sshd: SSHServer, tmp_path: Path, mode: str, flood: str) -> None:
    run = cli_flood(_config(sshd, mode, tmp_path), flood=flood, cwd=tmp_path)
    assert run.returncode == 124, run.stderr


@pytest.mark.parametrize("mode", MODES)
def test_cli_sigint_during_flood_exits_130_fast(sshd: SSHServer, tmp_path: Path, mode: str) -> None:
    marker = f"sigint{uuid.uuid4().hex[:8]}"
    run = cli_interrupt_flood(_config(sshd, mode, tmp_path), flood=f"yes {marker}", cwd=tmp_path)
    assert run.returncode == 130, run.stderr
    assert _left_running(sshd, marker) == ""
