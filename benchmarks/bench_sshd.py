"""A loopback sshd for the benchmarks that have SSH cases (the SSH tests' server)."""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "ssh", "tests"))


def start_optional_sshd(skip: bool) -> tuple[Any, dict[str, Any]]:
    """``(server, options)`` of a started loopback sshd, or ``(None, {})`` when ``skip`` is
    set or the machine lacks what it needs (then says why). The caller closes the server."""
    if skip:
        return None, {}
    from ssh_testserver import SSHServer, requirements_missing

    missing = requirements_missing()
    if missing:
        print(f"ssh cases skipped: {missing}")
        return None, {}
    server = SSHServer()
    server.start()
    return server, server.options()
