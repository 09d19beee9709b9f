"""A secret passed to one command over SSH reaches it and nothing else: no command line on
the (local) host, in either exec mode (one-shot commands used to carry their variables in
the remote command line), no log line, no error message, not `envlayer config`."""

from __future__ import annotations

import json
import logging
import os
import subprocess

import pytest
from ssh_testserver import SSHServer

from envlayer.testing.secrets import ENVLAYER_SCRIPT, cli_exec_while_scanning, exec_while_scanning, make_marker


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_secret_reaches_the_command_only(sshd: SSHServer, make_env, mode: str, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="envlayer")
    marker = make_marker()
    env = make_env(sshd, exec_mode=mode)
    result, leaks = exec_while_scanning(env, marker)
    assert result.stdout_text == marker and leaks == []
    failed = env.exec("true", cwd="/nonexistent", env={"EL_TEST_SECRET": marker})
    assert failed.exit_code != 0 and marker not in failed.stderr_text
    assert marker not in caplog.text


def test_oneshot_variables_keep_exact_values(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, exec_mode="oneshot")
    value = "a'b\"c\\d %s $HOME `x`\n\nend\n"
    result = env.exec('printf %s "$V"', env={"V": value}, stdin="the command's own stdin")
    assert result.stdout_text == value
    assert env.exec("cat", env={"V": "x"}, stdin="stdin after the variables").stdout == b"stdin after the variables"


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_cli_secret_from_the_callers_environment(sshd: SSHServer, mode: str) -> None:
    marker = make_marker()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    options = {k: v for k, v in sshd.options(exec_mode=mode).items() if v is not None}
    args = ["--backend", "ssh"]
    for key, value in options.items():
        args += ["-o", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    done, leaks = cli_exec_while_scanning(args, marker, environ)
    assert done.returncode == 0 and done.stdout == marker, done.stderr
    assert leaks == [] and marker not in done.stderr
    environ["ENVLAYER_SSH_ENV"] = json.dumps({"TOKEN": marker})
    environ["ENVLAYER_SSH_PASSWORD"] = marker
    shown = subprocess.run([ENVLAYER_SCRIPT, "config", "--backend", "ssh"], capture_output=True, text=True, env=environ)
    assert shown.returncode == 0 and "TOKEN" in shown.stdout and marker not in shown.stdout + shown.stderr
