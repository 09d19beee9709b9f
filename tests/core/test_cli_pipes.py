"""Every `envlayer` command whose reader goes away (`envlayer config | head -1`,
`envlayer backends --json | true`) ends quietly with 141 (128 + SIGPIPE, as `exec`
does and as a shell reports a command killed by SIGPIPE), never with an internal error."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_run import ENVLAYER

from envlayer.cli.console import BROKEN_PIPE_EXIT_CODE

COMMANDS = [
    ["config"],
    ["config", "--json"],
    ["backends", "--json"],
    ["backends", "--options"],
    ["doctor"],
    ["completion", "bash"],
    ["broker", "status"],
    ["ls", "--backend", "local"],
    ["rm", "some-task", "--backend", "local"],
]
HELP = [["exec", "--help"], ["--help"], ["--version"]]
"""argparse prints these itself and ignores a failed write: quiet, with exit 0 or 141."""


def _environ(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    runtime = workdir / "rt"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {**env, "XDG_CONFIG_HOME": str(workdir / "xdg"), "ENVLAYER_RUNTIME_DIR": str(runtime)}


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_reader_gone_before_the_first_write_gives_141_quietly(tmp_path: Path, args: list[str]) -> None:
    assert _without_a_reader(tmp_path, args) == (BROKEN_PIPE_EXIT_CODE, "")


@pytest.mark.parametrize("args", HELP, ids=" ".join)
def test_help_without_a_reader_is_quiet(tmp_path: Path, args: list[str]) -> None:
    code, err = _without_a_reader(tmp_path, args)
    assert (code in (0, BROKEN_PIPE_EXIT_CODE), err) == (True, "")


def _without_a_reader(workdir: Path, args: list[str]) -> tuple[int, str]:
    """``envlayer *args | true``: the exit code and stderr."""
    proc = subprocess.Popen(
        [ENVLAYER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=_environ(workdir)
    )
    assert proc.stdout is not None
    proc.stdout.close()  # nobody will ever read
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


@pytest.mark.parametrize("args", [["config"], ["backends", "--options"], ["completion", "zsh"]], ids=" ".join)
def test_a_reader_that_stops_after_one_line_never_sees_an_error(tmp_path: Path, args: list[str]) -> None:
    """`| head -1`: the reader may close before or after envlayer's last write (a race
    either way round, so it is run ten times): 0 or 141, never a message."""
    for _ in range(10):
        proc = subprocess.Popen(
            [ENVLAYER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=_environ(tmp_path)
        )
        assert proc.stdout is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
        assert (proc.returncode in (0, BROKEN_PIPE_EXIT_CODE), err.decode()) == (True, "")
