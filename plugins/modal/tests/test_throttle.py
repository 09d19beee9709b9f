"""Throttling and transient control-plane errors: the fake answers RESOURCE_EXHAUSTED
(without the retry policy the SDK would honour by itself) or UNAVAILABLE (more often than
the SDK's own 3 retries) for the next calls of one RPC; the call still succeeds, and each
retry is logged."""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytestmark = pytest.mark.modal


def _retries(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "envlayer.modal" and "retrying in" in r.getMessage()]


def test_a_create_never_fails_on_the_first_throttle(make_env: Any, faults: Any, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="envlayer.modal")
    faults(fail_next={"SandboxCreateV2": ["RESOURCE_EXHAUSTED", 2]})
    env = make_env()
    assert env.exec("echo up").stdout == b"up\n"
    assert len(_retries(caplog)) == 2 and "RESOURCE_EXHAUSTED" in _retries(caplog)[0]


@pytest.mark.parametrize("status", ["RESOURCE_EXHAUSTED", "UNAVAILABLE"])
def test_attach_outlasts_a_throttled_or_unavailable_control_plane(
    make_env: Any, faults: Any, caplog: Any, status: str
) -> None:
    caplog.set_level(logging.WARNING, logger="envlayer.modal")
    first = make_env()
    # The SDK retries UNAVAILABLE 3 times itself (6 failures outlast it), and
    # RESOURCE_EXHAUSTED without a retry hint not at all (4 failures: 4 retries of ours).
    times = 6 if status == "UNAVAILABLE" else 4
    faults(fail_next={rpc: [status, times] for rpc in ("SandboxGetFromNameV2", "SandboxTagsGetV2", "SandboxWaitV2")})
    second = make_env(first.task_id)
    assert second.sandbox_id == first.sandbox_id
    assert len(_retries(caplog)) >= 3


def test_listing_and_reaping_outlast_a_throttle(make_env: Any, faults: Any, profile: str, options: Any) -> None:
    from envlayer_modal.backend import ModalEnvironment

    env = make_env()
    faults(fail_next={"SandboxListV2": ["RESOURCE_EXHAUSTED", 1], "SandboxTerminateV2": ["RESOURCE_EXHAUSTED", 1]})
    listed = ModalEnvironment.list_sandboxes(profile=profile, options=options())
    assert env.sandbox_id in [i.id for i in listed]
    removed = ModalEnvironment.remove_sandbox(env.task_id, profile=profile, options=options(), force=True)
    assert [i.id for i in removed] == [env.sandbox_id]


@pytest.mark.parametrize("exec_mode", ["oneshot", "session"])
def test_a_command_start_outlasts_a_throttled_router(make_env: Any, faults: Any, caplog: Any, exec_mode: str) -> None:
    """RESOURCE_EXHAUSTED refuses the start before anything runs, so the start is retried;
    the command still runs exactly once."""
    caplog.set_level(logging.WARNING, logger="envlayer.modal")
    env = make_env(exec_mode=exec_mode)
    faults(fail_next={"TaskExecStart": ["RESOURCE_EXHAUSTED", 2]})
    result = env.exec("echo once >> /tmp/count; cat /tmp/count")
    assert result.stdout == b"once\n", result
    assert len(_retries(caplog)) == 2
