"""Snapshots and forks on Docker: the conformance checks (persist and private
containers) and the Docker-specific parts: what is left behind, a failed fork, a fork
into a task that exists, a snapshot carrying the root filesystem, not processes.

Every test removes the containers, volumes and images it makes, even when it fails
(``SnapshotConformance`` does for its own; the session finalizer in conftest removes
anything of this run's profile that is still there).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from envlayer import dispatch as lifecycle
from envlayer.errors import InvalidArgument
from envlayer.factory import open_environment
from envlayer.snapshot import Snapshot
from envlayer.testing import SnapshotConformance
from envlayer.testing.fixtures import cleaned_up

pytestmark = pytest.mark.docker


def docker_leftovers(api: Any, profile: str, snapshot: Snapshot, tasks: Sequence[str]) -> list[str]:
    """Containers and volumes of ``tasks`` in ``profile``, and images and volumes of
    ``snapshot`` (tagged or not), still on the daemon."""
    from envlayer_docker import labels as L

    left = []
    for task in tasks:
        terms = L.filters(profile=profile, task=task)
        left += [c["Id"][:12] for c in api.containers(all=True, filters={"label": terms})]
        left += [v["Name"] for v in (api.volumes(filters={"label": terms}) or {}).get("Volumes") or []]
    images = api.images(all=True, filters={"label": f"envlayer.snapshot.id={snapshot.id}"}) or []
    volumes = (api.volumes(filters={"label": f"envlayer.snapshot.volume={snapshot.id}"}) or {}).get("Volumes") or []
    return left + [i["Id"][:19] for i in images] + [v["Name"] for v in volumes]


class TestDockerPersistSnapshots(SnapshotConformance):
    task = f"snap-persist-{uuid.uuid4().hex[:6]}"
    persist = True

    @pytest.fixture
    def env(self, docker_api: Any, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_docker.backend import DockerEnvironment

        opts = options(persist_across_processes=self.persist)
        yield from cleaned_up(DockerEnvironment(opts, task_id=self.task, profile=profile), wait=60)

    @pytest.fixture(autouse=True)
    def _api(self, docker_api: Any) -> None:
        self.api = docker_api

    def leftovers(self, env: Any, snapshot: Snapshot, fork_tasks: Sequence[str]) -> list[str]:
        return docker_leftovers(self.api, env.profile, snapshot, fork_tasks)


class TestDockerPrivateSnapshots(TestDockerPersistSnapshots):
    """Private containers (no workspace volume): the workspace is in the container's layer."""

    task = f"snap-private-{uuid.uuid4().hex[:6]}"
    persist = False


@pytest.fixture
def parent(make_env: Any) -> Any:
    env = make_env(task=f"snap-parent-{uuid.uuid4().hex[:6]}")
    env.write_file("w.txt", "workspace")
    assert env.exec("mkdir -p /opt/prep && echo installed > /opt/prep/marker").exit_code == 0
    return env


@pytest.fixture
def snapshot(parent: Any) -> Iterator[Snapshot]:
    snap = parent.snapshot("prepared")
    try:
        yield snap
    finally:
        lifecycle.remove_snapshot([(type(parent), parent.options)], snap.id)


def test_snapshot_is_a_labelled_image_listed_by_profile(docker_api: Any, parent: Any, snapshot: Snapshot) -> None:
    assert (snapshot.backend, snapshot.name, snapshot.source_task) == ("docker", "prepared", parent.task_id)
    assert snapshot.id.startswith("envlayer-snapshot:prepared-")
    labels = docker_api.inspect_image(snapshot.id)["Config"]["Labels"]
    assert {labels["envlayer.managed"], labels["envlayer.snapshot"]} == {"1"}
    assert labels["envlayer.profile"] == parent.profile and labels["envlayer.snapshot.owner"]
    assert snapshot in type(parent).list_snapshots(profile=parent.profile, options=parent.options)
    assert snapshot not in type(parent).list_snapshots(profile="other-profile", options=parent.options)


def test_fork_carries_the_root_filesystem_and_workspace_not_processes(make_env: Any, parent: Any) -> None:
    parent.exec("sleep 300 >/dev/null 2>&1 &")
    snap = parent.snapshot()
    fork_task = f"{parent.task_id}-fork"
    try:
        fork = open_environment(task_id=fork_task, profile=parent.profile, options=parent.options, from_snapshot=snap)
        try:
            assert fork.exec("cat /opt/prep/marker w.txt").stdout == b"installed\nworkspace"
            assert fork.exec("pgrep -f 'sleep 300' || echo none").stdout == b"none\n"
        finally:
            lifecycle.cleanup(fork, purge=True)
            lifecycle.wait_for_cleanup(fork, 60)
    finally:
        lifecycle.remove_snapshot([(type(parent), parent.options)], snap.id)


def test_a_fork_reopened_without_the_snapshot_attaches_to_the_same_container(parent: Any, snapshot: Snapshot) -> None:
    (fork,) = parent.fork([f"{parent.task_id}-again"], snapshot=snapshot)
    try:
        again = type(parent)(parent.options, task_id=fork.task_id, profile=parent.profile)
        assert again.container_id == fork.container_id
        assert again.exec("cat /opt/prep/marker").stdout == b"installed\n"
        again.cleanup()
    finally:
        lifecycle.cleanup(fork, purge=True)
        lifecycle.wait_for_cleanup(fork, 60)


def test_a_fork_into_a_task_that_exists_is_refused_and_the_other_forks_removed(
    docker_api: Any, make_env: Any, parent: Any, snapshot: Snapshot
) -> None:
    existing = make_env(task=f"{parent.task_id}-exists")
    new_task = f"{parent.task_id}-new"
    with pytest.raises(InvalidArgument, match="already has a container") as caught:
        parent.fork([new_task, existing.task_id], snapshot=snapshot)
    assert "new task id" in caught.value.hint
    from envlayer_docker import labels as L

    terms = L.filters(profile=parent.profile, task=new_task)
    assert docker_api.containers(all=True, filters={"label": terms}) == []
    assert (docker_api.volumes(filters={"label": terms}) or {}).get("Volumes") in (None, [])
    assert existing.exec("cat /opt/prep/marker").exit_code != 0  # the existing task was left as it was


def test_a_removed_snapshot_cannot_start_a_fork(parent: Any) -> None:
    snap = parent.snapshot()
    lifecycle.remove_snapshot([(type(parent), parent.options)], snap.id)
    with pytest.raises(InvalidArgument, match="no longer exists"):
        open_environment(
            "docker",
            task_id=f"{parent.task_id}-late",
            profile=parent.profile,
            options=parent.options,
            from_snapshot=snap,
        )


def test_cli_snapshot_fork_ls_rm(cli: Any, docker_api: Any, make_env: Any, profile: str) -> None:
    import json

    from envlayer_docker.backend import DockerEnvironment

    parent = make_env(task=f"snap-cli-{uuid.uuid4().hex[:6]}")
    parent.write_file("w.txt", "from-cli")
    forks = [f"{parent.task_id}-a", f"{parent.task_id}-b"]
    snapshot = json.loads(cli("snapshot", parent.task_id, "--name", "cli", "--json", profile=profile).stdout)
    try:
        assert (snapshot["source_task"], snapshot["name"]) == (parent.task_id, "cli")
        listed = json.loads(cli("snapshots", "ls", "--json", profile=profile).stdout)
        assert snapshot["id"] in [s["id"] for o in listed for s in o["sandboxes"]]
        made = cli("fork", parent.task_id, *forks, "--json", profile=profile)
        assert made.returncode == 0, made.stderr
        assert [f["task"] for f in json.loads(made.stdout)] == forks
        for task in forks:  # persist mode: a later process attaches to the fork
            env = DockerEnvironment(parent.options, task_id=task, profile=profile)
            assert env.read_file("w.txt") == b"from-cli"
            env.cleanup()
        removed = cli("snapshots", "rm", snapshot["id"], profile=profile)
        assert removed.returncode == 0 and snapshot["id"][:12] in removed.stdout
    finally:
        for task in forks:
            DockerEnvironment.remove_sandbox(task, profile=profile, options=parent.options, force=True, purge=True)
        lifecycle.remove_snapshot([(DockerEnvironment, parent.options)], snapshot["id"])
    assert docker_leftovers(docker_api, profile, Snapshot(**snapshot), forks) == []


def test_cli_snapshot_of_a_task_without_a_sandbox_creates_nothing(cli: Any, docker_api: Any, profile: str) -> None:
    task = f"snap-none-{uuid.uuid4().hex[:6]}"
    done = cli("snapshot", task, profile=profile)
    assert done.returncode == 1 and "has no docker sandbox" in done.stderr
    from envlayer_docker import labels as L

    assert docker_api.containers(all=True, filters={"label": L.filters(profile=profile, task=task)}) == []
