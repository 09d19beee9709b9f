"""Opt-in tests against REAL Modal, to check the fake's assumptions (ASSUMPTIONS.md).

They run only when ``MODAL_TOKEN_ID`` and ``MODAL_TOKEN_SECRET`` are set when pytest starts
(and never under ``CI=true``); each creates at most two small sandboxes in the App
``envlayer-live-tests`` and terminates them. Every test runs in a child process with the
original environment, so the fake server of the other tests is never involved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from modal_testenv import LIVE_CREDENTIALS, LIVE_ENV

pytestmark = [
    pytest.mark.live,
    pytest.mark.modal,
    pytest.mark.skipif(
        not LIVE_CREDENTIALS, reason="live Modal tests need MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (they cost money)"
    ),
    pytest.mark.skipif(os.environ.get("CI") == "true", reason="live Modal tests never run in CI"),
]

PRELUDE = """
from envlayer_modal.backend import ModalEnvironment
from envlayer_modal.options import ModalOptions
opts = ModalOptions(app_name="envlayer-live-tests", image="python:3.11-slim", idle_timeout=120, sandbox_timeout=600)
"""


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        env=LIVE_ENV,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_live_exec_files_timeout_and_cleanup() -> None:
    task = f"live-{uuid.uuid4().hex[:8]}"
    _run(
        f"""
        env = ModalEnvironment(opts, task_id={task!r}, profile="envlayer-live")
        try:
            r = env.exec("echo out; echo err >&2; exit 3")
            assert (r.stdout, r.stderr, r.exit_code) == (b"out\\n", b"err\\n", 3), r
            env.write_file("x/y.bin", b"\\x00data")
            assert env.read_file("x/y.bin") == b"\\x00data"
            t = env.exec("sleep 60 & sleep 61", timeout=2)
            assert t.timed_out and t.exit_code == 124, t
            assert env.exec("ps -eo args | grep -c '[s]leep 6'").stdout.strip() == b"0"
            assert env.exec("cd /tmp && export K=v").ok and env.exec("pwd; echo $K").stdout == b"/tmp\\nv\\n"
        finally:
            env.cleanup(force_remove=True)
            assert env.wait_for_cleanup(60)
        """
    )


def test_live_names_are_unique_per_app_and_attach_works() -> None:
    task = f"live-{uuid.uuid4().hex[:8]}"
    out = _run(
        f"""
        a = ModalEnvironment(opts, task_id={task!r}, profile="envlayer-live")
        b = ModalEnvironment(opts, task_id={task!r}, profile="envlayer-live")
        print(a.sandbox_id == b.sandbox_id)
        a.cleanup(force_remove=True)
        a.wait_for_cleanup(60)
        """
    )
    assert out.strip() == "True"


def test_live_a_sandbox_ended_under_the_holder_long_commands_and_symlinks() -> None:
    """What only real Modal can show for issue 21: what the router answers for a sandbox
    terminated under its holder (printed, so the fake's ``ended_router_status`` choices can
    be checked) and that the next call recreates it; a 100 KB one-shot command; the size
    cap on a symlink's target (``filesystem.stat`` of a symlink, and its ``symlink_target``)."""
    task = f"live-{uuid.uuid4().hex[:8]}"
    out = _run(
        f"""
        import dataclasses
        import modal
        from envlayer.errors import FileTooLarge
        env = ModalEnvironment(opts, task_id={task!r}, profile="envlayer-live")
        small_opts = dataclasses.replace(opts, exec_mode="oneshot", max_file_bytes=1000)
        small = ModalEnvironment(small_opts, task_id={task!r}, profile="envlayer-live")
        try:
            assert small.exec("v=" + "x" * 100000 + "; echo ${{#v}}").stdout == b"100000\\n"
            small.exec("head -c 5000 /dev/zero > big.bin && ln -sf big.bin link").check()
            info = small._attached.sandbox.filesystem.stat(small.options.workdir + "/link")
            print("stat of a symlink:", info.type, info.size, info.symlink_target)
            try:
                small.read_file("link")
                raise AssertionError("the cap did not hold for the symlink's target")
            except FileTooLarge:
                pass
            gone = env.sandbox_id
            modal.Sandbox.from_id(gone).terminate(wait=True)
            try:
                env._attached.sandbox.exec("true").wait()
                print("router answer for an ended sandbox: none (the exec ran)")
            except Exception as exc:
                print("router answer for an ended sandbox:", type(exc).__name__, exc)
            r = env.exec("echo back")
            assert r.stdout == b"back\\n" and r.recovered == "sandbox recreated", r
            assert env.sandbox_id != gone
        finally:
            env.cleanup(force_remove=True)
            assert env.wait_for_cleanup(60)
        """
    )
    assert "router answer" in out, out
