"""Snapshots and forks on Modal, through the real SDK against the fake: the conformance
checks (persist and private sandboxes) and the Modal-specific parts: the record kept per
profile, a fork into a task that has a sandbox, a removed snapshot.

Each test keeps its snapshot records in its own ``XDG_STATE_HOME`` (a temporary
directory) and removes the sandboxes and snapshots it makes, even when it fails; the
fake's Docker images of deleted snapshots go with their last sandbox (``leftovers``).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from modal_testenv import fake_images

from envlayer import dispatch as lifecycle
from envlayer.errors import InvalidArgument
from envlayer.snapshot import Snapshot
from envlayer.testing import SnapshotConformance
from envlayer.testing.fixtures import cleaned_up

pytestmark = pytest.mark.modal


class TestModalPersistSnapshots(SnapshotConformance):
    persist = True

    @pytest.fixture
    def env(self, fake_modal: Any, profile: str, options: Any, records: Path) -> Iterator[Any]:
        from envlayer_modal.backend import ModalEnvironment

        task = f"snap-{uuid.uuid4().hex[:6]}"
        environment = ModalEnvironment(options(persist_across_processes=self.persist), task_id=task, profile=profile)
        yield from cleaned_up(environment, force_remove=True, wait=60)

    def leftovers(self, env: Any, snapshot: Snapshot, fork_tasks: Sequence[str]) -> list[str]:
        return fake_images(snapshot.id)


class TestModalPrivateSnapshots(TestModalPersistSnapshots):
    persist = False


def test_snapshots_are_listed_by_profile_from_the_record(make_env: Any, records: Path, profile: str) -> None:
    from envlayer_modal.backend import ModalEnvironment

    env = make_env()
    other = make_env(prof=f"{profile}-other")
    mine, theirs = env.snapshot(name="mine"), other.snapshot()
    spec = [(ModalEnvironment, env.options)]
    try:
        listed = [s.id for o in lifecycle.list_snapshots(spec, profile=profile) for s in o.sandboxes]
        assert listed == [mine.id]
        assert {p.name for p in records.iterdir()} == {f"{mine.id}.json", f"{theirs.id}.json"}
        assert (mine.name, mine.profile, mine.source_task) == ("mine", profile, env.task_id)
    finally:
        lifecycle.remove_snapshot(spec, mine.id)
        lifecycle.remove_snapshot(spec, theirs.id)
    assert list(records.iterdir()) == []


def test_a_fork_into_a_task_with_a_sandbox_is_refused(make_env: Any, records: Path) -> None:
    from envlayer_modal.backend import ModalEnvironment

    env, taken = make_env(), make_env()
    snapshot = env.snapshot()
    try:
        with pytest.raises(InvalidArgument, match="already has a running sandbox"):
            ModalEnvironment(env.options, task_id=taken.task_id, profile=env.profile, from_snapshot=snapshot)
    finally:
        lifecycle.remove_snapshot([(ModalEnvironment, env.options)], snapshot.id)


def test_a_removed_snapshot_cannot_start_a_sandbox(make_env: Any, records: Path) -> None:
    from envlayer_modal.backend import ModalEnvironment

    env = make_env()
    snapshot = env.snapshot()
    lifecycle.remove_snapshot([(ModalEnvironment, env.options)], snapshot.id)
    with pytest.raises(InvalidArgument, match="no longer exists"):
        ModalEnvironment(env.options, task_id=f"{env.task_id}-late", profile=env.profile, from_snapshot=snapshot)


def test_cli_snapshot_fork_ls_rm(fake_modal: Any, make_env: Any, records: Path, profile: str) -> None:
    import json
    import os
    import sys

    from envlayer_modal.backend import ModalEnvironment
    from modal_testenv import APP, IMAGE

    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(fake_modal.env(), ENVLAYER_PROFILE=profile, ENVLAYER_MODAL_IMAGE=IMAGE, ENVLAYER_MODAL_APP_NAME=APP)
    envlayer = os.path.join(os.path.dirname(sys.executable), "envlayer")

    def cli(*args: str) -> Any:
        argv = [envlayer, args[0], "--backend", "modal", *args[1:]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=environ)

    parent = make_env()
    parent.write_file("w.txt", "from-cli")
    forks = [f"{parent.task_id}-a", f"{parent.task_id}-b"]
    made = cli("snapshot", parent.task_id, "--name", "cli", "--json")
    assert made.returncode == 0, made.stderr
    snapshot = json.loads(made.stdout)
    try:
        listed = json.loads(cli("snapshots", "ls", "--json").stdout)
        assert snapshot["id"] in [s["id"] for o in listed for s in o["sandboxes"]]
        forked = cli("fork", parent.task_id, *forks, "--json")
        assert forked.returncode == 0, forked.stderr
        for task in forks:  # persist mode: a later process attaches to the fork
            env = make_env(task=task)
            assert env.read_file("w.txt") == b"from-cli"
        removed = cli("snapshots", "rm", snapshot["id"])
        assert removed.returncode == 0 and snapshot["id"][:12] in removed.stdout, removed.stderr
    finally:
        lifecycle.remove_snapshot([(ModalEnvironment, parent.options)], snapshot["id"])
    assert list(records.iterdir()) == []
