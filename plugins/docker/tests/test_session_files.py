"""File calls through the session shell on a real container: which path a call takes is
told at debug level on ``envlayer.files`` (nothing silent), and what the session path
must not do (run as root, touch the session's state) it does not do."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from envlayer.errors import SandboxPermissionDenied

pytestmark = pytest.mark.docker


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "envlayer.files"]


def _exists_by_transport(env: Any, path: str) -> bool:
    try:
        env.fetch_file(path, 1024)
    except FileNotFoundError:
        return False
    return True


def test_small_files_take_the_session_and_large_ones_say_why_not(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("true").check()
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    env.write_file("small.bin", b"\x00\xff" * 512)
    assert env.read_file("small.bin") == b"\x00\xff" * 512
    assert _fallbacks(caplog) == [], "a 1 KiB file must travel through a free session"
    big = b"x" * (1_048_576 + 1)
    env.write_file("big.bin", big)
    assert env.read_file("big.bin") == big
    said = _fallbacks(caplog)
    assert any("write_file" in m and "larger than the session's 1048576 bytes" in m for m in said), said
    assert any("read_file" in m and "larger than the session's 1048576 bytes" in m for m in said), said


def test_a_busy_session_is_a_logged_fallback(make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    env = make_env(persist_across_processes=False)
    flag = f"/tmp/busy-{uuid.uuid4().hex[:8]}"
    runner = threading.Thread(target=lambda: env.exec(f"touch {flag}; while [ ! -e {flag}.stop ]; do sleep 0.1; done"))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not _exists_by_transport(env, flag):  # never through the session: the command must get it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        caplog.set_level(logging.DEBUG, logger="envlayer.files")
        env.write_file("during.txt", b"while busy")
        assert env.read_file("during.txt") == b"while busy"
    finally:
        env.store_file(f"{flag}.stop", b"")
        runner.join(60)
    said = _fallbacks(caplog)
    assert sum("session shell is busy" in m for m in said) == 2, said


def test_the_session_path_keeps_the_users_rights_and_the_sessions_state(make_env: Callable[..., Any]) -> None:
    env = make_env(user="65534:65534", cwd="/tmp", persist_across_processes=False)
    env.exec("cd /; export KEEP=1; set -u").check()
    env.exec("printf secret > /tmp/s && chmod 000 /tmp/s").check()
    with pytest.raises(SandboxPermissionDenied):
        env.read_file("/tmp/s")
    env.write_file("/tmp/fine.txt", b"ok")
    assert env.read_file("/tmp/fine.txt") == b"ok"
    after = env.exec('printf "%s %s" "$PWD" "$KEEP"; case $- in *u*) echo " u";; esac')
    assert after.stdout == b"/ 1 u\n", "a file call changed the session's directory, variables or options"
