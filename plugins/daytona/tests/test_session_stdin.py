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
import threading
import time
from collections.abc import Callable
from typing import Any

from daytona_testkit import FakeDaytona

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


def _writers() -> list[threading.Thread]:
    """The threads on which a session stream's writes wait for the SDK (``call_within``)."""
    return [thread for thread in threading.enumerate() if thread.name == "envlayer-write"]


def test_a_stalled_upload_of_raw_input_ends_at_the_deadline_on_the_client_too(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any]
) -> None:
    """Raw input over 16 KiB is uploaded to a file before the write: an upload stalled past
    the call's deadline makes the call a timeout, and the SDK request on the write's thread
    ends then too (the SDK's own limit is 30 minutes; the stall here 20 s)."""
    env = make_env(snapshot="envlayer-test:debian", request_timeout=600)
    env.exec("true").check()
    fake_daytona.delay_next("files.bulk-upload", 1, 20)
    result = returned_within(60, lambda: _send_raw(env, os.urandom(1 << 20), timeout=2), lambda: None)
    assert (result.exit_code, result.timed_out) == (124, True), result
    deadline = time.monotonic() + 15  # a hang bound short of the stall: the thread waits out the stall without the fix
    while _writers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _writers(), "the upload's request outlived the call's deadline"
    after = env.exec("echo back", timeout=60)
    assert (after.stdout, after.recovered) == (b"back\n", RESTARTED_AFTER_KILL), after


def test_a_stdin_upload_that_outlasts_the_timeout_is_a_timeout_and_nothing_runs(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any]
) -> None:
    """A command's stdin over 4 KiB goes to a file by the backend's upload first: stalled
    past the call's deadline, the call is a timeout in which the command never ran, and the
    shell goes on (nothing was sent to it)."""
    env = make_env()
    env.exec("true").check()
    fake_daytona.delay_next("files.bulk-upload", 1, 8)
    stdin = b"x" * 10_000
    result = returned_within(60, lambda: env.exec("touch ran; cat >/dev/null", stdin=stdin, timeout=2), lambda: None)
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
    after = env.exec("ls ran 2>/dev/null || echo 'did not run'")
    assert (after.stdout, after.recovered) == (b"did not run\n", ""), after
