"""The session broker on Docker and SSH: session state across CLI calls, and a broker
killed with SIGKILL mid-command (reported; the next call starts a new broker that
re-attaches; nothing is left running, no container leaked)."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_helpers import BrokerRun, processes_with, wait_until

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
SSH_TESTS = Path(__file__).resolve().parents[2] / "plugins" / "ssh" / "tests"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def docker_api() -> Iterator[Any]:
    try:
        import docker

        api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
        api.ping()
        api.inspect_image(IMAGE)
    except Exception as exc:
        _unavailable(f"Docker or the image {IMAGE} is not usable ({type(exc).__name__}); run scripts/provision")
    yield api


@pytest.fixture
def docker_brk(brk: BrokerRun, docker_api: Any) -> Iterator[BrokerRun]:
    """``brk`` on the Docker backend; its containers and volumes removed at the end."""
    brk.env.update(ENVLAYER_BACKEND="docker", ENVLAYER_DOCKER_IMAGE=IMAGE)
    try:
        yield brk
    finally:
        brk.close()
        label = {"label": f"envlayer.profile={brk.profile}"}
        for summary in docker_api.containers(all=True, filters=label):
            docker_api.remove_container(summary["Id"], force=True, v=True)
        for volume in (docker_api.volumes(filters=label) or {}).get("Volumes") or []:
            docker_api.remove_volume(volume["Name"], force=True)


def _containers(api: Any, brk: BrokerRun) -> list[str]:
    return [c["Id"] for c in api.containers(all=True, filters={"label": f"envlayer.profile={brk.profile}"})]


@pytest.fixture
def ssh_brk(brk: BrokerRun) -> Iterator[BrokerRun]:
    """``brk`` on the SSH backend, against a loopback sshd of the SSH tests' kind."""
    sys.path.insert(0, str(SSH_TESTS))
    from ssh_testserver import running_sshd

    with running_sshd(_unavailable) as server:
        opts = server.options()
        (brk.workdir / "envlayer.toml").write_text(
            'backend = "ssh"\n[backends.ssh]\n'
            f'host = "{opts["host"]}"\nport = {opts["port"]}\nuser = "{opts["user"]}"\n'
            f'key_files = ["{opts["key_files"][0]}"]\nuse_agent = false\nlook_for_keys = false\n'
            f'ssh_config = ""\nknown_hosts = "{opts["known_hosts"]}"\n'
        )
        try:
            yield brk
        finally:
            brk.close()


def _session_state(brk: BrokerRun) -> None:
    # on SSH the sandbox's /tmp is this machine's: a name of this run's own, removed after
    work = f"/tmp/elb-src-{uuid.uuid4().hex[:8]}"
    try:
        assert brk.run("exec", "--task", "t", "--", f"mkdir -p {work} && cd {work} && export V=42").returncode == 0
        out = brk.run("exec", "--task", "t", "--", "pwd; echo $V")
        assert out.returncode == 0 and out.stdout == f"{work}\n42\n", out.stderr
        assert len(brk.broker_pids()) == 1
    finally:
        brk.run("exec", "--task", "t", "--", f"cd /; rm -rf {work}")


def _killed_mid_command(brk: BrokerRun) -> None:
    marker = f"elbkill{uuid.uuid4().hex[:8]}"
    script = f"/tmp/{marker}.sh"
    brk.run("exec", "--task", "t", "--", f"printf 'while [ ! -e /tmp/{marker}.go ]; do sleep 0.1; done\\n' > {script}")
    [old] = brk.broker_pids()
    proc = brk.popen("exec", "--task", "t", "--", f"echo running; sh {script}")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"running\n"
        wait_until(lambda: processes_with(marker), "the command's start")
        os.kill(old, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 125 and b"went away while the command ran" in err, err
    # the next call starts a new broker, which reaches the same sandbox
    release = brk.run("exec", "--task", "t", "--", f"touch /tmp/{marker}.go && echo released")
    assert release.returncode == 0 and release.stdout == "released\n", release.stderr
    [new] = brk.broker_pids()
    assert new != old
    wait_until(lambda: not processes_with(marker), "the orphaned command's end")
    assert brk.run("exec", "--task", "t", "--", f"rm {script} /tmp/{marker}.go; echo ok").stdout == "ok\n"


@pytest.mark.docker
def test_docker_session_state_across_calls(docker_brk: BrokerRun) -> None:
    _session_state(docker_brk)


@pytest.mark.docker
def test_docker_broker_killed_mid_command(docker_brk: BrokerRun, docker_api: Any) -> None:
    docker_brk.run("exec", "--task", "t", "--", "true")
    before = _containers(docker_api, docker_brk)
    assert len(before) == 1
    _killed_mid_command(docker_brk)
    assert _containers(docker_api, docker_brk) == before  # re-attached: no second container


@pytest.mark.docker
def test_docker_private_sandbox_of_a_killed_broker_is_reaped(docker_brk: BrokerRun, docker_api: Any) -> None:
    private = {"ENVLAYER_DOCKER_PERSIST_ACROSS_PROCESSES": "false"}
    assert docker_brk.run("exec", "--task", "t", "--", "true", env=private).returncode == 0
    [first] = _containers(docker_api, docker_brk)
    [old] = docker_brk.broker_pids()
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: old not in docker_brk.broker_pids(), "the broker's death")
    assert docker_brk.run("exec", "--task", "t", "--", "echo new", env=private).stdout == "new\n"
    wait_until(lambda: first not in _containers(docker_api, docker_brk), "the orphan reaper's removal")
    assert len(_containers(docker_api, docker_brk)) == 1


@pytest.mark.ssh
def test_ssh_session_state_across_calls(ssh_brk: BrokerRun) -> None:
    _session_state(ssh_brk)


@pytest.mark.ssh
def test_ssh_broker_killed_mid_command(ssh_brk: BrokerRun) -> None:
    ssh_brk.run("exec", "--task", "t", "--", "true")
    _killed_mid_command(ssh_brk)
