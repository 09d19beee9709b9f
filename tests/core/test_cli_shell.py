"""`envlayer shell` on the local backend, driven through a real terminal (tmux): output
appears, a window resize reaches the shell, the exit status passes through; without a
terminal it is refused."""

from __future__ import annotations

import os
from pathlib import Path

from tests.core.cli_run import ENVLAYER, run
from tests.core.tmux_terminal import Tmux, terminal

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}


def check_shell_session(t: Tmux, prompt: str) -> None:
    """The three checks every backend's ``shell`` passes (shared with the other backends'
    tests). Each command is typed at a fresh prompt (:meth:`Tmux.wait_for_prompt`)."""
    t.wait_for_prompt(prompt)
    t.send('echo hel""lo; stty size')
    t.wait_for(r"^hello$")
    t.wait_for(r"^24 80$")
    t.tmux("resize-window", "-t", "s", "-x", "100", "-y", "30")
    # tmux sets a pane's new size on its own schedule, and may type the next keys first:
    # ask again until the shell sees it (the resize must arrive, not before those keys)
    for _ in range(20):
        t.wait_for_prompt(prompt)
        t.send("stty size")
        if t.appears(r"^30 100$", 3):
            break
    else:
        t.wait_for(r"^30 100$", 0)
    t.wait_for_prompt(prompt)
    t.send("exit 3")
    t.wait_for(r"^EXIT=3$")
    t.wait_for(r"^TTY=cooked$")


def test_shell_on_local(tmp_path: Path) -> None:
    env = {**CLEAN_ENV, "PS1": "envlayer-test$ "}
    argv = [ENVLAYER, "shell", "--backend", "local", "-o", "shell=/bin/sh", "--task", "t1"]
    with terminal(argv, str(tmp_path), env) as t:
        check_shell_session(t, r"envlayer-test\$")


def test_shell_without_a_terminal_is_refused(tmp_path: Path) -> None:
    refused = run("shell", "--backend", "local", stdin="", cwd=tmp_path)
    assert refused.returncode == 1
    assert "needs a terminal on stdin and stdout" in refused.stderr
