"""Container lifecycle against the real daemon: labels, cross-process reuse, races,
fingerprints, cleanup modes, the reaper and idle reclaim, recovery, errors."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from envlayer_docker import labels, reaper, workspace
from envlayer_docker.backend import DockerEnvironment
from envlayer_docker.naming import container_name

from envlayer.errors import BackendUnavailable, ConfigError, EnvironmentClosed
from envlayer.execution.cancel import CancelToken
from envlayer.testing.fixtures import first_line_then_kill
from envlayer.testing.racing import race

pytestmark = pytest.mark.docker


def _task() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _containers(api: Any, profile: str, task: str) -> list[dict]:
    return api.containers(all=True, filters={"label": labels.filters(profile=profile, task=task)})


def _status(api: Any, cid: str) -> str:
    from docker.errors import NotFound

    try:
        return api.inspect_container(cid)["State"]["Status"]
    except NotFound:
        return "removed"


# --- labels and hardening ------------------------------------------------------------------------


def test_labels_on_a_real_container(make_env, docker_api, profile) -> None:
    task = "team/alpha: task ü"
    env = make_env(task)
    info = docker_api.inspect_container(env.container_id)
    got = info["Config"]["Labels"]
    assert got["envlayer.managed"] == "1"
    assert got["envlayer.task"] == labels.sanitize(task) and got["envlayer.task"].startswith("team_alpha__task__.h")
    assert got["envlayer.profile"] == labels.sanitize(profile)
    assert got["envlayer.task_id"] == task, "the id as given, for ls and rm"
    assert got["envlayer.fingerprint"].startswith("v1-")
    assert got["envlayer.persist"] == "1"
    # the label filters round-trip the sanitized values
    assert [c["Id"] for c in _containers(docker_api, profile, task)] == [env.container_id]
    assert info["Name"] == "/" + container_name(profile, task)


def test_hardening_defaults(make_env, docker_api) -> None:
    env = make_env(pids_limit=300, memory_mb=256, cpus=0.5, network=False, tmpfs={"/tmp": "rw,size=32m"})
    host = docker_api.inspect_container(env.container_id)["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert set(host["CapAdd"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"}
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 300 and host["Memory"] == 256 * 2**20 and host["NanoCpus"] == 500_000_000
    assert host["NetworkMode"] == "none" and host["Init"] is True
    assert host["Tmpfs"] == {"/tmp": "rw,size=32m"}
    assert env.exec("grep NoNewPrivs /proc/self/status").stdout_text.split() == ["NoNewPrivs:", "1"]


def test_env_values_never_in_labels_config_or_argv(make_env, docker_api, monkeypatch) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("ENVLAYER_TEST_FORWARDED", secret + "-fwd")
    env = make_env(env={"OPT_SECRET": secret + "-opt"}, forward_env=["ENVLAYER_TEST_FORWARDED"])
    assert (
        env.exec('printf "%s %s" "$OPT_SECRET" "$ENVLAYER_TEST_FORWARDED"').stdout_text == f"{secret}-opt {secret}-fwd"
    )
    seen: list[bytes] = []

    def scan() -> None:
        time.sleep(0.3)
        seen.append(env.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '", timeout=10).stdout)

    for mode_env in (env, make_env(exec_mode="oneshot", env={"OPT_SECRET": secret + "-opt"})):
        t = threading.Thread(target=scan)
        t.start()
        assert mode_env.exec("sleep 1; echo done", env={"CALL_SECRET": secret + "-call"}, timeout=20).ok
        t.join()
    assert all(secret.encode() not in s for s in seen)
    for c in (env,):
        info = docker_api.inspect_container(c.container_id)
        assert secret not in repr(info)


# --- cross-process reuse ----------------------------------------------------------------------------


def test_reuse_across_processes_keeps_background_process(run_python, child_env_code, docker_api, profile) -> None:
    task = _task()
    first = run_python(
        child_env_code(task, profile)
        + "r = env.exec('sleep 1000 > /dev/null 2>&1 & echo $!'); print(env.container_id, r.stdout_text.strip())\n"
        + "env.cleanup()\n"
    )
    cid, pid = first.split()
    assert _status(docker_api, cid) == "running"
    second = run_python(
        child_env_code(task, profile)
        + f"r = env.exec('kill -0 {pid} && echo alive'); print(env.container_id, r.stdout_text.strip())\n"
    )
    assert second.split() == [cid, "alive"]
    assert len(_containers(docker_api, profile, task)) == 1


def test_sigkill_mid_session_then_attach(run_python, child_env_code, docker_api, profile) -> None:
    task = _task()
    proc = run_python(
        child_env_code(task, profile)
        + "print(env.container_id, flush=True)\nenv.exec('echo marker > /workspace/state; sleep 300')\n",
        wait=False,
    )
    cid = proc.stdout.readline().strip()
    deadline = time.monotonic() + 60
    while "sleep 300" not in _top(docker_api, cid):  # mid-command: the marker is written
        assert time.monotonic() < deadline, _top(docker_api, cid)
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    out = run_python(
        child_env_code(task, profile)
        + "print(env.container_id, env.exec('cat /workspace/state').stdout_text.strip())\n"
    )
    assert out.split() == [cid, "marker"]


RACE_PRELUDE = "import docker, envlayer_docker.backend, envlayer_docker.options\n"
"""What the 16 racers import once before they fork (the SDK and the plugin)."""


def test_sixteen_racing_processes_end_with_one_container(child_env_code, docker_api, profile) -> None:
    task = _task()
    code = child_env_code(task, profile) + "print(env.container_id, env.exec('echo ok').stdout_text.strip())\n"
    outs = [racer.stdout.split() for racer in race(RACE_PRELUDE, code, 16, timeout=180)]
    assert {o[1] for o in outs} == {"ok"}
    assert len({o[0] for o in outs}) == 1
    assert len(_containers(docker_api, profile, task)) == 1


def test_sixteen_racing_processes_with_new_fingerprint_end_with_one(
    child_env_code, make_env, docker_api, profile
) -> None:
    task = _task()
    old = make_env(task, pids_limit=111).container_id
    code = child_env_code(task, profile, pids_limit=222) + "print(env.container_id)\n"
    ids = {racer.stdout.strip() for racer in race(RACE_PRELUDE, code, 16, timeout=180)}
    assert len(ids) == 1 and old not in ids
    found = _containers(docker_api, profile, task)
    assert [c["Id"] for c in found] == list(ids)
    assert docker_api.inspect_container(found[0]["Id"])["HostConfig"]["PidsLimit"] == 222


def test_fingerprint_change_is_not_reused(make_env, docker_api, profile) -> None:
    task = _task()
    first = make_env(task, pids_limit=100)
    first.exec("echo old > /workspace/f; echo layer > /etc/layer-file")
    first.cleanup()
    assert make_env(task, pids_limit=100).container_id == first.container_id  # same inputs: reused
    with pytest.raises(BackendUnavailable, match="different options"):
        make_env(task, pids_limit=200, on_fingerprint_mismatch="error")
    second = make_env(task, pids_limit=200)
    assert second.container_id != first.container_id
    assert _status(docker_api, first.container_id) == "removed"
    # the workspace is durable (a volume per profile + task); the container's layer is not
    assert second.exec("cat /workspace/f").stdout_text == "old\n"
    assert second.exec("cat /etc/layer-file").exit_code != 0


def test_without_durable_workspace_a_recreate_loses_the_files(make_env, docker_api) -> None:
    task = _task()
    first = make_env(task, pids_limit=100, workspace="none")
    first.exec("echo old > /workspace/f")
    second = make_env(task, pids_limit=200, workspace="none")
    assert second.container_id != first.container_id
    assert second.exec("cat /workspace/f").exit_code != 0
    assert not [
        i
        for i in DockerEnvironment.list_sandboxes(profile=second.profile, options=second.options)
        if i.status == "data" and i.task == task
    ]


@pytest.mark.parametrize("storage", ["volume", "host"])
def test_workspace_and_home_survive_rm_and_reaper_until_purged(make_env, docker_api, profile, storage) -> None:
    task = _task()
    env = make_env(task, workspace=storage, persist_home=True)
    env.exec("echo ws > /workspace/w; echo home > /root/h")
    env.cleanup()
    # `envlayer rm --force` without --purge: the container goes, the data stays
    removed = DockerEnvironment.remove_sandbox(task, profile=profile, options=env.options, force=True)
    assert [i.detail["container_id"] for i in removed] == [env.container_id[:12]]
    data = [i for i in DockerEnvironment.list_sandboxes(profile=profile, options=env.options) if i.status == "data"]
    mine = [i for i in data if i.task == labels.sanitize(task)]
    assert {i.detail["storage"] for i in mine} == {storage}
    assert sorted(i.detail["data"] for i in mine) == (
        ["home", "workspace"] if storage == "volume" else ["workspace,home"]
    )
    again = make_env(task, workspace=storage, persist_home=True)
    assert again.container_id != env.container_id
    assert again.exec("cat /workspace/w /root/h").stdout_text == "ws\nhome\n"
    # the orphan reaper removes the stopped container, never the data
    docker_api.stop(again.container_id, timeout=1)
    reaped = DockerEnvironment.reap_orphans(profile=profile, max_age=0, dry_run=False, options=again.options)
    assert again.container_id[:12] in {i.detail.get("container_id") for i in reaped}
    assert all(i.status != "data" for i in reaped)
    third = make_env(task, workspace=storage, persist_home=True)
    assert third.exec("cat /workspace/w").stdout_text == "ws\n"
    third.cleanup()
    # --purge removes the container and then the data
    purged = DockerEnvironment.remove_sandbox(task, profile=profile, options=env.options, force=True, purge=True)
    assert {i.status for i in purged} == {"running", "data"}
    left = DockerEnvironment.list_sandboxes(profile=profile, options=env.options)
    assert not [i for i in left if i.task == labels.sanitize(task)]
    if storage == "host":
        assert not os.path.exists(mine[0].detail["name"])


def test_cleanup_purge_removes_the_data(make_env, docker_api, profile) -> None:
    task = _task()
    env = make_env(task)
    env.exec("echo x > /workspace/x")
    volume = docker_api.inspect_container(env.container_id)["Mounts"][0]["Name"]
    assert docker_api.inspect_volume(volume)["Labels"]["envlayer.data"] == "workspace"
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(30)
    assert docker_api.inspect_volume(volume)["Name"] == volume  # force_remove alone keeps the data
    again = make_env(task)
    again.cleanup(force_remove=True, purge=True)
    assert again.wait_for_cleanup(30)
    from docker.errors import NotFound

    with pytest.raises(NotFound):
        docker_api.inspect_volume(volume)


def test_stopped_container_is_started_on_attach(make_env, docker_api) -> None:
    task = _task()
    env = make_env(task)
    env.exec("echo kept > /workspace/f")
    env.cleanup()
    docker_api.stop(env.container_id, timeout=1)
    again = make_env(task)
    assert again.container_id == env.container_id
    assert again.exec("cat /workspace/f").stdout_text == "kept\n"


# --- cleanup ----------------------------------------------------------------------------------------


def _top(api: Any, cid: str) -> list[str]:
    """The command lines of the container's processes (``ps`` on the host: no exec)."""
    return [" ".join(p[1:]) for p in api.top(cid, ps_args="-o pid,args")["Processes"]]


def test_persist_cleanup_leaves_it_running(make_env, docker_api) -> None:
    env = make_env()
    # `$!` is known right after the fork, while the job is still a copy of the shell (its
    # command line says /bin/sh until it has exec'd `sleep`): the command returns only once
    # the job shows as `sleep 1000`, so a slow exec under load cannot pass for a kill.
    started = "sleep 1000 > /dev/null 2>&1 & j=$!; until grep -q 1000 /proc/$j/cmdline; do sleep 0.05; done"
    env.exec(started, timeout=60).check()
    env.cleanup()
    assert env.wait_for_cleanup(1) is True
    assert _status(docker_api, env.container_id) == "running"
    with pytest.raises(EnvironmentClosed):
        env.exec("true")
    # The session shell (the container's only /bin/sh) ends after cleanup() returned:
    # the job must outlive it.
    deadline = time.monotonic() + 60
    while "/bin/sh" in _top(docker_api, env.container_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    processes = _top(docker_api, env.container_id)
    assert "/bin/sh" not in processes, f"cleanup() did not end the session shell: {processes}"
    assert "sleep 1000" in processes


def _background_job(env: DockerEnvironment, command: str, mark: str) -> str:
    """Start ``command &`` in the session; its pid, once it has exec'd (until then it is a
    copy of the shell, whose hidden fds it still holds)."""
    started = env.exec(
        f"{command} & j=$!; until grep -q {mark} /proc/$j/cmdline; do sleep 0.05; done; echo $j", timeout=60
    )
    return started.check().stdout_text.strip()


def test_background_job_holds_none_of_the_session_streams(make_env) -> None:
    env = make_env()
    pid = _background_job(env, "sleep 1001 > /dev/null 2>&1", "1001")
    listing = env.exec(
        f"for f in /proc/{pid}/fd/*; do readlink $f; done; echo --; readlink /proc/$$/fd/1; readlink /proc/$$/fd/2"
    )
    held, session = listing.check().stdout_text.split("--\n")
    assert session.split() and not set(held.split()) & set(session.split()), listing.stdout_text


def test_background_job_outlives_a_persist_cleanup_and_the_next_calls_work(make_env) -> None:
    """A job writing to the session's stdout keeps the ended shell's exec open, and the
    daemon then ends every other exec of the container seconds late: the next calls,
    including those that run a helper exec (large stdin, a timeout's kill), still give
    their results, and the job keeps running."""
    first = make_env()
    pid = _background_job(first, "sleep 1002", "1002")
    first.cleanup()
    again = make_env(task=first.task_id)
    assert again.exec("wc -c", stdin=b"x" * 100_000).check().stdout_text.split() == ["100000"]
    assert again.exec("sleep 30", timeout=1).timed_out
    assert again.exec(f"kill -0 {pid} && echo alive").stdout == b"alive\n"


def test_background_output_never_corrupts_a_later_call(make_env) -> None:
    env = make_env()
    started = env.exec("(i=0; while [ $i -lt 40 ]; do i=$((i + 1)); echo tick$i; sleep 0.02; done) &").check()
    # what the job printed before the call that started it ended belongs to that call
    ticks = started.stdout_text.splitlines()
    deadline = time.monotonic() + 60
    n = 0
    while "tick40" not in ticks and time.monotonic() < deadline:
        n += 1
        result = env.exec(f"sleep 0.01; echo mine{n}")
        lines = result.check().stdout_text.splitlines()
        assert [line for line in lines if not line.startswith("tick")] == [f"mine{n}"], lines
        ticks += [line for line in lines if line.startswith("tick")]
    assert ticks == [f"tick{i}" for i in range(1, 41)]


def test_force_remove_and_wait_for_cleanup(make_env, docker_api) -> None:
    env = make_env()
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(30) is True
    assert _status(docker_api, env.container_id) == "removed"


def test_force_remove_after_plain_cleanup(make_env, docker_api) -> None:
    env = make_env()
    env.cleanup()
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(30) is True
    assert _status(docker_api, env.container_id) == "removed"


def test_opt_out_mode_removes_and_is_private(make_env, docker_api, profile) -> None:
    task = _task()
    a = make_env(task, persist_across_processes=False)
    b = make_env(task, persist_across_processes=False)
    assert a.container_id != b.container_id
    assert docker_api.inspect_container(a.container_id)["Config"]["Labels"]["envlayer.persist"] == "0"
    a.cleanup()
    assert a.wait_for_cleanup(30) is True
    assert _status(docker_api, a.container_id) == "removed"
    assert _status(docker_api, b.container_id) == "running"


def test_opt_out_container_removed_when_process_exits_right_after_cleanup(
    run_python, child_env_code, docker_api, profile
) -> None:
    cid = run_python(
        child_env_code(_task(), profile, persist_across_processes=False) + "print(env.container_id)\nenv.cleanup()\n"
    ).strip()
    assert _status(docker_api, cid) == "removed"  # the atexit hook joined the teardown


# --- reaper -----------------------------------------------------------------------------------------


class _FrozenClock:
    """The ``time`` module as seen by the reaper, with ``time()`` stopped at ``at``."""

    def __init__(self, at: float) -> None:
        self._at = at

    def time(self) -> float:
        return self._at

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _finished_at(docker_api: Any, container_id: str) -> float:
    """When the (stopped) container's main process ended, in epoch seconds."""
    finished = reaper.parse_docker_time(docker_api.inspect_container(container_id)["State"]["FinishedAt"])
    assert finished is not None, container_id
    return finished


def test_reaper_spares_running_recent_and_other_profile(make_env, docker_api, profile, monkeypatch) -> None:
    other = profile + "-other"
    stale = [make_env() for _ in range(2)]
    stale_other = make_env(prof=other)
    running = make_env()
    for env in (*stale, stale_other):
        docker_api.stop(env.container_id, timeout=1)
    never_started = docker_api.create_container(
        "envlayer-test:busybox" if False else running.options.image,
        command=["true"],
        labels=labels.managed_labels(profile=profile, task="never", fingerprint_value="v1-x", persist=True, extra={}),
    )["Id"]
    recent = make_env()
    docker_api.stop(recent.container_id, timeout=1)
    # The reaper's clock stops max_age (2 s) after the midpoint between the last stale
    # container's age reference (stop, or creation for never_started) and `recent`'s stop:
    # the stale ones are older than max_age and `recent` younger, by half that gap, with no
    # wall-clock wait and however long the daemon takes to answer under load (at load 40 a
    # real clock passed the 2 s mark before the second sweep and `recent` was removed).
    stale_refs = [_finished_at(docker_api, e.container_id) for e in stale]
    stale_refs.append(reaper.parse_docker_time(docker_api.inspect_container(never_started)["Created"]))
    recent_stopped = _finished_at(docker_api, recent.container_id)
    assert max(stale_refs) < recent_stopped, (stale_refs, recent_stopped)
    monkeypatch.setattr(reaper, "time", _FrozenClock((max(stale_refs) + recent_stopped) / 2 + 2.0))

    preview = DockerEnvironment.reap_orphans(profile=profile, max_age=2.0, dry_run=True, options=running.options)
    expected = {e.container_id[:12] for e in stale} | {never_started[:12]}
    assert {i.detail["container_id"] for i in preview} == expected
    assert all(_status(docker_api, e.container_id) == "exited" for e in stale)  # dry run removed nothing

    removed = DockerEnvironment.reap_orphans(profile=profile, max_age=2.0, dry_run=False, options=running.options)
    assert {i.detail["container_id"] for i in removed} == expected
    assert all(i.backend == "docker" and i.profile == labels.sanitize(profile) for i in removed)
    for env in stale:
        assert _status(docker_api, env.container_id) == "removed"
    assert _status(docker_api, never_started) == "removed"
    assert _status(docker_api, running.container_id) == "running"
    assert _status(docker_api, recent.container_id) == "exited"
    assert _status(docker_api, stale_other.container_id) == "exited"


def test_reaper_removes_private_container_of_a_dead_process(
    run_python, child_env_code, make_env, docker_api, profile
) -> None:
    own = profile + "-owners"
    mine = make_env(prof=own, persist_across_processes=False)  # owner alive: this process
    proc = run_python(
        child_env_code(_task(), own, persist_across_processes=False)
        + "print(env.container_id, flush=True)\nimport time; time.sleep(300)\n",
        wait=False,
    )
    orphan = first_line_then_kill(proc)
    assert _status(docker_api, orphan) == "running"  # SIGKILL: no cleanup ran
    removed = DockerEnvironment.reap_orphans(profile=own, max_age=3600, dry_run=False, options=mine.options)
    assert [i.detail["container_id"] for i in removed] == [orphan[:12]]
    assert _status(docker_api, orphan) == "removed"
    assert _status(docker_api, mine.container_id) == "running"


def test_idle_reclaim_removes_only_truly_idle(make_env, docker_api, profile, caplog) -> None:
    caplog.set_level("DEBUG", logger="envlayer.docker.reaper")  # why a container was kept
    own = profile + "-idle"  # other tests' idle containers live in the main test profile
    idle = make_env(prof=own, lease_interval=0)
    idle.exec("true")
    busy = make_env(prof=own, lease_interval=0)
    bg = make_env(prof=own, lease_interval=0)
    bg.exec("sleep 1000 > /dev/null 2>&1 &")
    # busy runs a command for as long as the check takes (cancelled afterwards): it is kept
    # because its command is alive, whatever its lease's age and however slow the machine
    stop_busy = CancelToken()
    holder = threading.Thread(target=lambda: busy.exec("sleep 900", timeout=1000, cancel=stop_busy))
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while "sleep 900" not in _top(docker_api, busy.container_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        # idle's lease (its last command) is now older than idle_reclaim_after: the check
        # compares whole seconds (date +%s, stat -c %Y), which differ by >= 1 once 1 s has passed
        time.sleep(1.1)
        opts = idle.options.__class__(image=idle.options.image, idle_reclaim_after=1.0)
        removed = DockerEnvironment.reap_orphans(profile=own, max_age=3600, dry_run=False, options=opts)
    finally:
        stop_busy.cancel()
        holder.join()
    assert {i.detail["container_id"] for i in removed} == {idle.container_id[:12]}, caplog.text
    assert _status(docker_api, idle.container_id) == "removed"
    assert _status(docker_api, busy.container_id) == "running"
    assert _status(docker_api, bg.container_id) == "running"
    # the stale handle recovers: the next call re-creates the container
    assert idle.exec("echo back").stdout_text == "back\n"


def test_list_and_remove_sandbox(make_env, docker_api, profile) -> None:
    task = "list/me"
    env = make_env(task)
    listed = DockerEnvironment.list_sandboxes(profile=profile, options=env.options)
    mine = [i for i in listed if i.detail.get("container_id") == env.container_id[:12]]
    assert mine and mine[0].task == task and mine[0].status == "running", "the id as given, which rm takes"
    assert DockerEnvironment.remove_sandbox(task, profile=profile, options=env.options, force=False) == []
    removed = DockerEnvironment.remove_sandbox(task, profile=profile, options=env.options, force=True)
    assert [i.detail["container_id"] for i in removed] == [env.container_id[:12]]
    assert _status(docker_api, env.container_id) == "removed"


# --- exec behaviour specific to Docker ------------------------------------------------------------------


def _processes(env: Any) -> list[str]:
    out = env.exec("for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline; echo; done").stdout_text
    return [line.strip() for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_no_survivors_after_timeout(make_env, mode) -> None:
    env = make_env(exec_mode=mode)
    result = env.exec("sleep 401 & sh -c 'sleep 402' & (sleep 403; true) & sleep 404", timeout=1)
    assert result.timed_out and result.exit_code == 124
    leftovers = [p for p in _processes(env) if "sleep 40" in p]
    assert leftovers == []


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_per_call_cwd_env_stdin_together(make_env, mode) -> None:
    env = make_env(exec_mode=mode)
    env.exec("mkdir -p /workspace/d").check()
    r = env.exec('pwd; printf "%s:" "$K"; cat', cwd="d", env={"K": "v 1"}, stdin=b"in\x00put")
    assert (r.exit_code, r.stdout) == (0, b"/workspace/d\nv 1:in\x00put")
    missing = env.exec("pwd", cwd="/does/not/exist")
    assert missing.exit_code == 126 and b"does not exist" in missing.stderr
    assert env.exec(["no-such-program-xyz", "arg"]).exit_code == 127
    assert env.exec("pwd").stdout_text == "/workspace\n"


def test_oneshot_exit_and_exec_in_the_command_keep_output_and_status(make_env) -> None:
    """The one-shot wrapper runs the command in a subshell: ``exit`` and ``exec`` end the
    command, not the wrapper, so its trailer (the proof that all output arrived) is still
    printed and the status is the command's."""
    env = make_env(exec_mode="oneshot")
    cases = {"echo a; exit 0": (0, b"a\n"), "echo b; exit 5": (5, b"b\n"), "exec echo c": (0, b"c\n")}
    for command, expected in cases.items():
        result = env.exec(command)
        assert (result.exit_code, result.stdout) == expected, command
    argv = env.exec(["sh", "-c", "echo d; exit 3"])
    assert (argv.exit_code, argv.stdout) == (3, b"d\n")


def test_timeout_spares_background_jobs_of_earlier_commands(make_env) -> None:
    env = make_env()
    env.exec("sleep 500 > /dev/null 2>&1 &")
    assert env.exec("sleep 30", timeout=1).timed_out
    assert any("sleep 500" in p for p in _processes(env))


def test_session_restarts_in_last_cwd(make_env) -> None:
    env = make_env()
    env.exec("mkdir -p /workspace/deep && cd /workspace/deep").check()
    assert env.exec("sleep 10", timeout=0.5).timed_out
    assert env.exec("pwd").stdout_text == "/workspace/deep\n"
    assert env.exec("exit 7").exit_code == 7
    assert env.exec("pwd").stdout_text == "/workspace/deep\n"
    syntax = env.exec("echo (")
    assert syntax.exit_code == 2 and syntax.stderr
    assert env.exec("echo fine").stdout_text == "fine\n"


def test_concurrent_calls_on_one_env(make_env) -> None:
    env = make_env()
    results: dict[int, Any] = {}

    def work(i: int) -> None:
        results[i] = env.exec(f"sleep 0.2; echo {i}", env={"N": str(i)})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: r.stdout_text for i, r in results.items()} == {i: f"{i}\n" for i in range(8)}


def test_streaming_and_caps(make_env) -> None:
    env = make_env(max_output_bytes=1000)
    chunks: list[tuple[str, bytes]] = []
    result = env.exec("head -c 5000 /dev/zero; echo e >&2", on_output=lambda s, c: chunks.append((s, c)))
    assert sum(len(c) for s, c in chunks if s == "stdout") == 5000
    assert result.stdout_truncation is not None and result.stdout_truncation.total == 5000
    assert result.stderr == b"e\n"


def test_interrupt_kills_the_command(make_env) -> None:
    env = make_env()

    def boom(stream: str, chunk: bytes) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        env.exec("echo go; sleep 405", on_output=boom)
    assert not any("sleep 405" in p for p in _processes(env))


# --- recovery and errors -----------------------------------------------------------------------------------


def test_vanished_container_is_recreated_once_without_rerun(make_env, docker_api, tmp_path) -> None:
    os.chmod(tmp_path, 0o777)
    env = make_env(volumes=[f"{tmp_path}:/shared"])
    env.exec("true")
    docker_api.remove_container(env.container_id, force=True)
    result = env.exec("echo run >> /shared/count")
    assert result.ok and result.recovered == "container recreated"
    assert (tmp_path / "count").read_text() == "run\n"  # ran exactly once
    assert env.exec("true").recovered == ""
    # removed while a command runs: an error, and the command is not run again
    old = env.container_id
    killer = threading.Timer(1.0, lambda: docker_api.remove_container(old, force=True))
    killer.start()
    with pytest.raises(BackendUnavailable, match="NOT re-run"):
        env.exec("echo once >> /shared/mid; sleep 30", timeout=60)
    killer.join()
    assert (tmp_path / "mid").read_text() == "once\n"
    assert env.exec("cat /shared/mid").stdout_text == "once\n"


def test_container_stopped_under_a_live_env_is_restarted(make_env, docker_api) -> None:
    env = make_env()
    env.exec("echo kept > /workspace/f").check()
    docker_api.stop(env.container_id, timeout=1)
    assert env.exec("cat /workspace/f").stdout_text == "kept\n"
    assert _status(docker_api, env.container_id) == "running"
    docker_api.stop(env.container_id, timeout=1)
    assert env.read_file("/workspace/f") == b"kept\n"  # the archive API works on stopped containers


def test_missing_image_fails_fast_and_leaves_nothing(docker_api, profile, options) -> None:
    task = _task()
    start = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        DockerEnvironment(options(image="envlayer-test:does-not-exist"), task_id=task, profile=profile)
    assert time.monotonic() - start < 10
    assert "never pulls" in str(info.value) and "pull = true" in info.value.hint
    assert _containers(docker_api, profile, task) == []
    with pytest.raises(BackendUnavailable):
        DockerEnvironment.check_available(options(image="envlayer-test:does-not-exist"))


def test_daemon_unreachable_is_a_clear_error(options) -> None:
    with pytest.raises(BackendUnavailable) as info:
        DockerEnvironment(options(docker_host="unix:///nonexistent/docker.sock"), task_id=_task())
    assert "cannot reach the Docker daemon" in str(info.value) and "DOCKER_HOST" in info.value.hint


def test_failed_start_removes_half_made_container(docker_api, profile, options) -> None:
    task = _task()
    with pytest.raises(BackendUnavailable):
        DockerEnvironment(
            options(shell="/bin/sh", extra_create_kwargs={"devices": ["/dev/nonexistent-envlayer:/dev/x"]}),
            task_id=task,
            profile=profile,
        )
    assert _containers(docker_api, profile, task) == []


def test_ctrl_c_while_the_daemon_creates_leaves_no_container(docker_api, profile, options, monkeypatch) -> None:
    """A real SIGINT that arrives after the daemon made the container but before docker-py
    handed back its id (the moment is chosen by wrapping the real call): the create is
    finished, the container removed, then the interrupt propagates."""
    import docker

    real_create = docker.APIClient.create_container

    def create_then_ctrl_c(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = real_create(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return made

    monkeypatch.setattr(docker.APIClient, "create_container", create_then_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    task = _task()
    try:
        with pytest.raises(KeyboardInterrupt):
            DockerEnvironment(options(), task_id=task, profile=profile)
        left = _containers(docker_api, profile, task)
    finally:
        signal.signal(signal.SIGINT, previous)
        for container in _containers(docker_api, profile, task):
            docker_api.remove_container(container["Id"], force=True, v=True)
        workspace.remove(docker_api, options(), profile=profile, task=task)
    assert left == [], "the interrupted create left its container"


@pytest.mark.parametrize("key", ["volumes", "host_cwd"])
def test_missing_bind_source_is_refused_not_created(docker_api, profile, options, tmp_path, key) -> None:
    task = _task()
    missing = tmp_path / "not-there"
    kw = {"volumes": [f"{missing}:/data"]} if key == "volumes" else {"mount_cwd": True, "host_cwd": str(missing)}
    with pytest.raises(ConfigError, match="does not exist") as info:
        DockerEnvironment(options(**kw), task_id=task, profile=profile)
    assert str(missing) in info.value.message and info.value.hint
    assert not missing.exists()
    assert _containers(docker_api, profile, task) == []


# --- files ------------------------------------------------------------------------------------------------


def test_files_in_tmpfs_and_rootfs_and_modes(make_env) -> None:
    env = make_env()
    for path in ("/tmp/a/b.bin", "/workspace/a/b.bin", "/root/x.bin"):
        payload = os.urandom(3000)
        env.write_file(path, payload)
        assert env.read_file(path) == payload
        assert env.exec(f"cat {path} | wc -c").stdout_text.strip() == "3000"
    env.exec("printf '#!/bin/sh\\necho v1\\n' > /workspace/run.sh && chmod 755 /workspace/run.sh").check()
    env.write_file("/workspace/run.sh", "#!/bin/sh\necho v2\n")
    assert env.exec("/workspace/run.sh").stdout_text == "v2\n"  # mode kept
    env.exec("ln -sf /workspace/run.sh /workspace/link").check()
    assert env.read_file("/workspace/link").startswith(b"#!/bin/sh")


def test_file_root_blocks_symlink_escape(make_env) -> None:
    from envlayer.errors import SandboxPathError

    env = make_env()
    env.exec("mkdir -p /workspace/jail && ln -sf /etc /workspace/jail/etc").check()
    env.options.file_root = "/workspace/jail"
    with pytest.raises(SandboxPathError):
        env.read_file("/workspace/jail/etc/passwd")


def test_directory_roundtrip(make_env, tmp_path) -> None:
    env = make_env()
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.bin").write_bytes(os.urandom(5000))
    os.symlink("a.txt", src / "link")
    for remote in ("/workspace/up", "/tmp/up"):
        env.upload_dir(str(src), remote)
        assert env.exec(f"cat {remote}/a.txt {remote}/link").stdout_text == "AA"
        dest = tmp_path / ("down" + remote.replace("/", "_"))
        env.download_dir(remote, str(dest))
        assert (dest / "a.txt").read_text() == "A"
        assert (dest / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
        assert os.readlink(dest / "link") == "a.txt"


def test_download_rejects_escaping_symlink(make_env, tmp_path) -> None:
    from envlayer.errors import SandboxPathError

    env = make_env()
    env.exec("mkdir -p /workspace/evil && ln -s /etc/passwd /workspace/evil/pw").check()
    with pytest.raises(SandboxPathError):
        env.download_dir("/workspace/evil", str(tmp_path / "out"))


# --- agent-grade defaults: reclaim, /dev/shm, init entrypoints ----------------------------------------------


def test_idle_reclaim_is_on_by_default_through_the_manager(make_env, docker_api, profile, run_python) -> None:
    from envlayer_docker.options import DEFAULT_IDLE_RECLAIM_AFTER, DockerOptions

    assert DockerOptions().idle_reclaim_after == DEFAULT_IDLE_RECLAIM_AFTER == 6 * 3600
    assert DockerOptions(idle_reclaim_after=0).idle_reclaim_after is None  # 0 disables it
    own = profile + "-reclaim"
    idle = make_env(prof=own, lease_interval=0)
    idle.exec("echo kept > /workspace/f")
    busy = make_env(prof=own, lease_interval=0)
    busy.exec("sleep 1000 > /dev/null 2>&1 &")
    time.sleep(2.5)
    # a new process using only configuration (the short setting from the environment):
    # its manager's once-per-process orphan sweep reclaims the idle container
    code = f"""
import os
os.environ["ENVLAYER_DOCKER_IDLE_RECLAIM_AFTER"] = "2"
from envlayer.config import load_settings
from envlayer.agents.manager import EnvironmentManager
settings = load_settings(env=dict(os.environ), backend="docker", profile={own!r},
                         backend_options={{"image": {idle.options.image!r}}})
with EnvironmentManager(settings) as manager:
    manager.get("newcomer").exec("true")
    sweep = manager.orphan_sweep()
    assert sweep.wait(60)
    for outcome in sweep.outcomes:
        for info in outcome.sandboxes:
            print(info.detail["container_id"])
    manager.release("newcomer", force_remove=True)
"""
    out = run_python(code, timeout=120)
    assert out.split() == [idle.container_id[:12]]
    assert _status(docker_api, idle.container_id) == "removed"
    assert _status(docker_api, busy.container_id) == "running"
    # the reclaimed container's workspace survives: the next call re-creates it with the file
    again = idle.exec("cat /workspace/f")
    assert again.stdout_text == "kept\n" and again.recovered


def test_dev_shm_is_1g_by_default(make_env, docker_api) -> None:
    env = make_env()
    assert docker_api.inspect_container(env.container_id)["HostConfig"]["ShmSize"] == 1024**3
    assert " 1048576 " in env.exec("df -k /dev/shm").stdout_text
    small = make_env(shm_size="0")
    assert docker_api.inspect_container(small.container_id)["HostConfig"]["ShmSize"] == 64 * 1024**2


@pytest.fixture(scope="module")
def init_image(build_image) -> Any:
    """An image whose ENTRYPOINT is an init (``/init``) that starts a service and runs its
    arguments, like s6-overlay. Removed after the module.

    Like a real init it stays PID 1 and exits on SIGTERM (s6-overlay's /init brings its services
    down and exits; tini forwards the signal). An init that ``exec``s its arguments would leave
    ``sleep`` as PID 1, which the kernel shields from SIGTERM, and every removal would wait the
    whole ``stop_timeout`` (5 s) before the SIGKILL."""
    import io
    import tarfile

    base = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
    files = {
        "Dockerfile": f'FROM {base}\nCOPY init /init\nRUN chmod 755 /init\nENTRYPOINT ["/init"]\n',
        "init": "\n".join(
            ["#!/bin/sh", "trap 'exit 143' TERM", 'echo "pid $$" > /tmp/init-ran', "sleep 100000 &", '"$@" &', "wait\n"]
        ),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return build_image(f"envlayer-test-init:{uuid.uuid4().hex[:8]}", buf.getvalue(), custom_context=True)


@pytest.mark.parametrize(("mode", "kept"), [("auto", True), ("keep", True), ("replace", False)])
def test_init_entrypoint_is_kept_when_asked_or_detected(make_env, docker_api, init_image, mode, kept) -> None:
    env = make_env(image=init_image, image_entrypoint=mode)
    info = docker_api.inspect_container(env.container_id)
    ran = env.exec("cat /tmp/init-ran")
    if kept:
        assert ran.stdout_text == "pid 1\n"  # the image's init is PID 1 (docker's own init is off)
        assert info["HostConfig"]["Init"] in (False, None)
        assert env.exec("pgrep -f 'sleep 100000' || ps | grep -c 'sleep 10000[0]'").exit_code == 0
    else:
        assert ran.exit_code != 0
        assert info["HostConfig"]["Init"] is True
    assert env.exec("echo ok").stdout_text == "ok\n"


# --- finding the daemon -----------------------------------------------------------------------------------


def _context(config_dir, name: str, host: str) -> None:
    import hashlib
    import json

    meta = config_dir / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Endpoints": {"docker": {"Host": host}}}))


def test_daemon_found_through_the_current_docker_context(tmp_path, monkeypatch, options) -> None:
    from envlayer_docker import client

    real = client.discover_address(None, {"PATH": ""})  # this machine's daemon socket
    assert real.startswith("unix://")
    link = tmp_path / "ctx.sock"
    link.symlink_to(real.removeprefix("unix://"))
    config_dir = tmp_path / "docker-config"
    _context(config_dir, "mine", f"unix://{link}")
    (config_dir / "config.json").write_text('{"currentContext": "mine"}')
    env = {"DOCKER_CONFIG": str(config_dir)}
    assert client.discover_address(None, env) == f"unix://{link}"
    assert client.discover_address(None, {**env, "DOCKER_CONTEXT": "default"}) == real
    assert client.discover_address(None, {**env, "DOCKER_HOST": "tcp://127.0.0.1:1"}) == "tcp://127.0.0.1:1"
    assert client.discover_address("unix:///x.sock", env) == "unix:///x.sock"
    # and a real connection goes through it
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    api = client.get_client(options(api_timeout=17.0))
    assert api.ping() is True
    assert client._CLIENTS.get((client.client_identity(options(), os.environ), 17.0)) is api
    assert client.client_identity(options(), os.environ).server == f"unix://{link}"


def test_callers_with_other_registry_credentials_get_their_own_client(tmp_path, monkeypatch, options) -> None:
    """Two callers (of one broker) on one daemon whose ``DOCKER_CONFIG`` differ (registry
    credentials, ``auths`` of config.json) get a client each, holding their own
    credentials: docker-py reads them when the client is made (``docker/api/client.py``
    ``APIClient.__init__``, ``auth.load_config``)."""
    from envlayer_docker import client

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    seen = []
    for user in ("alice", "bob"):
        config_dir = tmp_path / user
        config_dir.mkdir()
        auth = base64.b64encode(f"{user}:secret".encode()).decode()
        (config_dir / "config.json").write_text(json.dumps({"auths": {"registry.example": {"auth": auth}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
        api = client.get_client(options())
        assert api.ping() is True
        assert api._auth_configs.resolve_authconfig("registry.example")["username"] == user
        seen.append(api)
    assert seen[0] is not seen[1]


def test_podman_and_rootless_sockets_are_discovered(tmp_path) -> None:
    from envlayer_docker import client

    runtime = tmp_path / "run-user"
    (runtime / "podman").mkdir(parents=True)
    env = {"XDG_RUNTIME_DIR": str(runtime), "DOCKER_CONFIG": str(tmp_path / "none")}
    candidates = [str(tmp_path / "no-docker.sock"), *client.socket_candidates(env)[1:3]]
    assert candidates[1:] == [f"{runtime}/docker.sock", f"{runtime}/podman/podman.sock"]
    assert client.discover_address(None, env, candidates) == f"unix://{client.DEFAULT_SOCKET}"  # none exists
    (runtime / "podman" / "podman.sock").write_text("")
    assert client.discover_address(None, env, candidates) == f"unix://{runtime / 'podman' / 'podman.sock'}"
    (runtime / "docker.sock").write_text("")
    assert client.discover_address(None, env, candidates) == f"unix://{runtime / 'docker.sock'}"


def test_staged_stdin_is_private_and_pager_is_cat(make_env) -> None:
    env = make_env()
    staged = env.exec(
        'stat -L -c \'%a %U\' /dev/stdin; ls -ld "$(dirname "$(readlink /proc/self/fd/0)")"; cat', stdin="payload"
    )
    mode, listing, payload = staged.stdout_text.split("\n", 2)
    assert mode == "600 root" and listing.startswith("drwx------") and payload == "payload"
    assert env.exec("echo $PAGER $GIT_PAGER").stdout_text == "cat cat\n"
    assert make_env(env={"PAGER": "more"}).exec("echo $PAGER").stdout_text == "more\n"


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_cancel_from_another_thread_kills_the_tree_in_the_container(make_env, mode) -> None:
    from envlayer.testing.cancelling import exec_cancelled_after_output

    env = make_env(exec_mode=mode)
    result = exec_cancelled_after_output(env, "echo started; sleep 308 & setsid sleep 309 & sleep 310", timeout=120)
    assert result.cancelled and result.exit_code == 130 and result.stdout_text == "started\n"
    assert not [p for p in _processes(env) if "sleep 30" in p or "sleep 31" in p]
    assert env.exec("echo usable").stdout_text == "usable\n"


# --- leftovers of killed test runs -----------------------------------------------------------


def test_sweep_removes_a_dead_runs_leftovers_and_spares_a_live_run(make_env, docker_api, profile, sweep, tmp_path):
    """The conftest's sweep of killed runs (see its docstring), on real containers and a
    real lock held by another live process."""
    dead, live = f"{profile}-deadrun", f"{profile}-liverun"
    dead_env, live_env = make_env(prof=dead), make_env(prof=live)
    (tmp_path / f"{dead}.lock").touch()  # its run died: nobody holds the lock
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(tmp_path / f"{live}.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        swept = sweep(docker_api, str(tmp_path))
        assert list(swept) == [dead] and dead_env.container_id[:12] in swept[dead]
        assert _status(docker_api, dead_env.container_id) == "removed"
        assert _status(docker_api, live_env.container_id) == "running"
        assert sorted(os.listdir(tmp_path)) == [f"{live}.lock"]
    finally:
        holder.kill()
        holder.wait()


_HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""
