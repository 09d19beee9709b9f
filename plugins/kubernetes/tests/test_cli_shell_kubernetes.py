"""`envlayer shell` against the fake API server (the real ``kubernetes`` client; pods are
Docker containers), driven through a real terminal (tmux): the shell runs with a tty in
the task's pod (the one `exec --task` uses, so a file made through the API is there) with
the caller's TERM (from the variables file, which is gone by the prompt), output
appears, a window resize reaches it (the exec's resize channel) and the exit status passes
through (the status channel)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.core.cli_run import ENVLAYER
from tests.core.test_cli_shell import check_shell_session
from tests.core.tmux_terminal import terminal


@pytest.mark.parametrize("server", ["fake_apiserver", "fake_apiserver_v4"])
def test_shell_in_the_tasks_pod(
    tmp_path: Path, server: str, make_env: Any, profile: str, control: Any, request: pytest.FixtureRequest
) -> None:
    fake_apiserver = request.getfixturevalue(server)  # v5, or only v4 offered
    env = make_env(task="shell-task", kubeconfig=fake_apiserver.kubeconfig)
    env.write_file("/tmp/marker", "made through the API\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(ENVLAYER_KUBERNETES_KUBECONFIG=fake_apiserver.kubeconfig, TERM="vt220")
    argv = [ENVLAYER, "shell", "--backend", "kubernetes", "--profile", profile, "--task", "shell-task"]
    argv += ["-o", f"image={control.IMAGE}", "-o", "startup_timeout=60"]
    with terminal(argv, str(tmp_path), environ) as t:
        t.wait_for_prompt(r"workspace #")
        t.send('cat /tmp/marker; echo "term=$TERM"; ls -a /tmp | grep -c envlayer-shell-')
        t.wait_for(r"^made through the API$")
        t.wait_for(r"^term=vt220$")
        t.wait_for(r"^0$")
        check_shell_session(t, r"workspace #")
