"""The RPCs each scenario makes, as the fake server logged them: an SDK upgrade that
changes the wire (a renamed RPC, a new round trip, a V1 fallback) fails here loudly.

Each scenario runs in a child process with its own token id, which the fake logs as
the caller of every control-plane RPC and (through the router JWT) every router RPC.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from modal_testenv import APP, child_code

pytestmark = pytest.mark.modal

CONNECT = {"AuthTokenGet", "AppGetOrCreate"}
LOOKUP_MISS = {"SandboxGetFromNameV2", "SandboxGetFromName"}  # the SDK falls back to V1 on NOT_FOUND
CREATE = {"EnvironmentGetOrCreate", "ImageGetOrCreate", "SandboxCreateV2"}
ONESHOT_EXEC = {"TaskExecStart", "TaskExecStdinWrite", "TaskExecStdioRead", "TaskExecWait"}
ROUTER = {"SandboxGetTaskIdV2", "SandboxGetCommandRouterAccess"}  # a sandbox not created by this process


def _scenario(run_python: Any, fake_modal: Any, code: str) -> tuple[set[str], list[str]]:
    token = f"ak-wire-{uuid.uuid4().hex[:8]}"
    run_python(code, token=token)
    calls = fake_modal.calls(token)
    assert [c for c in calls if c["unimplemented"]] == []
    return {str(c["rpc"]) for c in calls}, [str(c.get("note", "")) for c in calls if c["rpc"] == "fs-tools"]


def test_create_exec_files_timeout(run_python: Any, fake_modal: Any, profile: str) -> None:
    code = child_code(f"wire-{uuid.uuid4().hex[:6]}", profile, exec_mode="oneshot") + (
        "env.exec('echo hi').check()\n"
        "env.write_file('w.txt', 'x')\n"
        "assert env.read_file('w.txt') == b'x'\n"
        "assert env.exec('sleep 30', timeout=1).timed_out\n"
    )
    rpcs, fs_ops = _scenario(run_python, fake_modal, code)
    # a write is one exec with the data on stdin (replaced atomically), no longer the
    # filesystem API's WriteFile over TaskExecStdinWriteStream; reads still go through it
    assert rpcs == CONNECT | LOOKUP_MISS | CREATE | ONESHOT_EXEC | {"fs-tools"}
    assert sorted(set(fs_ops)) == ["ReadFile", "Stat"]


def test_attach_exec_terminate(run_python: Any, fake_modal: Any, profile: str) -> None:
    task = f"wire-{uuid.uuid4().hex[:6]}"
    run_python(child_code(task, profile) + "print(env.sandbox_id)\n")
    code = child_code(task, profile, exec_mode="oneshot") + (
        "env.exec('echo hi').check()\nenv.cleanup(force_remove=True)\nassert env.wait_for_cleanup(30)\n"
    )
    rpcs, _ = _scenario(run_python, fake_modal, code)
    attach = {"SandboxGetFromNameV2", "SandboxTagsGetV2", "SandboxWaitV2", "SandboxTerminateV2"}
    assert rpcs == CONNECT | attach | ROUTER | ONESHOT_EXEC


def test_list_and_reap(run_python: Any, fake_modal: Any, profile: str) -> None:
    task = f"wire-{uuid.uuid4().hex[:6]}"
    reap_profile = f"{profile}-wire"
    run_python(child_code(task, reap_profile) + "print(env.sandbox_id)\n")
    code = (
        "from envlayer_modal.backend import ModalEnvironment\n"
        "from envlayer_modal.options import ModalOptions\n"
        f"opts = ModalOptions(app_name={APP!r})\n"
        f"assert len(ModalEnvironment.list_sandboxes(profile={reap_profile!r}, options=opts)) == 1\n"
        f"reaped = ModalEnvironment.reap_orphans(profile={reap_profile!r}, max_age=0, dry_run=False, options=opts)\n"
        "assert len(reaped) == 1\n"
    )
    rpcs, _ = _scenario(run_python, fake_modal, code)
    assert rpcs == CONNECT | {"SandboxListV2", "SandboxTagsGetV2", "SandboxTerminateV2"} | ROUTER | (
        ONESHOT_EXEC - {"TaskExecStdinWrite"}
    )


def test_session_calls_are_stdin_writes_on_one_exec(run_python: Any, fake_modal: Any, profile: str) -> None:
    code = child_code(f"wire-{uuid.uuid4().hex[:6]}", profile) + (
        "for i in range(5):\n    assert env.exec(f'echo {i}').stdout == f'{i}\\n'.encode()\n"
    )
    token = f"ak-wire-{uuid.uuid4().hex[:8]}"
    run_python(code, token=token)
    calls = [str(c["rpc"]) for c in fake_modal.calls(token)]
    assert not [c for c in fake_modal.calls(token) if c["unimplemented"]]
    assert set(calls) == CONNECT | LOOKUP_MISS | CREATE | ONESHOT_EXEC
    assert calls.count("TaskExecStart") == 1  # one shell for every command
    assert calls.count("TaskExecStdinWrite") >= 6  # the handshake, then one write per command
