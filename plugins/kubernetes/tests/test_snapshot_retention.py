"""Snapshot retention on Kubernetes (``snapshot_keep``, ``snapshot_max_age``): applied to
one profile's snapshots of the namespace and API server when a snapshot is taken and by
``reap_orphans`` (dry runs included), against the fake API server.

Each test keeps its snapshots in its own ``tmp_path`` and removes them at the end, even
when it fails; ``make_env`` deletes the pods.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

NAMESPACE = "envlayer-test"


@pytest.fixture
def snapshot_dir(tmp_path: Path, options: Callable[..., Any]) -> Iterator[str]:
    """This test's snapshot directory; every snapshot in it is removed at the end."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    where = str(tmp_path / "snapshots")
    try:
        yield where
    finally:
        for namespace in (NAMESPACE, f"{NAMESPACE}-other"):
            opts = options(snapshot_dir=where, namespace=namespace)
            for snap in KubernetesEnvironment.list_snapshots(profile=None, options=opts):
                KubernetesEnvironment.remove_snapshot(snap.id, options=opts)
        assert list(Path(where).glob("*")) == []  # a directory that was never made has none


@pytest.fixture
def own_profiles(profile: str) -> list[str]:
    return [f"{profile}-ret{i}-{uuid.uuid4().hex[:4]}" for i in range(2)]


def ids(env: Any, profile: str) -> list[str]:
    """The snapshots of ``profile`` in ``env``'s namespace and snapshot directory, newest first."""
    return [s.id for s in type(env).list_snapshots(profile=profile, options=env.options)]


def back_date(snapshot_dir: str, snapshot_id: str, days: float) -> None:
    """Make the record of ``snapshot_id`` say it was taken ``days`` ago."""
    path = Path(snapshot_dir) / f"{snapshot_id}.json"
    record = json.loads(path.read_text())
    record["created"] = (datetime.now().astimezone() - timedelta(days=days)).isoformat()
    path.write_text(json.dumps(record))


def test_taking_a_snapshot_keeps_the_newest_n_of_its_profile(
    make_env: Callable[..., Any], own_profiles: list[str], snapshot_dir: str
) -> None:
    mine, other = own_profiles
    bystander = make_env(prof=other, snapshot_dir=snapshot_dir)
    kept = bystander.snapshot("other")
    env = make_env(prof=mine, snapshot_dir=snapshot_dir, snapshot_keep=2)
    made = [env.snapshot(f"n{i}").id for i in range(5)]  # N + k = 2 + 3
    assert ids(env, mine) == made[:-3:-1]  # the newest two, newest first
    assert ids(env, other) == [kept.id]
    assert [p.name for p in Path(snapshot_dir).glob(f"{made[0]}*")] == []  # its tar and record went


def test_an_old_snapshot_goes_by_age_and_other_scopes_stay(
    make_env: Callable[..., Any], own_profiles: list[str], snapshot_dir: str
) -> None:
    """Another profile's old snapshot, and the same profile's in another namespace, stay."""
    mine, other = own_profiles
    old = make_env(prof=mine, snapshot_dir=snapshot_dir).snapshot("old")
    theirs = make_env(prof=other, snapshot_dir=snapshot_dir).snapshot("theirs")
    elsewhere_env = make_env(prof=mine, snapshot_dir=snapshot_dir, namespace=f"{NAMESPACE}-other")
    elsewhere = elsewhere_env.snapshot("elsewhere")
    for snap in (old, theirs, elsewhere):
        back_date(snapshot_dir, snap.id, days=2)
    env = make_env(prof=mine, snapshot_dir=snapshot_dir, snapshot_max_age=86400)
    new = env.snapshot("new")
    assert ids(env, mine) == [new.id]
    assert ids(env, other) == [theirs.id]
    assert ids(elsewhere_env, mine) == [elsewhere.id]


def test_the_reaper_applies_retention_and_a_dry_run_removes_nothing(
    make_env: Callable[..., Any], own_profiles: list[str], snapshot_dir: str, options: Callable[..., Any]
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    mine, other = own_profiles
    env = make_env(prof=mine, snapshot_dir=snapshot_dir)  # the default: no count limit
    made = [env.snapshot(f"n{i}").id for i in range(3)]
    theirs = make_env(prof=other, snapshot_dir=snapshot_dir).snapshot("theirs")
    reaping = options(snapshot_dir=snapshot_dir, snapshot_keep=1)
    for dry_run, left in ((True, made), (False, made[2:])):  # a dry run reports the same, removes nothing
        reaped = KubernetesEnvironment.reap_orphans(profile=mine, max_age=3600, dry_run=dry_run, options=reaping)
        assert sorted(r.id for r in reaped if r.status == "snapshot") == sorted(made[:2])
        assert sorted(ids(env, mine)) == sorted(left)
    assert ids(env, other) == [theirs.id]
