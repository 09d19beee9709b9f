"""Raw input to a session shell that takes none of it, on the fake Daytona: the stream's write
is one ``process/execute`` whose ``cat`` blocks on the shell's full FIFO, and the toolbox
holds that request until the command ends (the daemon's ``ExecuteCommand`` waits for it:
fake_daytona.md). The call ends as a timeout at its deadline, the next call says the shell
restarted, and the daemon's own timeout of the write ends the blocked ``cat`` soon after.

A user's stdin never travels this way on Daytona (the session uploads it to a file first),
nor do files (``session_file_max`` is 0): the raw input is sent by a script call through
``run_in_session``, as :mod:`envlayer.sandbox.files` sends a file's bytes on backends that
carry files through the session.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.request import ScriptRequest
from envlayer.result import ExecResult
from envlayer.testing.fixtures import returned_within

WRITERS = "pgrep -f 'cat /tmp/[.]envlayer-daytona/'"
"""Lists the stream writes' ``cat`` processes in the sandbox (the brackets keep the pattern
from matching the command that carries it)."""

WRITERS_GONE = f"for i in $(seq 300); do {WRITERS} >/dev/null || {{ echo no writer; break; }}; sleep 0.1; done"
"""Prints ``no writer`` once no stream write is left, waiting up to 30 s (a hang bound: the
daemon ends it a second or two after the call's deadline; the environment's
``request_timeout`` of 600 s is what a write not bounded by the deadline would wait)."""


def _put_a_stuck_head_first(env: Any) -> None:
    """A ``head`` first on the session's PATH that never reads: the shell acknowledges a
    call's raw input, then takes none of it (as a shell that stopped)."""
    stuck = 'mkdir -p stuck && printf "#!/bin/sh\\nexec sleep 600\\n" > stuck/head && chmod +x stuck/head'
    env.exec(f'{stuck} && export PATH="$PWD/stuck:$PATH"').check()
    assert env.exec("command -v head").stdout.endswith(b"/stuck/head\n")


def _send_raw(env: Any, data: bytes, timeout: float) -> ExecResult:
    """A session script call that takes ``data`` as its raw input into a file."""
    script = '__el_take "$PWD/taken.bin"'
    request = dataclasses.replace(ScriptRequest.build(script, timeout=timeout), raw_input=data)
    lock = env.session_lock()
    with lock:
        return env.run_in_session(request)


def test_a_timeout_while_raw_input_is_sent_kills_the_write_and_the_next_call_says_restarted(
    make_env: Callable[..., Any],
) -> None:
    env = make_env(snapshot="envlayer-test:debian", request_timeout=600)  # head from PATH: not BusyBox's applet
    _put_a_stuck_head_first(env)
    result = returned_within(
        60,
        lambda: _send_raw(env, os.urandom(3 << 20), timeout=2),
        lambda: env.exec("pkill -9 -f 'cat /tmp/[.]envlayer-daytona/'"),  # one-shot: ends the blocked write
    )
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
    after = env.exec(f"echo back; pgrep -f 'sleep [6]00' || echo 'no sleep'; {WRITERS_GONE}", timeout=60)
    assert (after.stdout, after.recovered) == (b"back\nno sleep\nno writer\n", RESTARTED_AFTER_KILL), after
