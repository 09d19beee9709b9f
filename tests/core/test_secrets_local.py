"""A secret passed to one command on the local backend reaches it and nothing else: no
command line on the host, no log line, no error message, not `envlayer config`."""

from __future__ import annotations

import logging
import os

import pytest
from cli_run import run

from envlayer.local.backend import LocalEnvironment
from envlayer.testing.secrets import cli_exec_while_scanning, exec_while_scanning, make_marker


def test_secret_reaches_the_command_only(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="envlayer")
    marker = make_marker()
    env = LocalEnvironment(LocalEnvironment.Options(cwd=str(tmp_path)))
    try:
        result, leaks = exec_while_scanning(env, marker)
        assert result.stdout_text == marker and leaks == []
        failed = env.exec("true", cwd=str(tmp_path / "missing"), env={"EL_TEST_SECRET": marker})
        assert failed.exit_code == 126 and marker not in failed.stderr_text
    finally:
        env.cleanup()
    assert marker not in caplog.text


def test_cli_secret_from_the_callers_environment(tmp_path) -> None:
    marker = make_marker()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    done, leaks = cli_exec_while_scanning(["--backend", "local"], marker, environ)
    assert done.returncode == 0 and done.stdout == marker
    assert leaks == [] and marker not in done.stderr
    shown = run("config", "--backend", "local", cwd=tmp_path, env={"ENVLAYER_LOCAL_ENV": f'{{"TOKEN": "{marker}"}}'})
    assert shown.returncode == 0 and marker not in shown.stdout and "TOKEN" in shown.stdout
