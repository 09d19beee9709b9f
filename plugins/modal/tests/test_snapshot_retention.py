"""Snapshot retention on Modal (``snapshot_keep``, ``snapshot_max_age``): applied to the
recorded snapshots of one profile when a snapshot is taken and by ``reap_orphans``
(dry runs included), through the real SDK against the fake.

Each test keeps its records in its own ``XDG_STATE_HOME`` (``records``); ``own_profiles``
removes every snapshot recorded there (Image and record) at the end, even when the test
fails, and ``make_env`` removes the sandboxes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from modal_testenv import fake_images

pytestmark = pytest.mark.modal


@pytest.fixture
def own_profiles(profile: str, records: Path, options: Callable[..., Any]) -> Iterator[list[str]]:
    """Two new profiles; every recorded snapshot is removed at the end."""
    from envlayer_modal import snapshots
    from envlayer_modal.backend import ModalEnvironment

    try:
        yield [f"{profile}-ret{i}-{uuid.uuid4().hex[:4]}" for i in range(2)]
    finally:
        for snap in snapshots.list_all(profile=None):
            ModalEnvironment.remove_snapshot(snap.id, options=options())


def ids(profile: str) -> list[str]:
    """The recorded snapshots of ``profile``, newest first."""
    from envlayer_modal import snapshots

    return [s.id for s in snapshots.list_all(profile=profile)]


def back_date(records: Path, snapshot_id: str, days: float) -> None:
    """Make the record of ``snapshot_id`` say it was taken ``days`` ago."""
    path = records / f"{snapshot_id}.json"
    record = json.loads(path.read_text())
    record["created"] = (datetime.now().astimezone() - timedelta(days=days)).isoformat()
    path.write_text(json.dumps(record))


def test_taking_a_snapshot_keeps_the_newest_n_of_its_profile(
    make_env: Callable[..., Any], own_profiles: list[str]
) -> None:
    mine, other = own_profiles
    bystander = make_env(prof=other).snapshot("other")
    env = make_env(prof=mine, snapshot_keep=2)
    made = [env.snapshot(f"n{i}").id for i in range(5)]  # N + k = 2 + 3
    assert ids(mine) == made[:-3:-1]  # the newest two, newest first
    assert ids(other) == [bystander.id]
    assert [fake_images(i) for i in made[:3]] == [[], [], []]  # their Images were deleted


def test_an_old_snapshot_goes_by_age_and_another_profiles_stays(
    make_env: Callable[..., Any], own_profiles: list[str], records: Path
) -> None:
    mine, other = own_profiles
    old, theirs = make_env(prof=mine).snapshot("old"), make_env(prof=other).snapshot("theirs")
    back_date(records, old.id, days=2)
    back_date(records, theirs.id, days=2)
    new = make_env(prof=mine, snapshot_max_age=86400).snapshot("new")
    assert ids(mine) == [new.id]
    assert ids(other) == [theirs.id]
    assert fake_images(old.id) == []


def test_the_reaper_applies_retention_and_a_dry_run_removes_nothing(
    make_env: Callable[..., Any], own_profiles: list[str], options: Callable[..., Any]
) -> None:
    from envlayer_modal.backend import ModalEnvironment

    mine, other = own_profiles
    env = make_env(prof=mine)  # the default: no count limit
    made = [env.snapshot(f"n{i}").id for i in range(3)]
    theirs = make_env(prof=other).snapshot("theirs")
    reaping = options(snapshot_keep=1)
    for dry_run, left in ((True, made), (False, made[2:])):  # a dry run reports the same, removes nothing
        reaped = ModalEnvironment.reap_orphans(profile=mine, max_age=3600, dry_run=dry_run, options=reaping)
        assert sorted(r.id for r in reaped if r.status == "snapshot") == sorted(made[:2])
        assert sorted(ids(mine)) == sorted(left)
    assert ids(other) == [theirs.id]
