"""A snapshot and a fork whose slow steps outlast ``api_timeout``: the requests whose
duration grows with the task's data, the commit of the container's own layer and the wait
for the copy of its durable volumes, are not bound by ``api_timeout`` (meant for requests
that take about as long whatever the data), so a big workspace does not fail them. A
fork's own requests (its overlay volumes, its container's create and start) copy nothing
and keep ``api_timeout``.

A proxy in front of the daemon (``socket_proxy.py``) delays those two requests well past
a small ``api_timeout``, as a big layer or workspace would on any machine, without writing
gigabytes. Real daemon; what the test makes is removed also when it fails: the fork by
its fixture, the parent and its volumes by ``make_env``, the snapshot by the fork call
itself, and whatever a failed request left (a commit that the daemon finished after the
client gave up) by the session finalizer in conftest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

DAEMON_SOCKET = "/var/run/docker.sock"
API_TIMEOUT = 2.0
SLOW = 2 * API_TIMEOUT
"""Seconds the proxy holds each slow request before the daemon sees it."""
SLOW_REQUESTS = r"POST /v[0-9.]+/(commit\?|containers/[^/ ]+/wait[? ])"
"""The request lines of the commit and of the wait for a container (the copy's helper)."""


@dataclass(frozen=True)
class SlowDaemon:
    """The daemon behind the delaying proxy: its address, and the proxy's log."""

    address: str
    log: Path

    def delayed(self) -> str:
        """The request lines the proxy has delayed so far, one ``delayed <line>`` a line."""
        return self.log.read_text()


@pytest.fixture
def slow_daemon(tmp_path: Path) -> Iterator[SlowDaemon]:
    """A proxy to the daemon that delays :data:`SLOW_REQUESTS` by :data:`SLOW` seconds;
    killed at the end of the test."""
    if not os.access(DAEMON_SOCKET, os.R_OK | os.W_OK):
        pytest.skip(f"needs direct access to {DAEMON_SOCKET}")
    listen, log = tmp_path / "docker.sock", tmp_path / "delayed.log"
    script = os.path.join(os.path.dirname(__file__), "socket_proxy.py")
    argv = [sys.executable, script, str(listen), DAEMON_SOCKET, str(SLOW), SLOW_REQUESTS]
    with log.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", log.read_text()
        yield SlowDaemon(f"unix://{listen}", log)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_snapshot_and_its_fork_outlast_api_timeout(slow_daemon: SlowDaemon, make_env: Any, forks: list[Any]) -> None:
    """With ``api_timeout`` 2 s, a snapshot whose commit and copy are each answered 4 s
    late is taken, and a fork of it starts with the parent's workspace and layer."""
    parent = make_env(docker_host=slow_daemon.address, api_timeout=API_TIMEOUT)
    made = parent.exec("mkdir -p sub && echo base > sub/file && echo layer > /etc/marker")
    assert made.exit_code == 0, made.stderr_text
    [fork] = parent.fork([f"{parent.task_id}-fork"])  # a snapshot taken now, removed once the fork exists
    forks.append(fork)
    assert fork.exec("cat sub/file /etc/marker").stdout == b"base\nlayer\n"  # the copied workspace, the layer
    delayed = slow_daemon.delayed()
    assert "/commit?" in delayed and "/wait" in delayed, f"the slow requests were not delayed: {delayed!r}"
