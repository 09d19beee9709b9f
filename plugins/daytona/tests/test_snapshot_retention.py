"""Snapshot retention on Daytona (``snapshot_keep``, ``snapshot_max_age``) through the real
SDK against the fake: applied when a snapshot is taken and by ``reap_orphans`` (dry runs
included), scoped to the profile's snapshot name prefix. A snapshot's age is its API
record's ``createdAt``, which the test sets through the fake's ``/fake/snapshot-created``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from daytona_testkit import FakeDaytona

from envlayer import dispatch as lifecycle

pytestmark = pytest.mark.docker


@pytest.fixture
def profiles(options: Callable[..., Any]) -> Iterator[Callable[[], str]]:
    """``profiles()``: a new profile; every snapshot of the profiles it made is removed at
    the end of the test."""
    from envlayer_daytona.backend import DaytonaEnvironment

    made: list[str] = []

    def make() -> str:
        made.append(f"ret-{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield make
    spec = [(DaytonaEnvironment, options())]
    for prof in made:
        for outcome in lifecycle.list_snapshots(spec, profile=prof):
            for row in outcome.sandboxes:
                lifecycle.remove_snapshot(spec, row.id)


def _ids(options: Any, profile: str) -> list[str]:
    from envlayer_daytona.backend import DaytonaEnvironment

    return [s.id for s in DaytonaEnvironment.list_snapshots(profile=profile, options=options)]


def _age(fake: FakeDaytona, snapshot_id: str, *, days: float) -> None:
    created = datetime.now(UTC) - timedelta(days=days)
    fake.set_snapshot_created(snapshot_id, created.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))


def _another_profiles(fake: FakeDaytona, make_env: Callable[..., Any], profile: str, *, days: float) -> Any:
    """A snapshot of ``profile`` (default retention) made ``days`` ago: retention of any
    other profile must leave it."""
    snapshot = make_env(prof=profile).snapshot(name="theirs")
    _age(fake, snapshot.id, days=days)
    return snapshot


def test_snapshot_keep_leaves_the_newest_of_the_profile(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], profiles: Callable[[], str]
) -> None:
    theirs = _another_profiles(fake_daytona, make_env, profiles(), days=0)
    env = make_env(prof=profiles(), snapshot_keep=2)
    taken = [env.snapshot(name=f"s{i}").id for i in range(4)]
    assert _ids(env.options, env.profile) == [taken[3], taken[2]]
    assert _ids(env.options, theirs.profile) == [theirs.id]


def test_an_old_snapshot_goes_when_one_is_taken(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], profiles: Callable[[], str]
) -> None:
    theirs = _another_profiles(fake_daytona, make_env, profiles(), days=3)
    env = make_env(prof=profiles(), snapshot_max_age=86400)
    old = env.snapshot(name="old")
    _age(fake_daytona, old.id, days=2)
    new = env.snapshot(name="new")
    assert _ids(env.options, env.profile) == [new.id]
    assert _ids(env.options, theirs.profile) == [theirs.id]


def test_the_reaper_applies_retention_and_a_dry_run_only_lists(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], profiles: Callable[[], str]
) -> None:
    theirs = _another_profiles(fake_daytona, make_env, profiles(), days=30)
    env = make_env(prof=profiles())
    old, new = env.snapshot(name="old"), env.snapshot(name="new")
    _age(fake_daytona, old.id, days=15)
    spec = [(type(env), env.options)]

    (dry,) = lifecycle.reap_orphans(spec, profile=env.profile, max_age=3600, dry_run=True)
    assert [(r.id, r.status) for r in dry.sandboxes] == [(old.id, "snapshot")]
    assert _ids(env.options, env.profile) == [new.id, old.id]

    (real,) = lifecycle.reap_orphans(spec, profile=env.profile, max_age=3600)
    assert [r.id for r in real.sandboxes] == [old.id]
    assert _ids(env.options, env.profile) == [new.id]
    assert _ids(env.options, theirs.profile) == [theirs.id]


def test_snapshots_taken_within_one_second_keep_their_order(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], options: Callable[..., Any], profiles: Callable[[], str]
) -> None:
    env = make_env(prof=profiles(), snapshot_max_age=0)
    older, newer = env.snapshot(name="older"), env.snapshot(name="newer")
    second = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fake_daytona.set_snapshot_created(older.id, f"{second}.100000Z")
    fake_daytona.set_snapshot_created(newer.id, f"{second}.900000Z")
    spec = [(type(env), options(snapshot_keep=1))]
    (reaped,) = lifecycle.reap_orphans(spec, profile=env.profile, max_age=3600, dry_run=True)
    assert [r.id for r in reaped.sandboxes] == [older.id]
