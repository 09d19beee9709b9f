"""A command's stdin through the SSH session shell on the real sshd: over 4 KiB it travels
raw over the channel behind the command's script (no SFTP upload), whole, never run as
commands, and within the call's deadline (the channel's window stops opening once the
shell stops taking the bytes)."""

from __future__ import annotations

import hashlib
import os
import random
import tracemalloc
from typing import Any

from ssh_testserver import SSHServer

from envlayer.execution.shell_script import INPUT_LOST
from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.testing.fixtures import returned_within


def test_binary_stdin_of_any_size_reaches_the_command_whole(sshd: SSHServer, make_env: Any) -> None:
    env = make_env(sshd)
    env.exec("cd /tmp; kept=1").check()
    for size in (0, 1, 100 * 1024, 3 << 20):
        data = os.urandom(size).replace(b"\x01", b"\0") + (b"\ntouch pwned-by-stdin\n" if size > 1 else b"")
        result = env.exec("sha256sum", stdin=data)
        assert result.stdout.split(b" ", 1)[0].decode() == hashlib.sha256(data).hexdigest(), (size, result)
    after = env.exec('echo "$kept $PWD"; test -e pwned-by-stdin || echo clean')
    assert (after.stdout, after.recovered) == (b"1 /tmp\nclean\n", ""), after


def test_stdin_the_shell_cannot_take_is_never_run_and_the_restart_is_told(sshd: SSHServer, make_env: Any) -> None:
    env = make_env(sshd)
    env.exec("ulimit -f 0").check()
    result = env.exec("cat >/dev/null; echo ran", stdin=b"touch /tmp/pwned-by-ssh-stdin\n" * 5000)
    assert (result.exit_code, result.stdout) == (INPUT_LOST, b""), result
    after = env.exec("test -e /tmp/pwned-by-ssh-stdin || echo clean; ulimit -f")
    assert (after.stdout, after.recovered) == (b"clean\nunlimited\n", RESTARTED_AFTER_KILL), after


def test_a_timeout_while_stdin_is_sent_kills_and_the_next_call_says_restarted(sshd: SSHServer, make_env: Any) -> None:
    env = make_env(sshd)
    nap = f"6{random.randrange(10**6):06d}"  # this test's own sleep, to look for afterwards
    stuck = env.exec(
        f'd=$(mktemp -d) && printf "#!/bin/sh\\nexec sleep {nap}\\n" > "$d/head" && chmod +x "$d/head" && echo "$d"'
    )
    d = stuck.check().stdout_text.strip()
    try:
        env.exec(f'export PATH="{d}:$PATH"').check()  # the shell acknowledges, then takes nothing
        shell = env._session.pid
        result = returned_within(
            60,
            lambda: env.exec("cat >/dev/null; echo ran", stdin=os.urandom(8 << 20), timeout=2),
            lambda: make_env(sshd, exec_mode="oneshot").exec(f"kill -9 -- -{shell}"),  # its group: head too
        )
        assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
        after = env.exec(f"echo back; pgrep -f 'sleep {nap}' || echo 'no sleep'")
        assert (after.stdout, after.recovered) == (b"back\nno sleep\n", RESTARTED_AFTER_KILL), after
    finally:
        env.exec(f"rm -rf -- {d}")


def test_stdin_goes_out_without_a_copy_of_what_is_left_at_each_send(sshd: SSHServer, make_env: Any) -> None:
    """paramiko takes at most a packet (32 KiB) a send: handing it a copy of the rest each
    time allocated the remainder per packet (quadratic: 50 MiB of stdin took 12 s). The
    session shell sends stdin as it is, so sending it allocates next to nothing."""
    env = make_env(sshd)
    env.exec("true").check()  # the connection and the session shell up before measuring
    size = 8 << 20
    data = os.urandom(size)
    tracemalloc.start()
    try:
        result = env.exec("wc -c", stdin=data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.stdout.split() == [str(size).encode()], result
    assert peak < size // 2, f"sending {size} bytes of stdin allocated up to {peak} bytes"
