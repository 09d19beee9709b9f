"""``SnapshotConformance``: the conformance checks of the ``snapshot`` capability.

Run them on every backend that declares ``snapshot``, with the same ``env`` fixture as
:class:`~envlayer.testing.EnvironmentConformance` (a fresh, working environment whose
working directory is writable)::

    class TestMyBackendSnapshots(SnapshotConformance):
        @pytest.fixture
        def env(self): ...

Every check removes the forks and snapshots it makes, even when it fails. Override
:meth:`SnapshotConformance.leftovers` to also look for the backend's own objects
(images, volumes, ...) left behind: the cleanup check fails on anything it returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.environment import Environment
from envlayer.snapshot import Snapshot

FILE = "envlayer-snapshot-check.txt"


class SnapshotConformance:
    """What a fork sees and what cleanup leaves; see the module docstring."""

    def leftovers(self, env: Environment, snapshot: Snapshot, fork_tasks: Sequence[str]) -> list[str]:
        """The backend's objects still there from ``snapshot`` and the forks of
        ``fork_tasks`` after they were all removed (default: none beyond what the
        dispatcher lists). Override to look for images, volumes, ..."""
        return []

    @pytest.fixture(autouse=True)
    def _requires_snapshot(self, env: Environment) -> None:
        if not supports(env, Capability.SNAPSHOT):
            pytest.skip(f"backend {env.name!r} does not declare snapshot")

    @staticmethod
    def tasks(env: Environment, count: int) -> list[str]:
        """``count`` new task ids for forks of ``env``."""
        tag = uuid.uuid4().hex[:6]
        return [f"{env.task_id}-fork{i}-{tag}" for i in range(count)]

    @contextmanager
    def snapshot_and_forks(self, env: Environment, count: int) -> Iterator[tuple[Snapshot, list[Environment]]]:
        """A snapshot of ``env`` and ``count`` forks from it; both removed on exit."""
        spec = [(type(env), env.options)]
        snapshot = env.snapshot()  # type: ignore[attr-defined]
        forks: list[Environment] = []
        try:
            forks = env.fork(self.tasks(env, count), snapshot=snapshot)  # type: ignore[attr-defined]
            yield snapshot, forks
        finally:
            for fork in forks:
                lifecycle.cleanup(fork, purge=True)
            for fork in forks:
                lifecycle.wait_for_cleanup(fork, 60)
            lifecycle.remove_snapshot(spec, snapshot.id)

    def test_fork_sees_the_parents_files_as_of_the_snapshot(self, env: Environment) -> None:
        env.write_file(FILE, "before")
        with self.snapshot_and_forks(env, 1) as (_, forks):
            later = f"{FILE}.after"
            env.write_file(FILE, "after")
            env.write_file(later, "after")
            assert forks[0].read_file(FILE) == b"before"
            assert forks[0].exec(f"cat {FILE}").stdout == b"before"
            assert forks[0].exec(f"test -e {later}").exit_code == 1

    def test_writes_in_a_fork_reach_neither_the_parent_nor_a_sibling(self, env: Environment) -> None:
        env.write_file(FILE, "parent")
        with self.snapshot_and_forks(env, 2) as (_, (first, second)):
            first.write_file(FILE, "first")
            assert first.exec(f"echo new > {FILE}.new").exit_code == 0
            assert env.read_file(FILE) == b"parent"
            assert second.read_file(FILE) == b"parent"
            assert env.exec(f"test -e {FILE}.new").exit_code == 1
            assert second.exec(f"test -e {FILE}.new").exit_code == 1

    def test_removing_the_snapshot_leaves_running_forks_working(self, env: Environment) -> None:
        env.write_file(FILE, "kept")
        spec = [(type(env), env.options)]
        with self.snapshot_and_forks(env, 1) as (snapshot, forks):
            removed = lifecycle.remove_snapshot(spec, snapshot.id)
            assert [s.id for o in removed for s in o.sandboxes] == [snapshot.id]
            listed = lifecycle.list_snapshots(spec, profile=env.profile)
            assert snapshot.id not in [s.id for o in listed for s in o.sandboxes]
            assert forks[0].exec(f"cat {FILE}").stdout == b"kept"
            forks[0].write_file(FILE, "changed")
            assert forks[0].read_file(FILE) == b"changed"
            tasks = [forks[0].task_id]
        assert self.leftovers(env, snapshot, tasks) == []  # its storage went with its last fork

    def test_fork_without_a_snapshot_removes_the_one_it_took(self, env: Environment) -> None:
        spec = [(type(env), env.options)]
        before = {s.id for o in lifecycle.list_snapshots(spec, profile=env.profile) for s in o.sandboxes}
        env.write_file(FILE, "direct")
        forks = env.fork(self.tasks(env, 1))  # type: ignore[attr-defined]
        try:
            assert forks[0].read_file(FILE) == b"direct"
            after = {s.id for o in lifecycle.list_snapshots(spec, profile=env.profile) for s in o.sandboxes}
            assert after == before
        finally:
            lifecycle.cleanup(forks[0], purge=True)
            lifecycle.wait_for_cleanup(forks[0], 60)

    def test_cleanup_removes_what_it_created(self, env: Environment) -> None:
        spec = [(type(env), env.options)]
        with self.snapshot_and_forks(env, 2) as (snapshot, forks):
            tasks = [f.task_id for f in forks]
        listed = lifecycle.list_snapshots(spec, profile=env.profile)
        assert snapshot.id not in [s.id for o in listed for s in o.sandboxes]
        if supports(env, Capability.LIST_SANDBOXES):
            sandboxes = lifecycle.list_sandboxes(spec, profile=env.profile)
            assert [s for o in sandboxes for s in o.sandboxes if s.task in tasks] == []
        assert self.leftovers(env, snapshot, tasks) == []
