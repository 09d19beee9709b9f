"""A restarted session shell is said on stderr, in words, once: `export A=1`, a call
that times out, then `echo $A` prints nothing, and that call's stderr says which state
was lost (real `envlayer` processes, the local backend through the broker)."""

from __future__ import annotations

import json

from broker_helpers import BrokerRun

from envlayer.cli.state_loss import state_loss_note
from envlayer.execution.shell_session import RESTARTED_AFTER_KILL


def test_the_call_after_a_timeout_says_what_the_new_shell_lost(brk: BrokerRun) -> None:
    assert brk.run("exec", "--task", "t", "--", "cd / && export A=1").returncode == 0
    assert brk.run("exec", "--task", "t", "--timeout", "1", "--", "sleep 30").returncode == 124
    after = brk.run("exec", "--task", "t", "--", "pwd; echo A=$A")
    assert after.returncode == 0 and after.stdout == "/\nA=\n"
    assert "session shell was restarted" in after.stderr
    assert "exported" in after.stderr and "working directory is kept" in after.stderr
    again = brk.run("exec", "--task", "t", "--", "true")
    assert "restarted" not in again.stderr  # said once
    assert brk.run("exec", "--task", "t", "--timeout", "1", "--", "sleep 30").returncode == 124
    as_json = brk.run("exec", "--task", "t", "--json", "--", "true")
    assert json.loads(as_json.stdout)["recovered"] == RESTARTED_AFTER_KILL  # the field is kept
    assert "session shell was restarted" in as_json.stderr


def test_a_recreated_sandbox_or_a_new_connection_names_what_is_gone() -> None:
    recreated = state_loss_note("container recreated")
    assert "(container recreated)" in recreated and "working directory" in recreated and "files" in recreated
    reconnected = state_loss_note("reconnected")
    assert "(reconnected)" in reconnected and "background jobs" in reconnected and "files" not in reconnected
