"""The channel-slot accounting of :mod:`envlayer_ssh.pool` against a scripted server
that frees a closed channel's slot late, as a loaded sshd does (the real-sshd version of
these cases is in ``test_ssh_faults.py``; late frees only happen there under load)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paramiko
import pytest
from envlayer_ssh import pool
from envlayer_ssh.target import Target

from envlayer.errors import BackendUnavailable


class LateFreeingServer:
    """Accepts at most ``limit`` session channels; a closed channel keeps its slot for
    ``lag`` more seconds. Counts what it was asked."""

    def __init__(self, limit: int, lag: float) -> None:
        self.limit = limit
        self.lag = lag
        self.open_now = 0
        self.freeing: list[float] = []
        self.accepted = 0
        self.refused = 0
        self.most_open = 0
        self._lock = threading.Lock()

    def open_channel(self) -> Any:
        with self._lock:
            now = time.monotonic()
            self.freeing = [t for t in self.freeing if t > now]
            if self.open_now + len(self.freeing) >= self.limit:
                self.refused += 1
                raise paramiko.ChannelException(2, "open failed")
            self.open_now += 1
            self.accepted += 1
            self.most_open = max(self.most_open, self.open_now)
        return _Channel(self)

    def closed(self) -> None:
        with self._lock:
            self.open_now -= 1
            self.freeing.append(time.monotonic() + self.lag)


class _Channel:
    def __init__(self, server: LateFreeingServer) -> None:
        self.server = server

    def close(self) -> None:
        self.server.closed()


def _target(max_sessions: int) -> Target:
    return Target(
        alias="scripted",
        hostname="127.0.0.1",
        port=22,
        user="u",
        key_files=(),
        use_agent=False,
        look_for_keys=False,
        host_key_policy="reject",
        known_hosts="/dev/null",
        connect_timeout=5.0,
        keepalive=0.0,
        max_sessions=max_sessions,
        max_connections=1,
    )


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch):
    """``scripted(limit, lag, max_sessions)``: a TargetPool whose connections open their
    channels on a :class:`LateFreeingServer` (no network)."""

    def make(limit: int, lag: float, max_sessions: int) -> tuple[pool.TargetPool, LateFreeingServer]:
        server = LateFreeingServer(limit, lag)
        target_pool = pool.TargetPool(_target(max_sessions))
        servers[id(target_pool)] = server
        return target_pool, server

    servers: dict[int, LateFreeingServer] = {}
    monkeypatch.setattr(pool.Connection, "open_channel", lambda self: servers[id(self.pool)].open_channel())
    monkeypatch.setattr(pool.Connection, "alive", property(lambda self: True))

    return make


def _hold(target_pool: pool.TargetPool, seconds: float) -> None:
    lease = target_pool.open()
    try:
        time.sleep(seconds)
    finally:
        lease.release()


@pytest.mark.parametrize("lag", [0.0, 0.05, 0.3])
def test_server_limit_below_max_sessions_is_learned_even_when_slots_free_late(scripted, lag: float) -> None:
    target_pool, server = scripted(limit=3, lag=lag, max_sessions=10)
    with ThreadPoolExecutor(8) as workers:
        outcomes = [f.exception() for f in [workers.submit(_hold, target_pool, 0.3) for _ in range(8)]]
    assert outcomes == [None] * 8
    assert server.accepted == 8 and server.most_open <= 3
    assert 1 <= target_pool.connections[0].capacity <= 3


def test_capacity_is_the_number_of_channels_open_at_the_refusal(scripted) -> None:
    target_pool, server = scripted(limit=3, lag=0.0, max_sessions=10)
    held = [target_pool.open() for _ in range(3)]
    waiter = threading.Thread(target=_hold, args=(target_pool, 0.0), daemon=True)
    waiter.start()
    try:
        deadline = time.monotonic() + 30
        while target_pool.connections[0].capacity == 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert target_pool.connections[0].capacity == 3, "3 channels were open when the 4th was refused"
    finally:
        for lease in held:
            lease.release()
    waiter.join(30)
    assert not waiter.is_alive() and server.accepted == 4


def test_a_server_that_refuses_every_channel_is_reported(scripted) -> None:
    target_pool, server = scripted(limit=0, lag=0.0, max_sessions=10)
    with pytest.raises(BackendUnavailable, match="refused to open a session channel"):
        target_pool.open()
    assert server.accepted == 0 and server.refused == pool._REFUSALS_BEFORE_LOWERING
