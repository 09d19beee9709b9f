"""A command's stdin through the session shell on a real container: over 4 KiB it travels
raw behind the command's script (no upload exec), whole, never run as commands, and within
the call's deadline."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import pytest

from envlayer.execution.shell_script import INPUT_LOST
from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.testing.fixtures import returned_within

pytestmark = pytest.mark.docker

_STAGED = "ls -A /tmp/.envlayer-session-*/ | grep -c '^in-' || true"
"""Counts the staged stdin files left in the session's private directory."""


@pytest.mark.parametrize("image", ["envlayer-test:debian", "envlayer-test:busybox"])
def test_binary_stdin_of_any_size_reaches_the_command_whole(make_env: Callable[..., Any], image: str) -> None:
    env = make_env(image=image, persist_across_processes=False)
    env.exec("cd /tmp; kept=1").check()
    for size in (0, 1, 100 * 1024, 3 << 20):
        data = os.urandom(size).replace(b"\x01", b"\0") + (b"\ntouch /tmp/pwned\n" if size > 1 else b"")
        result = env.exec("sha256sum; od -An -tx1 /proc/self/fd/0 | head -c 12", stdin=data)
        assert result.exit_code == 0, result
        digest, _, first = result.stdout.partition(b"  -\n")
        assert digest.decode() == hashlib.sha256(data).hexdigest(), size
        assert first.split() == [b"%02x" % b for b in data[:4]], size
    after = env.exec('echo "$kept $PWD"; test -e /tmp/pwned || echo clean; ' + _STAGED)
    assert (after.stdout, after.recovered) == (b"1 /tmp\nclean\n0\n", ""), after


def test_stdin_the_shell_cannot_take_is_never_run_and_the_restart_is_told(make_env: Callable[..., Any]) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("ulimit -f 0").check()  # head is killed by its first write of the stdin
    result = env.exec("cat >/dev/null; echo ran", stdin=b"touch /tmp/pwned\n" * 5000)
    assert (result.exit_code, result.stdout) == (INPUT_LOST, b""), result
    after = env.exec("test -e /tmp/pwned || echo clean; ulimit -f; " + _STAGED)
    assert (after.stdout, after.recovered) == (b"clean\nunlimited\n0\n", RESTARTED_AFTER_KILL), after


def test_a_timeout_while_stdin_is_sent_kills_and_the_next_call_says_restarted(
    make_env: Callable[..., Any], docker_api: Any
) -> None:
    env = make_env(image="envlayer-test:debian", persist_across_processes=False)  # head from PATH: not BusyBox
    stuck = 'mkdir -p stuck && printf "#!/bin/sh\\nexec sleep 600\\n" > stuck/head && chmod +x stuck/head'
    env.exec(f'{stuck} && export PATH="$PWD/stuck:$PATH"').check()  # the shell acknowledges, then takes nothing
    assert env.exec("command -v head").stdout.endswith(b"/stuck/head\n")  # not on a noexec /tmp
    result = returned_within(
        60,
        lambda: env.exec("cat >/dev/null; echo ran", stdin=os.urandom(8 << 20), timeout=2),
        lambda: docker_api.kill(env.container_id),  # unblocks the send
    )
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
    after = env.exec("echo back; pgrep -f 'sleep 600' || echo 'no sleep'; " + _STAGED)
    assert (after.stdout, after.recovered) == (b"back\nno sleep\n0\n", RESTARTED_AFTER_KILL), after
