"""File permissions on a tmpfs path (``/tmp``, transferred through an exec) as uid 65534:
denials raise ``SandboxPermissionDenied`` (a ``PermissionError``), never a plain ``OSError``.
The root-filesystem path is covered by the kit's unprivileged run (test_conformance.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from envlayer.errors import SandboxPermissionDenied

pytestmark = pytest.mark.docker


def test_tmpfs_denials_as_nobody_are_permission_errors(make_env: Callable[..., Any]) -> None:
    env = make_env(user="65534:65534", cwd="/tmp", persist_across_processes=False)
    base = f"/tmp/perm-{uuid.uuid4().hex[:8]}"
    env.exec(f"mkdir {base} && printf secret > {base}/ro && chmod 444 {base}/ro").check()
    env.exec(f"printf x > {base}/unreadable && chmod 000 {base}/unreadable && mkdir {base}/locked").check()
    env.exec(f"chmod 555 {base}/locked").check()
    with pytest.raises(SandboxPermissionDenied, match="unreadable"):
        env.read_file(f"{base}/unreadable")
    with pytest.raises(SandboxPermissionDenied, match="ro"):
        env.write_file(f"{base}/ro", b"replaced")
    with pytest.raises(SandboxPermissionDenied, match="locked"):
        env.write_file(f"{base}/locked/deeper/new", b"x")
    env.exec(f"mkdir {base}/closed && printf x > {base}/closed/f && chmod 000 {base}/closed").check()
    with pytest.raises(SandboxPermissionDenied, match="closed"):
        env.read_file(f"{base}/closed/f")
    assert env.exec(f"cat {base}/ro").stdout == b"secret"
    assert env.exec(f"ls -A {base}/locked").stdout == b""
    env.write_file(f"{base}/fine", b"ok")
    assert env.read_file(f"{base}/fine") == b"ok"
