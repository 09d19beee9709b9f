"""A command's stdin through the session shell on the fake API server, sent to a shell that
takes none of it: the exec websocket stalls (the fake stops reading a stdin frame that the
process does not take, as the API server's ``wsstream`` does: FAKE_APISERVER.md), and the
call ends as a timeout at its deadline instead of waiting for the pod to read."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.testing.fixtures import returned_within

NAMESPACE = "envlayer-test"
STDIN_BYTES = 32 << 20
"""More than the path to a pod buffers before it stalls the client: the socket buffers of
loopback TCP (the client's send buffer grows to ``net.ipv4.tcp_wmem``'s 4 MiB here), the
fake's 512 KiB queue, Docker's stream and the pipe held 4.5 to 8 MiB in trials, so a
smaller stdin would all be sent at once and never test the deadline."""

_STAGED = "ls -A /tmp/.envlayer-session-*/ | grep -c '^in-' || true"
"""Counts the staged stdin files left in the session's private directory."""


def _put_a_stuck_head_first(env: Any) -> None:
    """A ``head`` first on the session's PATH that never reads: the shell acknowledges a
    call's stdin, then takes none of it (as a shell that stopped)."""
    stuck = 'mkdir -p stuck && printf "#!/bin/sh\\nexec sleep 600\\n" > stuck/head && chmod +x stuck/head'
    env.exec(f'{stuck} && export PATH="$PWD/stuck:$PATH"').check()
    assert env.exec("command -v head").stdout.endswith(b"/stuck/head\n")  # not on a noexec /tmp


def _kill_pod_container(pod: str) -> None:
    """SIGKILL the Docker container behind ``pod`` (breaks every exec into it)."""
    import docker

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    try:
        for found in api.containers(filters={"label": f"envlayer-fake-pod={NAMESPACE}.{pod}"}):
            api.kill(found["Id"])
    finally:
        api.close()


def test_a_timeout_while_stdin_is_sent_kills_and_the_next_call_says_restarted(make_env: Callable[..., Any]) -> None:
    env = make_env(image="envlayer-test:debian")  # head from PATH: not BusyBox's applet
    _put_a_stuck_head_first(env)
    result = returned_within(
        60,
        lambda: env.exec("cat >/dev/null; echo ran", stdin=os.urandom(STDIN_BYTES), timeout=2),
        lambda: _kill_pod_container(env.pod_name),  # unblocks the send
    )
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
    after = env.exec("echo back; pgrep -f 'sleep [6]00' || echo 'no sleep'; " + _STAGED)
    assert (after.stdout, after.recovered) == (b"back\nno sleep\n0\n", RESTARTED_AFTER_KILL), after
