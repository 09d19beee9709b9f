"""`envlayer shell` against the real test sshd, driven through a real terminal (tmux):
the shell runs on the host with a pty in the environment's working directory and with
its variables (never left in a file), output appears, a window resize reaches it
(resize_pty), and the exit status passes through."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ssh_testserver import SSHServer

from tests.core.cli_run import ENVLAYER
from tests.core.test_cli_shell import check_shell_session
from tests.core.tmux_terminal import terminal


def _shell_argv(sshd: SSHServer, **overrides: object) -> list[str]:
    argv = [ENVLAYER, "shell", "--backend", "ssh", "--task", "shell-task"]
    for key, value in sshd.options(**overrides).items():
        if value is not None:
            argv += ["-o", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return argv


def test_shell_on_the_host(tmp_path: Path, sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, exec_mode="oneshot")
    workdir = env.exec("mktemp -d").stdout_text.strip()
    try:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
        argv = _shell_argv(sshd, cwd=workdir, env={"PS1": "ssh-shell$ ", "MARK": "from the env option"})
        with terminal(argv, str(tmp_path), environ) as t:
            t.wait_for_prompt(r"ssh-shell\$")
            t.send('pwd; echo "$MARK"; ls -a ~ | grep -c envlayer-shell-')
            t.wait_for(rf"^{workdir}$")
            t.wait_for(r"^from the env option$")
            t.wait_for(r"^0$")
            check_shell_session(t, r"ssh-shell\$")
    finally:
        env.exec(f"rm -rf {workdir}")
