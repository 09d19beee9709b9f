"""Local snapshots (envlayer.backends.local_snapshots): the conformance checks on a
temporary working directory and snapshot store, and what the store holds afterwards.

Everything is under pytest's ``tmp_path``; each check removes its forks and snapshots."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pytest

from envlayer import lifecycle
from envlayer.backends.local import LocalEnvironment, LocalOptions
from envlayer.backends.local_snapshots import FORKS
from envlayer.errors import InvalidArgument
from envlayer.snapshot import Snapshot
from envlayer.testing import SnapshotConformance


class TestLocalSnapshots(SnapshotConformance):
    @pytest.fixture
    def env(self, tmp_path: os.PathLike[str]) -> Iterator[LocalEnvironment]:
        work, store = os.path.join(tmp_path, "work"), os.path.join(tmp_path, "store")
        os.makedirs(work)
        self.store = store
        environment = LocalEnvironment(LocalOptions(cwd=work, snapshot_dir=store), task_id="prep")
        try:
            yield environment
        finally:
            environment.cleanup()

    def leftovers(self, env: LocalEnvironment, snapshot: Snapshot, fork_tasks: Sequence[str]) -> list[str]:
        forks = os.path.join(self.store, FORKS)
        left = os.listdir(forks) if os.path.isdir(forks) else []
        return left + ([snapshot.id] if os.path.exists(os.path.join(self.store, snapshot.id)) else [])

    def test_a_fork_runs_in_its_own_copy_which_cleanup_deletes(self, env: LocalEnvironment) -> None:
        os.makedirs(os.path.join(env.cwd, "pkg"))
        os.symlink("pkg", os.path.join(env.cwd, "link"))
        (fork,) = env.fork(["copy"])
        try:
            assert fork.cwd != env.cwd and fork.cwd.startswith(self.store)
            assert fork.exec("pwd").stdout.decode().strip() == fork.cwd
            assert os.readlink(os.path.join(fork.cwd, "link")) == "pkg"
        finally:
            fork.cleanup()
        assert not os.path.exists(fork.cwd)

    def test_a_snapshot_not_in_the_store_is_refused(self, env: LocalEnvironment) -> None:
        gone = Snapshot("local", "gone-00000000", "gone", "default", "prep", "")
        with pytest.raises(InvalidArgument, match="no local snapshot 'gone-00000000'"):
            LocalEnvironment(env.options, task_id="x", from_snapshot=gone)

    def test_listing_is_scoped_by_profile(self, env: LocalEnvironment) -> None:
        snap = env.snapshot(name="mine")
        try:
            spec = [(LocalEnvironment, env.options)]
            assert [s.id for o in lifecycle.list_snapshots(spec, profile="default") for s in o.sandboxes] == [snap.id]
            assert [s for o in lifecycle.list_snapshots(spec, profile="other") for s in o.sandboxes] == []
        finally:
            lifecycle.remove_snapshot([(LocalEnvironment, env.options)], snap.id)
