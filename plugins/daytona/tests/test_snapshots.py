"""Snapshots and forks on Daytona (capability ``snapshot``) through the real SDK against the
fake: the conformance kit, the wire routes the SDK uses, and a fork refused for a task that
already has a sandbox."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from daytona_testkit import FAKE_KEY, FakeDaytona

from envlayer import dispatch as lifecycle
from envlayer.errors import InvalidArgument
from envlayer.snapshot import Snapshot
from envlayer.testing.fixtures import cleaned_up
from envlayer.testing.snapshots import SnapshotConformance

pytestmark = pytest.mark.docker


class TestDaytonaSnapshotConformance(SnapshotConformance):
    @pytest.fixture
    def env(self, profile: str, options: Callable[..., Any]) -> Iterator[Any]:
        from envlayer_daytona.backend import DaytonaEnvironment

        environment = DaytonaEnvironment(options(), task_id=f"snap-{uuid.uuid4().hex[:6]}", profile=profile)
        yield from cleaned_up(environment, force_remove=True, wait=30)

    def leftovers(self, env: Any, snapshot: Snapshot, fork_tasks: Sequence[str]) -> list[str]:
        """Daytona snapshots and sandboxes of the forks still there."""
        from daytona import Daytona, DaytonaConfig

        client = Daytona(DaytonaConfig(api_key=FAKE_KEY, api_url=env.options.api_url))
        left = [s.name for s in client.snapshot.list(limit=200).items if s.name == snapshot.id]
        sandboxes = lifecycle.list_sandboxes([(type(env), env.options)], profile=env.profile)
        return left + [s.id for o in sandboxes for s in o.sandboxes if s.task in fork_tasks]


def test_snapshot_and_fork_use_the_sdks_routes(fake_daytona: FakeDaytona, make_env: Callable[..., Any]) -> None:
    env = make_env()
    env.write_file("state.txt", "prepared")
    mark = fake_daytona.mark()
    snapshot = env.snapshot(name="prepared")
    taken = fake_daytona.entries_since(mark)
    assert {"sandbox.snapshot", "snapshots.get"} <= {e["route"] for e in taken}
    assert "unknown" not in {e["route"] for e in taken}
    assert snapshot.backend == "daytona" and snapshot.name == "prepared" and snapshot.source_task == env.task_id
    try:
        mark = fake_daytona.mark()
        (fork,) = env.fork([f"{env.task_id}-f"], snapshot=snapshot)
        try:
            assert {"create"} <= fake_daytona.routes_since(mark)
            assert fork.read_file("state.txt") == b"prepared"
        finally:
            fork.cleanup(force_remove=True)
            fork.wait_for_cleanup(30)
    finally:
        lifecycle.remove_snapshot([(type(env), env.options)], snapshot.id)


def test_a_fork_into_a_task_that_has_a_sandbox_is_refused(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any]
) -> None:
    env = make_env()
    taken = make_env()
    snapshot = env.snapshot()
    try:
        with pytest.raises(InvalidArgument, match="already has a sandbox"):
            env.fork([taken.task_id], snapshot=snapshot)
        assert taken.exec("echo still").stdout == b"still\n"
    finally:
        lifecycle.remove_snapshot([(type(env), env.options)], snapshot.id)
