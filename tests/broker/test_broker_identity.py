"""Two callers of ONE broker that differ only in a variable (or a credential file's
content) never share a client or a sandbox: each call reaches its own target, with its
own credentials. Real SDK clients against the local fakes (Modal, Daytona, Kubernetes)
and a real sshd with two ssh-agents."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_helpers import BrokerRun

from envlayer.testing.fixtures import import_by_path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _docker_image_usable() -> None:
    try:
        import docker

        docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env()).inspect_image(IMAGE)
    except Exception as exc:
        _unavailable(f"Docker or the image {IMAGE} is not usable ({type(exc).__name__}); run scripts/provision")


def _exec(brk: BrokerRun, env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return brk.run("exec", "--task", "t", "--", *command, env=env)


def _identities_held(brk: BrokerRun) -> list[tuple[str, str]]:
    """(server, identity) of each environment the broker holds for task t."""
    out = brk.run("broker", "status", "--json")
    assert out.returncode == 0, out.stderr
    [broker] = json.loads(out.stdout)
    return sorted((e["server"], e["identity"]) for e in broker["environments"] if e["task"] == "t")


# --- Modal: two tokens, one fake that names the caller of every RPC by its token ---------


@pytest.fixture
def fake_modal() -> Iterator[Any]:
    _docker_image_usable()
    sys.path.insert(0, str(PLUGINS / "modal" / "tests" / "fake_modal"))
    import modal_fake_launcher as launcher

    fake = launcher.start()
    try:
        yield fake
    finally:
        fake.stop()


def test_modal_callers_with_two_tokens_each_use_their_own(brk: BrokerRun, fake_modal: Any) -> None:
    """The fake logs every RPC under the token id the SDK sent (``x-modal-token-id``, or
    the subject of the JWT ``AuthTokenGet`` gave for it): the SDK's process-wide
    ``Client.from_env()`` singleton would send the second caller's calls with the first's."""
    brk.env.update(ENVLAYER_BACKEND="modal", ENVLAYER_MODAL_IMAGE=IMAGE, ENVLAYER_MODAL_TIMEOUT="60")
    brk.env["ENVLAYER_MODAL_APP_NAME"] = f"envlayer-broker-{brk.profile}"
    callers = {"ak-caller-one": "", "ak-caller-two": ""}
    for token in callers:
        ran = _exec(brk, fake_modal.env(token), "echo ran")
        assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
        callers[token] = ",".join(sorted(fake_modal.rpcs(token)))
    assert len(brk.broker_pids()) == 1
    held = _identities_held(brk)  # two environments of task t, one per token, on one server
    assert len(held) == 2 and held[0][0] == held[1][0] == fake_modal.url and held[0][1] != held[1][1]
    for token, rpcs in callers.items():
        assert "AppGetOrCreate" in rpcs and ",Sandbox" in f",{rpcs}", (token, rpcs)
    assert brk.run("rm", "t", "--force", env=fake_modal.env("ak-caller-one")).returncode == 0


# --- Daytona: two API servers, one key; the callers differ only in DAYTONA_API_URL ---------


@pytest.fixture
def two_daytonas(tmp_path: Path) -> Iterator[list[Any]]:
    _docker_image_usable()
    sys.path.insert(0, str(PLUGINS / "daytona" / "tests"))
    from daytona_testkit import start_fake, stop_fake

    fakes: list[Any] = []
    try:
        for _ in range(2):
            fakes.append(start_fake(tmp_path))
        yield fakes
    finally:
        for fake in fakes:
            stop_fake(fake)


def test_daytona_callers_with_two_api_urls_each_reach_their_own(brk: BrokerRun, two_daytonas: list[Any]) -> None:
    from daytona_testkit import FAKE_KEY

    brk.env.update(ENVLAYER_BACKEND="daytona", ENVLAYER_DAYTONA_SNAPSHOT=IMAGE, DAYTONA_API_KEY=FAKE_KEY)
    brk.env.update(ENVLAYER_DAYTONA_CWD="/workspace", ENVLAYER_DAYTONA_TIMEOUT="60")
    for fake in two_daytonas:
        mark = fake.mark()
        ran = _exec(brk, {"DAYTONA_API_URL": fake.url}, "echo ran")
        assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
        assert "create" in fake.routes_since(mark), fake.routes_since(mark)
    assert len(brk.broker_pids()) == 1
    assert [server for server, _ in _identities_held(brk)] == sorted(fake.url for fake in two_daytonas)
    for fake in two_daytonas:
        assert brk.run("rm", "t", "--force", env={"DAYTONA_API_URL": fake.url}).returncode == 0


# --- Kubernetes: one kubeconfig path whose content switches clusters ----------------------


@pytest.fixture
def two_clusters() -> Iterator[list[Any]]:
    _docker_image_usable()
    control: Any = import_by_path(PLUGINS / "kubernetes" / "tests" / "fake_control.py", "envlayer_k8s_fake_control")
    workdir = tempfile.mkdtemp(prefix="envlayer-k8s-broker-")
    servers: list[Any] = []
    try:
        for _ in range(2):
            servers.append(control.start_fake(workdir))
        yield servers
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _pod_creations(server: Any) -> int:
    return sum(1 for r in server.routes() if r["method"] == "POST" and r["route"].endswith("pods"))


def test_kubernetes_a_kubeconfig_rewritten_in_place_reaches_the_new_cluster(
    brk: BrokerRun, two_clusters: list[Any], tmp_path: Path
) -> None:
    """``kubectl config use-context`` rewrites the file ``KUBECONFIG`` names: the same
    variables, another cluster. The broker must not keep the first one's client."""
    kubeconfig = tmp_path / "kubeconfig"
    brk.env.update(ENVLAYER_BACKEND="kubernetes", ENVLAYER_KUBERNETES_IMAGE=IMAGE, KUBECONFIG=str(kubeconfig))
    brk.env.update(ENVLAYER_KUBERNETES_TIMEOUT="60", ENVLAYER_KUBERNETES_STARTUP_TIMEOUT="60")
    for server in two_clusters:
        kubeconfig.write_text(Path(server.kubeconfig).read_text())
        before = _pod_creations(server)
        ran = _exec(brk, {}, "echo ran")
        assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
        assert _pod_creations(server) == before + 1, server.routes()[-5:]
    assert len(brk.broker_pids()) == 1
    for server in two_clusters:
        kubeconfig.write_text(Path(server.kubeconfig).read_text())
        assert brk.run("rm", "t", "--force").returncode == 0


# --- SSH: one host, two ssh-agents; only the first agent's key may log in -------------------


def _agent(tmp_path: Path, name: str, key: str | None) -> tuple[str, int]:
    """An ssh-agent on ``tmp_path/name.sock`` holding ``key`` (none: an empty agent); its pid."""
    sock = str(tmp_path / f"{name}.sock")
    out = subprocess.run(["ssh-agent", "-a", sock, "-s"], capture_output=True, text=True, check=True).stdout
    pid = int(out.split("SSH_AGENT_PID=")[1].split(";")[0])
    if key is not None:
        subprocess.run(["ssh-add", key], env={**os.environ, "SSH_AUTH_SOCK": sock}, capture_output=True, check=True)
    return sock, pid


@pytest.fixture
def ssh_two_agents(brk: BrokerRun, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The broker's caller on a loopback sshd with ``use_agent`` and no key files; an agent
    holding the authorized key, and one holding a key the server does not know."""
    if not shutil.which("ssh-agent") or not shutil.which("ssh-add"):
        _unavailable("ssh-agent and ssh-add are needed (Debian's openssh-client)")
    sys.path.insert(0, str(PLUGINS / "ssh" / "tests"))
    from ssh_testserver import running_sshd

    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with running_sshd(_unavailable) as server:
        opts = server.options()
        (brk.workdir / "envlayer.toml").write_text(
            'backend = "ssh"\n[backends.ssh]\n'
            f'host = "{opts["host"]}"\nport = {opts["port"]}\nuser = "{opts["user"]}"\n'
            "key_files = []\nuse_agent = true\nlook_for_keys = false\n"
            f'ssh_config = ""\nknown_hosts = "{opts["known_hosts"]}"\n'
        )
        known, known_pid = _agent(tmp_path, "known", str(opts["key_files"][0]))
        other, other_pid = _agent(tmp_path, "other", str(stranger))
        try:
            yield known, other
        finally:
            brk.close()
            for pid in (known_pid, other_pid):
                os.kill(pid, signal.SIGTERM)


def test_ssh_callers_with_two_agents_each_authenticate_as_themselves(
    brk: BrokerRun, ssh_two_agents: tuple[str, str]
) -> None:
    known, other = ssh_two_agents
    first = _exec(brk, {"SSH_AUTH_SOCK": known}, "echo ran")
    assert first.returncode == 0 and first.stdout == "ran\n", first.stderr
    refused = _exec(brk, {"SSH_AUTH_SOCK": other}, "echo ran")
    assert refused.returncode == 125 and refused.stdout == "", refused.stdout
    assert "authentication" in refused.stderr.lower(), refused.stderr
    assert len(brk.broker_pids()) == 1
    again = _exec(brk, {"SSH_AUTH_SOCK": known}, "echo ran")
    assert again.returncode == 0 and again.stdout == "ran\n", again.stderr


# --- Docker: one daemon behind two addresses; the callers differ only in DOCKER_HOST --------


@pytest.fixture
def docker_proxy(brk: BrokerRun, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``(address, process)`` of a byte-for-byte proxy to this machine's Docker socket; the
    test's containers (label ``envlayer.profile``) are removed at the end."""
    _docker_image_usable()
    import docker

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    daemon = api.base_url.removeprefix("http+docker://localhost") or "/var/run/docker.sock"
    daemon = os.environ.get("DOCKER_HOST", f"unix://{daemon}").removeprefix("unix://")
    if not os.path.exists(daemon):
        _unavailable(f"the Docker daemon is not on a unix socket here ({daemon})")
    listen = str(tmp_path / "proxy.sock")
    proxy = subprocess.Popen(
        [sys.executable, str(PLUGINS / "docker" / "tests" / "socket_proxy.py"), listen, daemon],
        stdout=subprocess.PIPE,
    )
    try:
        assert proxy.stdout is not None and proxy.stdout.readline() == b"ready\n"
        brk.env.update(ENVLAYER_BACKEND="docker", ENVLAYER_DOCKER_IMAGE=IMAGE, DOCKER_HOST=f"unix://{daemon}")
        yield f"unix://{listen}", proxy
    finally:
        if proxy.poll() is None:
            proxy.kill()
        proxy.wait()
        brk.close()
        for summary in api.containers(all=True, filters={"label": f"envlayer.profile={brk.profile}"}):
            api.remove_container(summary["Id"], force=True, v=True)
        for volume in (api.volumes(filters={"label": f"envlayer.profile={brk.profile}"}) or {}).get("Volumes") or []:
            api.remove_volume(volume["Name"], force=True)


def test_docker_callers_with_two_daemon_addresses_each_use_their_own(
    brk: BrokerRun, docker_proxy: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """Caller one reaches the daemon through the proxy, caller two directly: once the proxy
    is gone, caller one's calls fail naming its address and caller two's still run."""
    address, proxy = docker_proxy
    for env in ({"DOCKER_HOST": address}, {}):
        ran = _exec(brk, env, "echo ran")
        assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
    proxy.kill()
    proxy.wait()
    lost = _exec(brk, {"DOCKER_HOST": address}, "echo ran")
    assert lost.returncode == 125 and lost.stdout == "", lost.stderr
    assert address.removeprefix("unix://") in lost.stderr, lost.stderr
    direct = _exec(brk, {}, "echo ran")
    assert direct.returncode == 0 and direct.stdout == "ran\n", direct.stderr
    assert len(brk.broker_pids()) == 1
