"""What a closed environment leaves behind in this process, and what the reaper touches:
``cleanup()`` releases the command-router connection (``Sandbox.detach``) in persist mode
and after terminating; the file-size cap holds for a symlink's target; the reaper's probe
does not keep alive a sandbox that Modal's own idle timeout would end."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlparse

import psutil
import pytest

from envlayer.errors import FileTooLarge

pytestmark = pytest.mark.modal


def _connections_to(url: str) -> int:
    port = urlparse(url).port
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port)


def _settled(url: str, want: int, timeout: float = 10.0) -> int:
    """The number of this process's connections to ``url`` once it is at most ``want``
    (closing a channel is asynchronous), or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (count := _connections_to(url)) > want and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


@pytest.mark.parametrize("how", ["persist", "force_remove", "private"])
def test_cleanup_releases_the_router_connection(make_env: Any, fake_modal: Any, how: str) -> None:
    make_env().exec("true").check()  # the control-plane channel exists from here on
    before = _connections_to(fake_modal.url)
    for _ in range(3):
        env = make_env(persist_across_processes=how != "private", exec_mode="oneshot")
        env.exec("true").check()
        env.cleanup(force_remove=how == "force_remove")
        assert env.wait_for_cleanup(30)
    assert _settled(fake_modal.url, before) <= before


def test_a_terminated_persist_sandbox_can_still_be_force_removed_after_cleanup(make_env: Any) -> None:
    import modal

    env = make_env()
    env.cleanup()
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(30)
    assert modal.Sandbox.from_id(env.sandbox_id).poll() is not None


def test_the_file_size_cap_checks_a_symlinks_target(make_env: Any) -> None:
    env = make_env(max_file_bytes=1000)
    env.exec("head -c 5000 /dev/zero > big.bin && ln -s big.bin link && ln -s link link2").check()
    for name in ("big.bin", "link", "link2"):
        with pytest.raises(FileTooLarge):
            env.read_file(name)
    env.exec("head -c 10 /dev/zero > small.bin && ln -sf small.bin link").check()
    assert env.read_file("link") == b"\0" * 10


def test_the_reapers_probe_does_not_keep_an_idle_sandbox_alive(make_env: Any, options: Any, profile: str) -> None:
    """A sandbox younger than ``max_age`` is never probed (the probe is an exec, and Modal
    counts an exec as activity): reaping again and again does not hold off ``idle_timeout``."""
    import modal
    from envlayer_modal.backend import ModalEnvironment

    env = make_env(idle_timeout=3)
    env.exec("true").check()
    env.cleanup()
    handle = modal.Sandbox.from_id(env.sandbox_id)
    deadline = time.monotonic() + 30
    while handle.poll() is None and time.monotonic() < deadline:
        assert ModalEnvironment.reap_orphans(profile=profile, max_age=3600, dry_run=False, options=options()) == []
        time.sleep(0.5)
    assert handle.poll() is not None, "reaping kept the idle sandbox alive"


@pytest.mark.parametrize(
    ("tags", "max_age", "probe"),
    [
        ({"envlayer.created-at": "1000"}, 100, False),  # 50 s old: cannot have been unused for 100 s
        ({"envlayer.created-at": "900"}, 100, True),
        ({"envlayer.created-at": "900", "envlayer.idle-timeout": "60"}, 100, False),  # Modal ends it first
        ({"envlayer.created-at": "900", "envlayer.idle-timeout": "600"}, 100, True),
        ({"envlayer.created-at": "900", "envlayer.idle-timeout": "0"}, 100, True),  # no idle timeout
        ({}, 100, True),  # unknown age: probe
        ({"envlayer.created-at": "x", "envlayer.idle-timeout": "y"}, 100, True),
    ],
)
def test_which_sandboxes_the_reaper_probes(tags: dict[str, str], max_age: float, probe: bool) -> None:
    from envlayer_modal.reaper import needs_probe

    assert needs_probe(tags, max_age, now=1050) is probe
