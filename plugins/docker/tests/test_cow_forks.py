"""Docker forks by copy-on-write: a fork's workspace is an overlay volume over the
snapshot's copy, so nothing is copied per fork; what a fork writes reaches neither the
snapshot, the parent nor a sibling; it outlives the fork's container; the snapshot's volume
stays while a fork uses it and goes after; a daemon that refuses the overlay gets a copy,
with a warning. Real daemon; every test removes what it made, also when it fails."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from envlayer_docker import cow

from envlayer import dispatch as lifecycle
from envlayer.factory import open_environment
from envlayer.snapshot import Snapshot

pytestmark = pytest.mark.docker


def _snapshot_volumes(api: Any, snapshot: Snapshot) -> list[str]:
    found = (api.volumes(filters={"label": f"{cow.SNAPSHOT_VOLUME}={snapshot.id}"}) or {}).get("Volumes") or []
    return [v["Name"] for v in found]


@pytest.fixture
def parent(make_env: Any) -> Any:
    env = make_env(task=f"cow-parent-{uuid.uuid4().hex[:6]}")
    assert env.exec("mkdir -p sub && echo base > sub/file && echo keep > other").exit_code == 0
    return env


@pytest.fixture
def forks(parent: Any) -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for fork in made:
        lifecycle.cleanup(fork, purge=True)
    for fork in made:
        lifecycle.wait_for_cleanup(fork, 60)


def _fork(parent: Any, snapshot: Snapshot, forks: list[Any], name: str) -> Any:
    fork = open_environment(
        task_id=f"{parent.task_id}-{name}", profile=parent.profile, options=parent.options, from_snapshot=snapshot
    )
    forks.append(fork)
    return fork


def test_forks_share_the_snapshot_and_write_only_to_themselves(docker_api: Any, parent: Any, forks: list[Any]) -> None:
    snapshot = parent.snapshot()
    try:
        [lower] = _snapshot_volumes(docker_api, snapshot)
        one, two = _fork(parent, snapshot, forks, "one"), _fork(parent, snapshot, forks, "two")
        for fork in (one, two):
            volume = docker_api.inspect_volume(fork._spec.data[0].source)  # the fork's workspace volume
            assert volume["Options"]["type"] == "overlay" and volume["Labels"][cow.LOWER] == lower
            assert fork.exec("cat sub/file other").stdout == b"base\nkeep\n"
        assert one.exec("echo one > sub/file && rm other && echo new > added").exit_code == 0
        assert two.exec("cat sub/file other; ls added 2>&1 || true").stdout_text.splitlines()[:2] == ["base", "keep"]
        assert "No such file" in two.exec("ls added 2>&1 || true").stdout_text
        assert parent.exec("cat sub/file other; ls added 2>/dev/null || echo absent").stdout == b"base\nkeep\nabsent\n"
        assert parent.exec("echo changed > sub/file").exit_code == 0
        assert two.exec("cat sub/file").stdout == b"base\n"  # the parent's later writes do not reach a fork
    finally:
        lifecycle.remove_snapshot([(type(parent), parent.options)], snapshot.id)


def test_a_forks_workspace_outlives_its_container(docker_api: Any, parent: Any, forks: list[Any]) -> None:
    snapshot = parent.snapshot()
    try:
        fork = _fork(parent, snapshot, forks, "durable")
        assert fork.exec("echo mine > sub/file").exit_code == 0
        lifecycle.cleanup(fork, force_remove=True)  # the container goes, the workspace stays
        assert lifecycle.wait_for_cleanup(fork, 60)
        again = open_environment("docker", task_id=fork.task_id, profile=parent.profile, options=parent.options)
        forks.append(again)
        assert again.exec("cat sub/file other").stdout == b"mine\nkeep\n"
    finally:
        lifecycle.remove_snapshot([(type(parent), parent.options)], snapshot.id)


def test_the_snapshot_volume_stays_while_a_fork_uses_it(docker_api: Any, parent: Any, forks: list[Any]) -> None:
    snapshot = parent.snapshot()
    fork = _fork(parent, snapshot, forks, "user")
    lifecycle.remove_snapshot([(type(parent), parent.options)], snapshot.id)
    assert _snapshot_volumes(docker_api, snapshot), "the snapshot's volume went while a fork lay over it"
    assert fork.exec("cat sub/file").stdout == b"base\n"
    lifecycle.cleanup(fork, purge=True)
    assert lifecycle.wait_for_cleanup(fork, 60)
    forks.remove(fork)
    assert _snapshot_volumes(docker_api, snapshot) == []
    layers = (docker_api.volumes(filters={"label": cow.LAYER}) or {}).get("Volumes") or []
    assert [v["Name"] for v in layers if (v.get("Labels") or {}).get("envlayer.task_id") == fork.task_id] == []


def test_a_daemon_that_refuses_the_overlay_gets_a_copy_and_a_warning(
    docker_api: Any, parent: Any, forks: list[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real daemon refuses an overlay whose lower directory does not exist, as one
    whose volume root cannot be overlaid does: at container start, "error while mounting
    volume"."""
    real = cow.create_overlay

    def unmountable(api: Any, name: str, lower: str, labels: dict[str, str]) -> None:
        real(api, name, lower, labels)
        options = api.inspect_volume(name)["Options"]
        api.remove_volume(name)
        broken = {**options, "o": options["o"].replace("lowerdir=", "lowerdir=/nonexistent-envlayer")}
        api.create_volume(name, driver="local", driver_opts=broken, labels={**labels, cow.LOWER: lower})

    monkeypatch.setattr(cow, "create_overlay", unmountable)
    snapshot = parent.snapshot()
    try:
        with caplog.at_level(logging.WARNING, logger="envlayer.docker"):
            fork = _fork(parent, snapshot, forks, "copied")
        assert "cannot mount overlay volumes" in caplog.text and "copies the snapshot's data" in caplog.text
        volume = docker_api.inspect_volume(fork._spec.data[0].source)
        assert not (volume.get("Options") or {}).get("type")
        assert fork.exec("cat sub/file other").stdout == b"base\nkeep\n"
    finally:
        lifecycle.remove_snapshot([(type(parent), parent.options)], snapshot.id)
