"""Docker forks by copy-on-write: a fork's workspace is an overlay volume over the
snapshot's copy, so nothing is copied per fork; what a fork writes reaches neither the
snapshot, the parent nor a sibling; it outlives the fork's container; the snapshot's volume
stays while a fork uses it and goes after; a daemon that refuses the overlay gets a copy,
with a warning. Real daemon; every test removes what it made, also when it fails."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import pytest
from envlayer_docker import cow, snapshots

from envlayer import dispatch as lifecycle
from envlayer.factory import open_environment
from envlayer.snapshot import Snapshot
from envlayer.testing.fixtures import require_docker

pytestmark = pytest.mark.docker


def _snapshot_volumes(api: Any, snapshot: Snapshot) -> list[str]:
    found = (api.volumes(filters={"label": f"{cow.SNAPSHOT_VOLUME}={snapshot.id}"}) or {}).get("Volumes") or []
    return [v["Name"] for v in found]


@pytest.fixture
def parent(make_env: Any) -> Any:
    env = make_env(task=f"cow-parent-{uuid.uuid4().hex[:6]}")
    assert env.exec("mkdir -p sub && echo base > sub/file && echo keep > other").exit_code == 0
    return env


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


DEBIAN_IMAGE = os.environ.get("ENVLAYER_TEST_DEBIAN_IMAGE", "envlayer-test:debian")
"""An image with GNU cp, tar, find and xargs: its snapshots copy in parallel runs."""
TREE = r"""mkdir -p 'a b/c d' deep/x/y empty "$(printf 'nl\ndir')" .hidden/sub &&
echo one > 'a b/c d/f 1' && printf two > "$(printf 'nl\ndir')/f" && echo h > deep/x/y/h &&
echo dot > .hidden/sub/.dot && ln -s ../deep 'a b/link' && ln -s /nowhere dangling && mkfifo deep/fifo &&
echo top > top && chmod 2775 deep && chmod 1777 empty && chmod 700 .hidden && chmod 640 'a b/c d/f 1' &&
chown 1234:5678 'a b' deep/x/y/h &&
touch -h -d '2001-02-03 04:05:06.789' deep deep/x 'a b/c d' empty dangling .hidden top"""
"""A workspace with what a copy may lose: odd names, links, a FIFO, set-group-ID and sticky
directories (a set-group-ID parent hands its bit to new subdirectories), owners, times."""
LISTING = r"find . -mindepth 1 -printf '%P|%M|%U|%G|%T@|%s|%l|%n\0' | LC_ALL=C sort -z"
"""Every entry below the working directory with its type, mode, owner, time (ns), size,
link target and link count. (The directory itself is the overlay's, not the snapshot's.)"""


@pytest.mark.parametrize("hard_link", [False, True], ids=["parallel copy", "one cp -a for hard links"])
def test_a_forks_workspace_is_the_parents_tree_exactly(
    docker_api: Any, make_env: Any, forks: list[Any], hard_link: bool
) -> None:
    require_docker(DEBIAN_IMAGE, "the copy-on-write test on a GNU image")
    parent = make_env(task=f"cow-tree-{uuid.uuid4().hex[:6]}", image=DEBIAN_IMAGE)
    linked = " && ln 'a b/c d/f 1' deep/x/hard && touch -d 2001-02-03 deep/x" if hard_link else ""
    made = parent.exec(TREE + linked)
    assert made.exit_code == 0, made.stderr_text
    snapshot = parent.snapshot()
    try:
        helpers = docker_api.containers(all=True, filters={"label": f"{snapshots.SNAPSHOT_ID}={snapshot.id}"})
        assert helpers == [], "the copy's helper container was left behind"
        fork = _fork(parent, snapshot, forks, "tree")
        expected = parent.exec(LISTING)
        assert expected.exit_code == 0 and b"deep/fifo|prw" in expected.stdout and b"nl\ndir/f|" in expected.stdout
        assert fork.exec(LISTING).stdout == expected.stdout
        if hard_link:
            assert fork.exec("[ 'a b/c d/f 1' -ef deep/x/hard ]").exit_code == 0, "the hard link was split"
    finally:
        lifecycle.remove_snapshot([(type(parent), parent.options)], snapshot.id)
