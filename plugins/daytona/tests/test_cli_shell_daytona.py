"""`envlayer shell` against the fake Daytona toolbox, driven through a real terminal (tmux):
the shell runs on a PTY session (the SDK's WebSocket) in the task's sandbox (the one
`exec --task` uses, so a file made through the API is there), output appears, a window
resize reaches it (the toolbox's resize route), and the exit status passes through (the
daemon's exit message)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from daytona_testkit import FAKE_KEY, IMAGE

from tests.core.cli_run import ENVLAYER
from tests.core.test_cli_shell import check_shell_session
from tests.core.tmux_terminal import terminal


def test_shell_in_the_tasks_sandbox(tmp_path: Path, make_env: Any, profile: str, fake_daytona: Any) -> None:
    env = make_env(task="shell-task")
    env.write_file("/tmp/marker", "made through the API\n")
    env.cleanup()  # persist mode: the sandbox stays for the CLI; make_env deletes it at the end
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(
        DAYTONA_API_KEY=FAKE_KEY,
        ENVLAYER_PROFILE=profile,
        ENVLAYER_DAYTONA_API_URL=fake_daytona.url,
        ENVLAYER_DAYTONA_SNAPSHOT=IMAGE,
        ENVLAYER_DAYTONA_CWD="/workspace",
    )
    mark = fake_daytona.mark()
    with terminal([ENVLAYER, "shell", "--backend", "daytona", "--task", "shell-task"], str(tmp_path), environ) as t:
        t.wait_for_prompt(r"workspace #")
        t.send("cat /tmp/marker")
        t.wait_for(r"^made through the API$")
        check_shell_session(t, r"workspace #")
    routes = fake_daytona.routes_since(mark)
    assert {"process.pty.create-connect", "process.pty.resize"} <= routes, routes
