"""The in-container idle check (:mod:`envlayer.sandbox.idle_check`) run by BusyBox ``sh``
in the test image, on a process table it scans while processes come and go."""

from __future__ import annotations

import os
import uuid
from typing import Any

from envlayer_docker import reaper

from envlayer.sandbox.idle_check import is_whole_verdict, parse_idle_check

FAKE_PROC = "/tmp/fake-proc"
IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def _check_on_fake_proc(docker_api: Any, image: str, setup: str) -> bytes:
    """Run the reaper's check in a throwaway container whose ``/proc`` scan is pointed at
    ``FAKE_PROC`` (prepared by the shell text ``setup``); its stdout and stderr together,
    as Docker returns them to a plain ``exec_start``; asked again (up to 3 times) when the
    reply is empty, as a loaded daemon returns it (see :class:`_FirstReplyLost`). The
    container is removed."""
    script = reaper.IDLE_CHECK.replace("/proc/", FAKE_PROC + "/")
    assert script != reaper.IDLE_CHECK
    name = f"envlayer-idlecheck-{uuid.uuid4().hex[:8]}"
    cid = docker_api.create_container(image, ["sleep", "600"], name=name)["Id"]
    try:
        docker_api.start(cid)
        out = b""
        for _ in range(3):
            eid = docker_api.exec_create(cid, ["/bin/sh", "-c", setup + "\n" + script])["Id"]
            out = docker_api.exec_start(eid)
            if out:
                break
        return out
    finally:
        docker_api.remove_container(cid, force=True, v=True)


def test_a_session_shell_that_exits_mid_scan_leaves_the_check_parseable(docker_api) -> None:
    """A process seen by the glob and by the ``environ`` grep but gone before its ``stat``
    is read (here: an entry with ``environ`` and no ``stat``) is simply not busy: the
    shell's "cannot open" error for the failed redirection must not reach the output
    (it once made the output unparseable, so a truly idle container was kept)."""
    setup = f"mkdir -p {FAKE_PROC}/4242 && printf 'ENVLAYER_SESSION=abc\\0' > {FAKE_PROC}/4242/environ"
    out = _check_on_fake_proc(docker_api, IMAGE, setup)
    assert parse_idle_check(out, 0.0, 0.0) is True, out


def test_a_running_session_shell_is_still_busy(docker_api) -> None:
    """The same scan with the process still there and in state R: busy, kept."""
    setup = (
        f"mkdir -p {FAKE_PROC}/4242 && printf 'ENVLAYER_SESSION=abc\\0' > {FAKE_PROC}/4242/environ"
        f" && echo '4242 (sh) R 1 4242' > {FAKE_PROC}/4242/stat"
    )
    out = _check_on_fake_proc(docker_api, IMAGE, setup)
    assert out.split()[2:] == [b"1"], out


class _FirstReplyLost:
    """The real Docker API client, except that the first ``exec_start`` returns what a
    loaded daemon returns when it gave up copying the exec's output: nothing. (dockerd
    waits at most 2 s for the copy after the exec exits, then closes the streams: moby
    ``daemon/monitor.go``, ``Daemon.ProcessEvent``, case ``EventExit``.)"""

    def __init__(self, api: Any) -> None:
        self._api = api
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def exec_start(self, exec_id: str, **kwargs: Any) -> Any:
        reply = self._api.exec_start(exec_id, **kwargs)
        if self.lost:
            return reply
        self.lost += 1
        return (None, None) if kwargs.get("demux") else b""


def test_a_lost_check_reply_is_asked_again_not_taken_as_busy(make_env, docker_api, profile) -> None:
    """An idle container whose first check reply was lost in transport is still found idle."""
    own = profile + "-lostreply"
    idle = make_env(prof=own, lease_interval=0)
    idle.exec("true")
    api = _FirstReplyLost(docker_api)
    found = reaper.reclaim_idle(api, profile=own, idle_after=0.0, dry_run=True)
    assert api.lost == 1
    assert [i.detail["container_id"] for i in found] == [idle.container_id[:12]]


def test_only_the_whole_line_is_a_verdict() -> None:
    assert is_whole_verdict(b"1000 900 0\n") and is_whole_verdict(b"1000 - 1\n")
    for damaged in (b"", b"1000 9", b"1000 900 0", b"sh: can't open x\n1000 900 0\n", b"1000 900 0\n1\n"):
        assert not is_whole_verdict(damaged), damaged
