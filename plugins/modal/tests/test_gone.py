"""A sandbox that Modal ended while an environment held it (idle timeout, a crash,
`modal sandbox terminate`), whatever the command router answers for it afterwards:
"gone" is decided from the control plane (``SandboxWaitV2``), not from one error code."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from modal_testenv import APP, IMAGE, running

from envlayer.errors import BackendUnavailable

pytestmark = pytest.mark.modal

ROUTER_ANSWERS = ["UNAVAILABLE", "NOT_FOUND", "FAILED_PRECONDITION"]
BROKER_TESTS = Path(__file__).resolve().parents[3] / "tests" / "broker"


def _end_from_outside(sandbox_id: str) -> None:
    """Terminate the sandbox through another client, as `modal sandbox terminate` does,
    and wait (bounded) until the control plane reports it ended."""
    import modal

    other = modal.Sandbox.from_id(sandbox_id)
    other.terminate()
    deadline = time.monotonic() + 30
    while other.poll() is None:
        assert time.monotonic() < deadline, "the sandbox did not end"
        time.sleep(0.1)


@pytest.mark.parametrize("exec_mode", ["session", "oneshot"])
@pytest.mark.parametrize("answer", ROUTER_ANSWERS)
def test_persist_sandbox_ended_under_the_holder_is_recreated(
    make_env: Any, faults: Any, answer: str, exec_mode: str
) -> None:
    env = make_env(exec_mode=exec_mode)
    env.exec("echo warm > /tmp/state").check()
    gone = env.sandbox_id
    faults(ended_router_status=answer)
    _end_from_outside(gone)
    result = env.exec("echo back; cat /tmp/state 2>/dev/null || echo fresh")
    assert result.stdout == b"back\nfresh\n", result
    assert result.recovered == "sandbox recreated", result.recovered
    assert env.sandbox_id != gone
    assert env.exec("echo again").recovered == ""


@pytest.mark.parametrize("exec_mode", ["session", "oneshot"])
def test_a_sandbox_ended_with_its_router_silent_is_recreated_not_waited_on(
    make_env: Any, faults: Any, exec_mode: str
) -> None:
    """A worker that vanished without a word: the router never answers for the ended
    sandbox, and the SDK puts no deadline on starting a command or writing its stdin. The
    control plane says the sandbox ended, so the call runs in a new sandbox instead of
    waiting forever."""
    env = make_env(exec_mode=exec_mode)
    env.exec("true").check()
    gone = env.sandbox_id
    faults(ended_router_status="SILENT")
    _end_from_outside(gone)
    results: list[Any] = []
    call = threading.Thread(target=lambda: results.append(env.exec("echo back")), daemon=True)
    call.start()
    call.join(timeout=60)
    assert results, "the call still waited on the silent router after 60 s"
    assert (results[0].stdout, results[0].recovered) == (b"back\n", "sandbox recreated"), results[0]
    assert env.sandbox_id != gone


@pytest.mark.parametrize("answer", ROUTER_ANSWERS)
def test_files_after_the_sandbox_ended_recreate_it(make_env: Any, faults: Any, answer: str) -> None:
    env = make_env()
    gone = env.sandbox_id
    faults(ended_router_status=answer)
    _end_from_outside(gone)
    env.write_file("note.txt", "new")
    assert env.read_text("note.txt") == "new" and env.sandbox_id != gone


@pytest.mark.parametrize("answer", ["UNAVAILABLE", "NOT_FOUND"])
def test_private_sandbox_ended_under_the_holder_is_a_clear_error(make_env: Any, faults: Any, answer: str) -> None:
    env = make_env(persist_across_processes=False, exec_mode="oneshot")
    gone = env.sandbox_id
    faults(ended_router_status=answer)
    _end_from_outside(gone)
    with pytest.raises(BackendUnavailable) as info:
        env.exec("echo never")
    assert "ended" in str(info.value) and gone in str(info.value)
    assert "new environment" in info.value.hint


@pytest.mark.parametrize("answer", ROUTER_ANSWERS)
def test_a_sandbox_ended_under_the_broker_is_recreated_on_the_next_cli_call(
    fake_modal: Any, faults: Any, tmp_path: Path, answer: str
) -> None:
    """`envlayer exec` through the session broker (a real `envlayer` process holding the
    environment): Modal ends the sandbox between two calls; the second call works, in a new
    sandbox, from the same broker."""
    sys.path.insert(0, str(BROKER_TESTS))
    from broker_helpers import BrokerRun

    brk = BrokerRun(tmp_path)
    brk.env.update(fake_modal.env("ak-envlayer-broker"))
    brk.env.update(ENVLAYER_BACKEND="modal", ENVLAYER_MODAL_IMAGE=IMAGE, ENVLAYER_MODAL_APP_NAME=APP)
    try:
        first = brk.run("exec", "--task", "t", "--", "echo one")
        assert first.returncode == 0 and first.stdout == "one\n", first.stderr
        [broker] = brk.broker_pids()
        [gone] = running("t", brk.profile)
        faults(ended_router_status=answer)
        _end_from_outside(gone)
        again = brk.run("exec", "--json", "--task", "t", "--", "echo two")
        assert again.returncode == 0, again.stdout + again.stderr
        reply = json.loads(again.stdout)
        assert (reply["stdout"], reply["recovered"]) == ("two\n", "sandbox recreated")
        assert brk.broker_pids() == [broker]
        assert running("t", brk.profile) not in ([], [gone])
    finally:
        brk.close()
        import modal

        for sandbox_id in running("t", brk.profile):
            modal.Sandbox.from_id(sandbox_id).terminate()
