"""Local snapshots (envlayer.backends.local_snapshots): the conformance checks on a
temporary working directory and snapshot store, and what the store holds afterwards.

Everything is under pytest's ``tmp_path``; each check removes its forks and snapshots."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from envlayer import dispatch as lifecycle
from envlayer.backends.local import LocalEnvironment, LocalOptions
from envlayer.backends.local_snapshots import FORKS
from envlayer.errors import InvalidArgument
from envlayer.options import OptionError
from envlayer.snapshot import Snapshot, expired
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


def snapshot_env(tmp_path: os.PathLike[str], profile: str, **options: object) -> LocalEnvironment:
    work = os.path.join(tmp_path, "work")
    os.makedirs(work, exist_ok=True)
    opts = LocalOptions(cwd=work, snapshot_dir=os.path.join(tmp_path, "store"), **options)  # type: ignore[arg-type]
    return LocalEnvironment(opts, task_id="prep", profile=profile)


def listed(env: LocalEnvironment, profile: str) -> list[str]:
    return [s.id for s in LocalEnvironment.list_snapshots(profile=profile, options=env.options)]


def test_retention_keeps_the_newest_n_of_the_profile(tmp_path: os.PathLike[str]) -> None:
    other = snapshot_env(tmp_path, "other")
    bystander = other.snapshot("other")
    env = snapshot_env(tmp_path, "mine", snapshot_keep=2)
    made = [env.snapshot(f"n{i}").id for i in range(5)]  # N + k = 2 + 3
    assert listed(env, "mine") == made[:-3:-1]
    assert sorted(os.listdir(os.path.join(tmp_path, "store"))) == sorted([bystander.id, *made[3:]])
    assert listed(env, "other") == [bystander.id]


def test_retention_removes_snapshots_older_than_the_max_age(tmp_path: os.PathLike[str]) -> None:
    env = snapshot_env(tmp_path, "mine", snapshot_max_age=3600)
    old = env.snapshot("old")
    meta = os.path.join(tmp_path, "store", old.id, "snapshot.json")
    with open(meta, encoding="utf-8") as f:
        fields = json.load(f)
    fields["created"] = (datetime.now().astimezone() - timedelta(hours=2)).isoformat()
    with open(meta, "w", encoding="utf-8") as f:
        json.dump(fields, f)
    new = env.snapshot("new")
    assert listed(env, "mine") == [new.id]


@pytest.mark.parametrize(("key", "value"), [("snapshot_keep", -1), ("snapshot_max_age", -5.0)])
def test_negative_retention_is_refused(key: str, value: float) -> None:
    with pytest.raises(OptionError, match="must be >= 0"):
        LocalOptions(**{key: value})  # type: ignore[arg-type]


def test_expired_counts_and_ages_without_a_clock() -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    days = (1, 5, 9)
    snaps = [Snapshot("local", f"s{d}", "s", "p", "t", datetime(2026, 1, d, tzinfo=UTC).isoformat()) for d in days]
    # an unreadable creation time sorts oldest: counted out first, never aged out
    snaps.append(Snapshot("local", "unknown", "s", "p", "t", ""))
    by_count = expired(snaps, LocalOptions(snapshot_keep=2, snapshot_max_age=None), now=now)
    assert [s.id for s in by_count] == ["s1", "unknown"]
    assert [s.id for s in expired(snaps, LocalOptions(snapshot_max_age=3 * 86400), now=now)] == ["s5", "s1"]
    assert expired(snaps, LocalOptions(snapshot_max_age=0), now=now) == []
