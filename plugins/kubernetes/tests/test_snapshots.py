"""Snapshots and forks on Kubernetes against the fake API server: the conformance checks
(a workspace in the container's filesystem and in an emptyDir) and the Kubernetes parts:
where a snapshot is kept, listing scoped by profile and namespace, a fork into a task
that has a pod, a snapshot that is gone, what is not carried.

Every test removes the pods it makes (``make_env`` and ``SnapshotConformance`` force-remove
them, even on failure) and keeps its snapshots in its own ``tmp_path``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from envlayer import dispatch as lifecycle
from envlayer.errors import InvalidArgument
from envlayer.snapshot import Snapshot
from envlayer.testing import SnapshotConformance
from envlayer.testing.fixtures import cleaned_up

NAMESPACE = "envlayer-test"


def _task(prefix: str = "snap") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="class")
def parent(
    request: pytest.FixtureRequest,
    fake_apiserver: Any,
    control: Any,
    profile: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    """One parent pod per conformance class (its ``workspace_volume``), deleted after the
    class's last check; snapshots in a temporary directory of its own."""
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.options import KubernetesOptions

    opts = KubernetesOptions(
        image=control.IMAGE,
        kubeconfig=fake_apiserver.kubeconfig,
        workspace_volume=request.cls.workspace_volume,
        snapshot_dir=str(tmp_path_factory.mktemp("snapshots")),
    )
    yield from cleaned_up(KubernetesEnvironment(opts, task_id=_task(), profile=profile), force_remove=True, wait=60)


class TestKubernetesSnapshots(SnapshotConformance):
    """The workspace in the container's own filesystem (``workspace_volume`` off). The
    class shares one parent pod (each check writes its files first; forks are new tasks),
    deleted after its last check."""

    workspace_volume = "none"

    @pytest.fixture
    def env(self, parent: Any) -> Any:
        return parent

    def leftovers(self, env: Any, snapshot: Snapshot, fork_tasks: Sequence[str]) -> list[str]:
        from envlayer_kubernetes import sweep

        files = [p.name for p in Path(env.options.snapshot_dir).glob(f"{snapshot.id}*")]
        pods = [sweep.list_managed(env._cluster, env.options, profile=env.profile, task=t) for t in fork_tasks]
        return files + [p.metadata.name for found in pods for p in found]


class TestKubernetesEmptyDirSnapshots(TestKubernetesSnapshots):
    """The workspace in an emptyDir volume mounted at the working directory."""

    workspace_volume = "emptyDir"


@pytest.fixture
def snapshot_dir(tmp_path: Path) -> str:
    return str(tmp_path / "snapshots")


def test_kubernetes_declares_snapshot() -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    from envlayer.capabilities import Capability

    assert Capability.SNAPSHOT in KubernetesEnvironment.capabilities


def test_a_snapshot_is_a_labelled_tar_of_the_working_directory_only(
    make_env: Callable[..., Any], snapshot_dir: str, profile: str
) -> None:
    """Kept as ``<id>.tar`` and ``<id>.json`` in ``snapshot_dir``; the working directory is
    carried, a file elsewhere in the container and a running process are not."""
    import json

    parent = make_env(snapshot_dir=snapshot_dir)
    parent.write_file("sub/w.txt", "workspace")
    assert parent.exec("echo outside > /tmp/outside; (sleep 300 &) ; echo ok").exit_code == 0
    snap = parent.snapshot(name="prepared")
    record = json.loads((Path(snapshot_dir) / f"{snap.id}.json").read_text())
    assert (record["profile"], record["source_task"], record["name"], record["namespace"]) == (
        profile,
        parent.task_id,
        "prepared",
        NAMESPACE,
    )
    assert (Path(snapshot_dir) / f"{snap.id}.tar").stat().st_size > 0
    fork = make_env(_task("fork"), snapshot_dir=snapshot_dir, from_snapshot=snap)
    assert fork.read_file("sub/w.txt") == b"workspace"
    assert fork.exec("test -e /tmp/outside").exit_code == 1
    assert fork.exec("ps | grep -c '[s]leep 300'").stdout.strip() == b"0"
    assert [s.id for s in lifecycle.remove_snapshot([(type(parent), parent.options)], snap.id)[0].sandboxes] == [
        snap.id
    ]
    assert list(Path(snapshot_dir).iterdir()) == []


def test_listing_is_scoped_by_profile_and_namespace(make_env: Callable[..., Any], snapshot_dir: str) -> None:
    mine, other = _task("prof"), _task("prof-other")
    here = make_env(prof=mine, snapshot_dir=snapshot_dir)
    elsewhere = make_env(prof=mine, snapshot_dir=snapshot_dir, namespace=NAMESPACE + "-other")
    other_profile = make_env(prof=other, snapshot_dir=snapshot_dir)
    made = [env.snapshot() for env in (here, elsewhere, other_profile)]
    try:
        cls = type(here)
        assert [s.id for s in cls.list_snapshots(profile=mine, options=here.options)] == [made[0].id]
        assert [s.id for s in cls.list_snapshots(profile=mine, options=elsewhere.options)] == [made[1].id]
        assert {s.id for s in cls.list_snapshots(profile=None, options=here.options)} == {made[0].id, made[2].id}
        assert cls.remove_snapshot(made[1].id, options=here.options) == []  # another namespace's
        assert [s.id for s in cls.list_snapshots(profile=mine, options=elsewhere.options)] == [made[1].id]
    finally:
        for env, snap in zip((here, elsewhere, other_profile), made, strict=True):
            type(env).remove_snapshot(snap.id, options=env.options)
    assert list(Path(snapshot_dir).iterdir()) == []


def test_a_fork_into_a_task_that_has_a_pod_is_refused_and_leaves_it(
    make_env: Callable[..., Any], snapshot_dir: str
) -> None:
    parent = make_env(snapshot_dir=snapshot_dir)
    existing = make_env(snapshot_dir=snapshot_dir)
    existing.write_file("mine.txt", "kept")
    snap = parent.snapshot()
    try:
        with pytest.raises(InvalidArgument, match="already has a pod"):
            make_env(existing.task_id, snapshot_dir=snapshot_dir, from_snapshot=snap)
        assert existing.read_file("mine.txt") == b"kept"
    finally:
        type(parent).remove_snapshot(snap.id, options=parent.options)


def test_a_removed_snapshot_cannot_start_a_fork_and_no_pod_is_made(
    make_env: Callable[..., Any], snapshot_dir: str, profile: str
) -> None:
    from envlayer_kubernetes import sweep

    parent = make_env(snapshot_dir=snapshot_dir)
    snap = parent.snapshot()
    type(parent).remove_snapshot(snap.id, options=parent.options)
    task = _task("fork")
    with pytest.raises(InvalidArgument, match="does not exist") as info:
        make_env(task, snapshot_dir=snapshot_dir, from_snapshot=snap)
    assert "snapshots ls" in str(info.value)
    assert sweep.list_managed(parent._cluster, parent.options, profile=profile, task=task) == []


def test_a_non_root_pod_forks_into_its_emptydir_workspace(make_env: Callable[..., Any], snapshot_dir: str) -> None:
    """Under the ``restricted`` preset (uid 65534, an emptyDir owned by root with mode
    2777) the fork's user unpacks into a working directory it does not own."""
    opts = {"security_preset": "restricted", "run_as_user": 65534, "snapshot_dir": snapshot_dir}
    _fork_carries_the_workspace(make_env, opts)


def test_a_fork_over_v4_gets_the_whole_archive(
    make_env: Callable[..., Any], snapshot_dir: str, fake_apiserver_v4: Any
) -> None:
    """``v4.channel.k8s.io`` cannot close stdin: the unpack reads exactly the archive's
    bytes (the bounded-stdin path), then ends."""
    _fork_carries_the_workspace(make_env, {"kubeconfig": fake_apiserver_v4.kubeconfig, "snapshot_dir": snapshot_dir})


def _fork_carries_the_workspace(make_env: Callable[..., Any], opts: dict[str, Any]) -> None:
    parent = make_env(**opts)
    parent.write_file("sub/w.txt", "workspace")
    snap = parent.snapshot()
    try:
        fork = make_env(_task("fork"), from_snapshot=snap, **opts)
        assert fork.read_file("sub/w.txt") == b"workspace"
        assert fork.exec("id -u").stdout == parent.exec("id -u").stdout
    finally:
        type(parent).remove_snapshot(snap.id, options=parent.options)
