"""The ``snapshot`` capability in the core: refusals on a backend without it (a local
backend with the capability taken away, as SSH has none), bad names and task ids, and a
snapshot of another backend. Local snapshots run in test_local_snapshots.py, Docker's in
plugins/docker/tests/test_snapshots.py."""

from __future__ import annotations

import json

import pytest
from cli_run import run

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.errors import InvalidArgument
from envlayer.factory import open_environment
from envlayer.local.backend import LocalEnvironment
from envlayer.snapshot import Snapshot, check_fork_tasks, check_snapshot_name

SNAP = Snapshot("docker", "envlayer-snapshot:x-1", "x", "default", "t", "2026-01-01T00:00:00+00:00")


class PlainEnvironment(LocalEnvironment):
    """A backend without ``snapshot``."""

    name = "plain"
    capabilities = LocalEnvironment.capabilities - {Capability.SNAPSHOT}


def test_a_backend_without_snapshot_says_which_backends_have_it() -> None:
    env = PlainEnvironment()
    try:
        assert not supports(env, Capability.SNAPSHOT)
        with pytest.raises(InvalidArgument, match="backend 'plain' has no snapshot: it cannot take a snapshot") as e:
            env.snapshot()
        having = lifecycle.backends_with(Capability.SNAPSHOT)
        assert "docker" in having and "local" in having and "ssh" not in having
        assert ", ".join(having) in e.value.hint
        with pytest.raises(InvalidArgument, match="has no snapshot: it cannot fork"):
            env.fork(["a"], snapshot=SNAP)
    finally:
        env.cleanup()


def test_starting_from_a_snapshot_without_the_capability_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="it cannot start from a snapshot"):
        PlainEnvironment(task_id="t2", from_snapshot=SNAP)


def test_local_refuses_a_docker_snapshot() -> None:
    with pytest.raises(InvalidArgument, match="a local environment cannot start from a snapshot of 'docker'"):
        open_environment("local", task_id="t2", from_snapshot=SNAP)


def test_a_snapshot_of_another_backend_is_refused() -> None:
    from envlayer_docker.backend import DockerEnvironment

    env = DockerEnvironment.__new__(DockerEnvironment)
    env.name = "docker"
    from envlayer.sandbox.base import check_snapshot_source

    with pytest.raises(InvalidArgument, match="cannot start from a snapshot of 'modal'"):
        check_snapshot_source(env, Snapshot("modal", "im-1", "x", "default", "t", ""))


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 65, "é"])
def test_bad_snapshot_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument, match="not a valid snapshot name"):
        check_snapshot_name(name)


@pytest.mark.parametrize(
    ("tasks", "message"),
    [([], "non-empty list"), ("ab", "non-empty list"), (["a", "a"], "distinct"), (["src"], "differ from the source")],
)
def test_bad_fork_task_ids_are_refused(tasks: list[str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        check_fork_tasks(tasks, "src")


def test_snapshot_lists_as_a_row() -> None:
    info = SNAP.info()
    assert (info.status, info.task, info.id, info.detail["name"]) == ("snapshot", "t", SNAP.id, "x")


def test_snapshots_rm_takes_options_before_the_id() -> None:
    """`snapshots rm --backend local ID` parses (it was a usage error: argparse had taken
    the optional SNAPSHOT positional with the action, before the options); options may
    also stand before the action."""
    removed = run("snapshots", "rm", "--backend", "local", "--json", "envlayer-snapshot:nosuch-1")
    assert "unrecognized arguments" not in removed.stderr and removed.returncode != 2, removed.stderr
    assert json.loads(removed.stdout)[0]["backend"] == "local"
    listed = run("snapshots", "--backend", "local", "ls", "--json", "--all-profiles")
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["error"] is None, listed.stderr
    missing = run("snapshots", "rm", "--backend", "local")
    assert missing.returncode == 1 and "`snapshots rm` needs the snapshot id" in missing.stderr
    two = run("snapshots", "rm", "--backend", "local", "a", "b")
    assert two.returncode == 2 and "unrecognized arguments: a b" in two.stderr
