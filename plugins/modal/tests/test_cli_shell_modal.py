"""`envlayer shell` against the fake Modal server, driven through a real terminal (tmux):
the shell runs on a pty (``Sandbox.exec(pty=True)``) in the task's sandbox (the one
`exec --task` uses, so a file made through the API is there), output appears, the pty has
the window's size, and the exit status passes through. The SDK cannot resize an exec's
pty, so a window resize must leave the shell working at its first size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from modal_testenv import APP, IMAGE

from tests.core.cli_run import ENVLAYER
from tests.core.tmux_terminal import terminal


def test_shell_in_the_tasks_sandbox(tmp_path: Path, make_env: Any, profile: str, fake_modal: Any) -> None:
    env = make_env(task="shell-task")
    env.write_file("/tmp/marker", "made through the API\n")
    env.cleanup()  # persist mode: the sandbox stays for the CLI; make_env removes it at the end
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(fake_modal.env(), ENVLAYER_PROFILE=profile, ENVLAYER_MODAL_IMAGE=IMAGE, ENVLAYER_MODAL_APP_NAME=APP)
    with terminal([ENVLAYER, "shell", "--backend", "modal", "--task", "shell-task"], str(tmp_path), environ) as t:
        t.wait_for_prompt(r"workspace #")
        t.send('cat /tmp/marker; echo hel""lo; stty size')
        t.wait_for(r"^made through the API$")
        t.wait_for(r"^hello$")
        t.wait_for(r"^24 80$")
        t.tmux("resize-window", "-t", "s", "-x", "100", "-y", "30")
        t.wait_for_prompt(r"workspace #")
        t.send('echo still""here; stty size')
        t.wait_for(r"^stillhere$")
        assert t.screen().count("24 80\n") == 2, t.screen()  # no resize reaches the pty
        t.wait_for_prompt(r"workspace #")
        t.send("exit 3")
        t.wait_for(r"^EXIT=3$")
        t.wait_for(r"^TTY=cooked$")
