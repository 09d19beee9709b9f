"""Deleting removed snapshots' images while other processes work on the same daemon.

Two races that the full suite's parallel workers hit (and that many agents sharing a
daemon would): the sweep deleting another process's snapshot in the making (``docker
commit`` stores the image before it tags it), and a fork's teardown giving up on its
image while another process was still removing the fork's container.

Each test removes the containers and images it made, even when it fails."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound, NotFound
from envlayer_docker import snapshots, teardown

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


@pytest.fixture
def made(docker_api: Any) -> Iterator[list[str]]:
    """Ids of containers and images the test made; all removed at the end."""
    ids: list[str] = []
    try:
        yield ids
    finally:
        for ident in reversed(ids):
            with contextlib.suppress(NotFound, ImageNotFound):
                if ident.startswith("sha256:"):
                    docker_api.remove_image(ident, force=True)
                else:
                    docker_api.remove_container(ident, force=True, v=True)


def _exists(api: Any, image_id: str) -> bool:
    try:
        api.inspect_image(image_id)
    except (ImageNotFound, NotFound):
        return False
    return True


def _untagged_snapshot_image(api: Any, made: list[str], profile: str) -> str:
    """What a ``commit`` leaves between storing and tagging: a dangling image with the
    snapshot labels (moby ``daemon/commit.go`` creates the image, then tags it)."""
    container = api.create_container(IMAGE, "true", labels={"envlayer.managed": "1"})["Id"]
    made.append(container)
    labels = {snapshots.SNAPSHOT: "1", "envlayer.managed": "1", "envlayer.profile": profile}
    image = str(api.commit(container, conf={"Labels": labels})["Id"])
    made.append(image)
    return image


def test_the_sweep_leaves_a_snapshot_in_the_making_to_its_process(
    docker_api: Any, made: list[str], profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    young = _untagged_snapshot_image(docker_api, made, profile)
    snapshots.prune_unused(docker_api)
    assert _exists(docker_api, young), "a snapshot image younger than the grace was deleted"

    monkeypatch.setattr(snapshots, "PRUNE_GRACE", -1.0)  # as if the grace had passed
    snapshots.prune_unused(docker_api)
    assert not _exists(docker_api, young)


def test_a_released_image_goes_at_once_and_a_used_one_stays(docker_api: Any, made: list[str], profile: str) -> None:
    image = _untagged_snapshot_image(docker_api, made, profile)
    user = docker_api.create_container(image, "true")["Id"]  # a stopped fork, say
    made.append(user)
    started = time.monotonic()
    snapshots.prune_unused(docker_api, released=[image])
    assert _exists(docker_api, image)
    assert time.monotonic() - started < snapshots.RELEASE_WAIT, "waited for a container that is not going"

    docker_api.remove_container(user, force=True)
    snapshots.prune_unused(docker_api, released=[image])
    assert not _exists(docker_api, image)


def test_a_tagged_image_is_never_released(docker_api: Any, made: list[str], profile: str) -> None:
    image = _untagged_snapshot_image(docker_api, made, profile)
    docker_api.tag(image, "envlayer-test-user-image", "kept")  # e.g. a user's image built on a snapshot
    try:
        snapshots.prune_unused(docker_api, released=[image, "envlayer-test-user-image:kept"])
        assert _exists(docker_api, "envlayer-test-user-image:kept")
    finally:
        with contextlib.suppress(ImageNotFound, NotFound):
            docker_api.remove_image("envlayer-test-user-image:kept")


class _RemovalInProgress:
    """The real API client, except that ``remove_container`` answers what the daemon does
    while another caller removes the same container (moby ``daemon/delete.go``: 409
    "removal of container ... is already in progress"); that other removal ends
    ``delay`` s later."""

    def __init__(self, api: Any, delay: float) -> None:
        self._api, self._delay = api, delay
        self.other: threading.Thread | None = None

    def remove_container(self, container: str, **kwargs: Any) -> None:
        def other_process() -> None:
            time.sleep(self._delay)
            self._api.remove_container(container, force=True, v=True)

        self.other = threading.Thread(target=other_process)
        self.other.start()
        response = type("Response", (), {"status_code": 409, "reason": "Conflict", "url": ""})()
        raise APIError("409 Conflict", response=response, explanation="removal is already in progress")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def test_a_teardown_returns_once_a_removal_begun_elsewhere_is_done(docker_api: Any, made: list[str]) -> None:
    container = docker_api.create_container(IMAGE, "true")["Id"]
    made.append(container)
    api = _RemovalInProgress(docker_api, delay=0.5)
    teardown.stop_and_remove(api, container, 0)
    try:
        with pytest.raises(NotFound):
            docker_api.inspect_container(container)
    finally:
        assert api.other is not None
        api.other.join(30)
