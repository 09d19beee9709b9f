"""Workspace retention against the real daemon: the reaper removes the durable data of
tasks unused for ``workspace_retention`` (stopped ones, ones whose container envlayer
removed), never a running task's or another profile's, and ``reap --dry-run`` lists
them first; ``exec --rm`` removes the workspace as ``docker run --rm`` does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from typing import Any

import docker
import pytest
from envlayer_docker import labels, retention, workspace
from envlayer_docker.backend import DockerEnvironment

from envlayer.sandbox.retry import RetryPolicy
from envlayer.testing.secrets import ENVLAYER_SCRIPT

N = 3
RETENTION = "0.001"
"""Seconds: every stopped task is older than that by the time `envlayer reap` looks."""


def _volumes(api: Any, prof: str) -> dict[str, str]:
    """{volume name: envlayer.data kind} of the profile."""
    found = (api.volumes(filters={"label": [f"envlayer.profile={labels.sanitize(prof)}"]}) or {}).get("Volumes")
    return {v["Name"]: v["Labels"]["envlayer.data"] for v in found or []}


def _state(api: Any, container_id: str) -> str:
    from docker.errors import NotFound

    try:
        return str(api.inspect_container(container_id)["State"]["Status"])
    except NotFound:
        return "removed"


def _reap(cli: Any, prof: str, *args: str) -> list[dict[str, Any]]:
    env = {"ENVLAYER_DOCKER_WORKSPACE_RETENTION": RETENTION}
    done = cli("reap", "--max-age", "3600", "--json", *args, profile=prof, env=env)
    assert done.returncode == 0, done.stderr
    return [s for outcome in json.loads(done.stdout) for s in outcome["sandboxes"]]


def test_reap_removes_the_workspaces_of_unused_tasks_and_keeps_a_running_ones(
    make_env, docker_api, profile, cli, options
):
    prof = f"{profile}-ret-{uuid.uuid4().hex[:6]}"
    stale = [make_env(f"stale-{i}", prof=prof) for i in range(N)]
    for env in stale:
        env.exec("head -c 5000 /dev/zero > /workspace/data")
        env.cleanup()
    # one stopped, the others' containers removed by envlayer (the data stays, with a record)
    docker_api.stop(stale[0].container_id, timeout=1)
    for env in stale[1:]:
        assert DockerEnvironment.remove_sandbox(env.task_id, profile=prof, options=env.options, force=True)
    running = make_env("running", prof=prof)
    running.exec("echo keep > /workspace/f")
    other = make_env("other-profile", prof=f"{prof}-other")
    other.exec("true")
    docker_api.stop(other.container_id, timeout=1)
    before = _volumes(docker_api, prof)
    assert sorted(before.values()) == ["record", "record"] + ["workspace"] * (N + 1)

    # a retention of an hour: every task was used within it, nothing goes
    hour = options(workspace_retention=3600)
    kept = DockerEnvironment.reap_orphans(profile=prof, max_age=3600, dry_run=False, options=hour)
    assert [i for i in kept if i.status == "data"] == []

    preview = _reap(cli, prof, "--dry-run")
    assert sorted(s["task"] for s in preview) == [f"stale-{i}" for i in range(N)]
    assert {s["status"] for s in preview} == {"data"}
    assert all(int(s["detail"]["size_bytes"]) >= 5000 for s in preview), preview
    assert all(float(s["detail"]["last_used"]) > 0 for s in preview)
    assert _volumes(docker_api, prof) == before  # the dry run removed nothing
    table = cli("reap", "--dry-run", profile=prof, env={"ENVLAYER_DOCKER_WORKSPACE_RETENTION": RETENTION}).stdout
    assert "LAST USED" in table and "KiB" in table

    removed = _reap(cli, prof)
    assert sorted(s["task"] for s in removed) == [f"stale-{i}" for i in range(N)]
    left = _volumes(docker_api, prof)
    assert list(left.values()) == ["workspace"]
    assert running.exec("cat /workspace/f").stdout_text == "keep\n"
    assert _state(docker_api, stale[0].container_id) == "removed"
    assert _state(docker_api, running.container_id) == "running"
    assert list(_volumes(docker_api, f"{prof}-other").values()) == ["workspace"]


def test_ls_shows_a_workspace_last_use_and_size(make_env, docker_api, profile):
    prof = f"{profile}-ls-{uuid.uuid4().hex[:6]}"
    env = make_env("busy", prof=prof)
    env.exec("head -c 3000 /dev/zero > /workspace/data")
    listed = DockerEnvironment.list_sandboxes(profile=prof, options=env.options)
    [data] = [i for i in listed if i.status == "data"]
    assert data.detail["last_used"] == "in use"
    assert int(data.detail["size_bytes"]) >= 3000
    DockerEnvironment.remove_sandbox("busy", profile=prof, options=env.options, force=True)
    [data] = [i for i in DockerEnvironment.list_sandboxes(profile=prof, options=env.options) if i.status == "data"]
    assert float(data.detail["last_used"]) > 0


class _DiskUsageBusy:
    """The real API client, except that its first ``busy`` calls of ``df`` get what a daemon
    before Engine 23 answers while another caller's ``GET /system/df`` runs: a 500 with
    ``a disk usage operation is already running`` (moby 20.10 ``daemon/disk_usage.go``; the
    daemon here is 20.10, and two ``envlayer ls`` at once, or another test worker's, hit it)."""

    def __init__(self, api: Any, busy: int) -> None:
        self._api, self.busy = api, busy

    def df(self) -> Any:
        if self.busy:
            self.busy -= 1
            raise docker.errors.APIError("500 Server Error", explanation="a disk usage operation is already running")
        return self._api.df()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def test_a_busy_disk_usage_count_is_waited_out_and_never_hides_the_last_use(make_env, docker_api, profile, monkeypatch):
    prof = f"{profile}-busy-{uuid.uuid4().hex[:6]}"
    env = make_env("counted", prof=prof)
    env.exec("head -c 3000 /dev/zero > /workspace/data")
    data = [i for i in workspace.list_data(docker_api, env.options, profile=prof)]
    busy = _DiskUsageBusy(docker_api, busy=2)
    retention.annotate(busy, env.options, data, profile=prof)
    assert busy.busy == 0
    assert data[0].detail["last_used"] == "in use"
    assert int(data[0].detail["size_bytes"]) >= 3000

    # a daemon that stays busy (a shorter budget than the 10 s a user's `ls` waits): the
    # size is left empty, the last use is still there
    monkeypatch.setattr(retention, "DISK_USAGE_POLICY", RetryPolicy(attempts=3, base_delay=0.01, budget=0.1))
    data = [i for i in workspace.list_data(docker_api, env.options, profile=prof)]
    retention.annotate(_DiskUsageBusy(docker_api, busy=1000), env.options, data, profile=prof)
    assert data[0].detail["last_used"] == "in use"
    assert data[0].detail["size_bytes"] == ""


def test_a_zero_retention_keeps_workspaces_forever(options) -> None:
    assert options(workspace_retention=0).workspace_retention is None
    assert options().workspace_retention == 14 * 86400


@pytest.mark.parametrize("broker", [False, True], ids=["in-process", "broker"])
def test_exec_rm_removes_the_container_and_its_workspace(cli, docker_api, profile, broker):
    prof = f"{profile}-rm-{uuid.uuid4().hex[:6]}"
    runtime = tempfile.mkdtemp(prefix="elr-", dir="/tmp")  # short: a socket path has 107 bytes at most
    env = {"ENVLAYER_RUNTIME_DIR": runtime}
    flags = [] if broker else ["--no-broker"]
    try:
        done = cli("exec", "--task", "once", "--rm", *flags, "echo hi > /workspace/f", profile=prof, env=env)
        assert done.returncode == 0, done.stderr
        assert "in-process" not in done.stderr
        assert _volumes(docker_api, prof) == {}
        assert docker_api.containers(all=True, filters={"label": [f"envlayer.profile={prof}"]}) == []
    finally:
        cli("rm", "once", "--force", "--purge", profile=prof)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
        subprocess.run([ENVLAYER_SCRIPT, "broker", "stop"], env={**environ, **env}, capture_output=True, timeout=60)
        shutil.rmtree(runtime, ignore_errors=True)


def test_a_host_directory_workspace_is_kept_while_running_and_removed_once_unused(make_env, profile, options):
    prof = f"{profile}-host-{uuid.uuid4().hex[:6]}"
    env = make_env("h", prof=prof, workspace="host", workspace_retention=float(RETENTION))
    env.exec("echo x > /workspace/x")
    [data] = [i for i in DockerEnvironment.list_sandboxes(profile=prof, options=env.options) if i.status == "data"]
    reap = DockerEnvironment.reap_orphans
    assert [i for i in reap(profile=prof, max_age=3600, dry_run=False, options=env.options) if i.status == "data"] == []
    assert os.path.isdir(data.detail["name"])  # its container runs
    DockerEnvironment.remove_sandbox("h", profile=prof, options=env.options, force=True)
    with open(os.path.join(data.detail["name"], "envlayer.json")) as fh:
        assert float(json.load(fh)["last_used"]) > 0  # the removal left its record
    removed = reap(profile=prof, max_age=3600, dry_run=False, options=env.options)
    assert [(i.status, i.detail["storage"], int(i.detail["size_bytes"]) > 0) for i in removed] == [
        ("data", "host", True)
    ]
    assert not os.path.exists(data.detail["name"])
