"""`envlayer shell` against the real Docker daemon, driven through a real terminal
(tmux): the shell runs in the task's container (the one `exec --task` uses, so a file
made through the API is there), output appears, a window resize reaches it (exec_resize),
and the exit status passes through."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.core.cli_run import ENVLAYER
from tests.core.test_cli_shell import check_shell_session
from tests.core.tmux_terminal import terminal

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def test_shell_in_the_tasks_container(tmp_path: Path, make_env: Any, profile: str) -> None:
    env = make_env(task="shell-task")
    env.write_file("/tmp/marker", "made through the API\n")
    env.cleanup()  # persist mode: the container stays for the CLI
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(ENVLAYER_PROFILE=profile, ENVLAYER_DOCKER_IMAGE=IMAGE)
    with terminal([ENVLAYER, "shell", "--backend", "docker", "--task", "shell-task"], str(tmp_path), environ) as t:
        t.wait_for_prompt(r"workspace #")
        t.send("cat /tmp/marker")
        t.wait_for(r"^made through the API$")
        check_shell_session(t, r"workspace #")
