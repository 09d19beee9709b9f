"""Local snapshots (envlayer.local.snapshots): the conformance checks on a
temporary working directory and snapshot store, and what the store holds afterwards.

Everything is under pytest's ``tmp_path``; each check removes its forks and snapshots."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from envlayer import dispatch as lifecycle
from envlayer.errors import InvalidArgument
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.local.snapshots import FORKS
from envlayer.options import OptionError
from envlayer.snapshot import Snapshot, expired
from envlayer.testing import SnapshotConformance
from tests.core.cli_run import run


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


# --- the task's own directory, and the size limit (issue 39), through the real CLI --------


def snapshot_cli(tmp_path: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``envlayer snapshot prep --backend local`` with a private snapshot store."""
    store = ("-o", f"snapshot_dir={tmp_path / 'store'}")
    return run("snapshot", "prep", "--backend", "local", *store, *args, cwd=cwd)


def stored(tmp_path: Path) -> list[str]:
    store = tmp_path / "store"
    return sorted(os.listdir(store)) if store.is_dir() else []


def test_a_snapshot_takes_the_tasks_directory_never_the_one_it_is_run_from(tmp_path: Path) -> None:
    crowded = tmp_path / "crowded"  # stands for /tmp or $HOME: other programs' files
    (crowded / ".ssh").mkdir(parents=True)
    (crowded / ".ssh" / "id_ed25519").write_bytes(b"secret")
    (crowded / "other-program.tmp").write_bytes(os.urandom(100_000))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "task.txt").write_bytes(b"the task's file")
    refused = snapshot_cli(tmp_path, cwd=crowded)
    assert refused.returncode == 1, refused.stdout
    assert "task 'prep' has none: the cwd option is not set" in refused.stderr and str(crowded) in refused.stderr
    assert "-o cwd=DIR" in refused.stderr and stored(tmp_path) == []
    taken = snapshot_cli(tmp_path, "-o", f"cwd={tmp_path / 'work'}", cwd=crowded)
    assert taken.returncode == 0, taken.stderr
    assert f"envlayer: snapshot of task prep: copying {tmp_path / 'work'} (15 bytes in 1 files)" in taken.stderr
    (snap_id,) = stored(tmp_path)
    assert os.listdir(tmp_path / "store" / snap_id / "files") == ["task.txt"]


def test_a_snapshot_over_the_limit_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "blob").write_bytes(os.urandom(5000))
    work = ("-o", f"cwd={tmp_path / 'work'}")
    refused = snapshot_cli(tmp_path, *work, "-o", "snapshot_max_bytes=4096", cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout
    assert "holds 4.9 KiB in 1 files, over the local snapshot limit of 4.0 KiB; nothing was copied" in refused.stderr
    assert "-o snapshot_max_bytes=5000 (0: no limit)" in refused.stderr
    assert stored(tmp_path) == []
    assert snapshot_cli(tmp_path, *work, "-o", "snapshot_max_bytes=0", cwd=tmp_path).returncode == 0
    assert len(stored(tmp_path)) == 1


def test_the_default_limit_is_two_gib_and_negative_is_refused() -> None:
    assert LocalOptions().snapshot_max_bytes == 2 * 1024**3
    with pytest.raises(OptionError, match="must be >= 0"):
        LocalOptions(snapshot_max_bytes=-1)


@pytest.mark.parametrize("directory", ["/", "{tmp}"])
def test_a_snapshot_of_the_root_or_of_a_directory_holding_the_store_is_refused_clearly(
    tmp_path: Path, directory: str
) -> None:
    """``-o cwd=/`` was "a bug in envlayer" (exit 125: a PermissionError counting
    /proc/1/fdinfo), and a cwd holding the store would copy the store into itself."""
    work = directory.format(tmp=tmp_path)  # the store is tmp_path/store: inside it
    refused = snapshot_cli(tmp_path, "-o", f"cwd={work}", cwd=tmp_path)
    assert refused.returncode == 1, refused.stderr
    assert "holds the snapshot store" in refused.stderr and "nothing was copied" in refused.stderr
    assert stored(tmp_path) == []


def test_the_size_count_skips_what_vanishes_or_cannot_be_listed(tmp_path: Path) -> None:
    """/tmp's files come and go (runc's, other programs'), and some directories cannot be
    listed even by root (/proc/1/fdinfo): either made the count raise ("a bug in
    envlayer", exit 125)."""
    from envlayer.sandbox import tar_stream

    (tmp_path / "kept").write_bytes(b"12345")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "hidden").write_bytes(b"x" * 10)
    (tmp_path / "gone").write_bytes(b"y" * 20)
    real_lstat, real_scandir, real_listdir = os.lstat, os.scandir, os.listdir

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).endswith("gone"):
            raise FileNotFoundError(path)
        return real_lstat(path, *args, **kwargs)

    def unlistable(real: Any) -> Any:
        def listing(path: Any = ".") -> Any:
            if str(path).endswith("sub"):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        return listing

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tar_stream.os, "lstat", lstat)
        patch.setattr(tar_stream.os, "scandir", unlistable(real_scandir))
        patch.setattr(tar_stream.os, "listdir", unlistable(real_listdir))
        assert tar_stream.tree_size(str(tmp_path)) == (1, 5)
