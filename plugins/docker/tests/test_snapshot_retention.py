"""Snapshot retention on Docker (``snapshot_keep``, ``snapshot_max_age``): applied when a
snapshot is taken and by ``reap_orphans``, to one profile only.

Each test works in profiles of its own (the session's profile plus a suffix) and removes
every snapshot image it made, even when it fails."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.docker


@pytest.fixture
def own_profiles(profile: str, docker_api: Any, options: Callable[..., Any]) -> Iterator[list[str]]:
    """Two new profiles; their snapshots are removed at the end."""
    from envlayer_docker import snapshots

    names = [f"{profile}-ret{i}-{uuid.uuid4().hex[:4]}" for i in range(2)]
    try:
        yield names
    finally:
        for name in names:
            for snap in snapshots.list_all(docker_api, profile=name):
                snapshots.remove(docker_api, snap.id)


def ids(docker_api: Any, profile: str) -> list[str]:
    from envlayer_docker import snapshots

    return [s.id for s in snapshots.list_all(docker_api, profile=profile)]


def test_taking_a_snapshot_keeps_the_newest_n_of_its_profile(
    docker_api: Any, make_env: Callable[..., Any], own_profiles: list[str]
) -> None:
    mine, other = own_profiles
    bystander = make_env(prof=other).snapshot("other")
    env = make_env(prof=mine, snapshot_keep=2)
    made = [env.snapshot(f"n{i}").id for i in range(5)]  # N + k = 2 + 3
    assert ids(docker_api, mine) == made[:-3:-1]  # the newest two, newest first
    assert ids(docker_api, other) == [bystander.id]


def test_the_reaper_applies_retention(
    docker_api: Any, make_env: Callable[..., Any], own_profiles: list[str], options: Callable[..., Any]
) -> None:
    from envlayer_docker.backend import DockerEnvironment

    mine = own_profiles[0]
    env = make_env(prof=mine)  # the default: no count limit
    made = [env.snapshot(f"n{i}").id for i in range(3)]
    reaping = options(snapshot_keep=1)
    would = DockerEnvironment.reap_orphans(profile=mine, max_age=3600, dry_run=True, options=reaping)
    assert sorted(r.id for r in would if r.status == "snapshot") == sorted(made[:2])
    assert sorted(ids(docker_api, mine)) == sorted(made)
    removed = DockerEnvironment.reap_orphans(profile=mine, max_age=3600, dry_run=False, options=reaping)
    assert sorted(r.id for r in removed if r.status == "snapshot") == sorted(made[:2])
    assert ids(docker_api, mine) == [made[2]]
