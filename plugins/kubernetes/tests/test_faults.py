"""Hostile conditions against the fake API server: an API server that vanishes mid-command
or is not there at all, output floods without newlines, concurrent commands on one
environment. Each must give its documented result: never a hang, never a traceback."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.errors import BackendUnavailable

NAMESPACE = "envlayer-test"
PONG_WITHIN = 5.0
"""Seconds a keepalive pong may take in the dropped-connection tests: short enough that a
drop is found long before the command's timeout, long enough for a loaded machine's pong."""


@pytest.fixture
def own_fake(fake_workdir: str, control: Any) -> Iterator[Any]:
    """A private fake API server this test may kill."""
    server = control.start_fake(fake_workdir)
    try:
        yield server
    finally:
        server.stop()


def test_api_server_vanishing_mid_command_raises_not_hangs(own_fake: Any, options: Any, profile: str) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    env = KubernetesEnvironment(options(kubeconfig=own_fake.kubeconfig), task_id="vanish", profile=profile)
    assert env.exec("echo up").stdout == b"up\n"
    killer = threading.Timer(1.0, own_fake.proc.kill)
    killer.start()
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="NOT re-run"):
        env.exec("echo started; sleep 60", timeout=120)
    assert time.monotonic() - start < 30
    with pytest.raises(BackendUnavailable, match="cannot reach the Kubernetes API"):
        env.exec("echo again")


def _kill_pod_container_once_running(pod: str, command_line: str) -> threading.Thread:
    """Kill (SIGKILL, as an OOM kill or a node losing it) the Docker container behind
    ``pod`` as soon as a process whose command line contains ``command_line`` runs in it,
    on a thread (given up after 120 s)."""
    import docker

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())

    def work() -> None:
        try:
            give_up = time.monotonic() + 120
            while time.monotonic() < give_up:
                found = api.containers(filters={"label": f"envlayer-fake-pod={NAMESPACE}.{pod}"})
                processes = api.top(found[0]["Id"])["Processes"] if found else []
                if any(command_line in " ".join(p) for p in processes):
                    api.kill(found[0]["Id"])
                    return
                time.sleep(0.1)
        finally:
            api.close()

    killer = threading.Thread(target=work, name="kill-pod-container", daemon=True)
    killer.start()
    return killer


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_container_killed_mid_command_raises_never_a_result(make_env: Any, mode: str) -> None:
    env = make_env(exec_mode=mode)
    killer = _kill_pod_container_once_running(env.pod_name, "sleep 3601")
    with pytest.raises(BackendUnavailable, match=r"may .*(partly run|finished)"):
        env.exec("echo started; sleep 3601; echo never")
    killer.join(30)


def test_container_killed_mid_read_file_raises_never_content(make_env: Any) -> None:
    """The read's exec is inside ``wc -c`` on a FIFO whose writer never closes it when
    the container dies: the read must raise, never return the ``b""`` it has so far."""
    env = make_env(exec_mode="oneshot")
    env.exec("mkfifo /tmp/fifo && (sh -c 'exec > /tmp/fifo; printf partial; sleep 3602' >/dev/null 2>&1 &)").check()
    killer = _kill_pod_container_once_running(env.pod_name, "wc -c")
    with pytest.raises(BackendUnavailable, match="broke while the command ran"):
        env.read_file("/tmp/fifo")
    killer.join(30)


def test_unreachable_api_server_is_a_clear_error(options: Any, tmp_path: Any, control: Any, profile: str) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    kubeconfig = str(tmp_path / "kubeconfig")
    control.write_kubeconfig(kubeconfig, 9, "envlayer-test")  # port 9 (discard): nothing listens
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(options(kubeconfig=kubeconfig, api_timeout=5), task_id="x", profile=profile)
    assert "cannot reach the Kubernetes API" in str(info.value) and "kubectl cluster-info" in str(info.value)


def test_unknown_context_is_a_clear_error(options: Any, profile: str) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    with pytest.raises(BackendUnavailable, match="cannot load the Kubernetes configuration"):
        KubernetesEnvironment(options(context="no-such-context"), task_id="x", profile=profile)


def test_flood_without_newlines_is_capped_with_exact_totals(make_env: Any) -> None:
    env = make_env(max_output_bytes=100_000)
    result = env.exec("head -c 20000000 /dev/zero | tr '\\0' x; head -c 3000000 /dev/zero >&2", timeout=120)
    assert result.exit_code == 0
    assert result.stdout_truncation is not None and result.stdout_truncation.total == 20_000_000
    assert result.stderr_truncation is not None and result.stderr_truncation.total == 3_000_000
    assert len(result.stdout) < 100_200 and result.stdout.startswith(b"xxx") and result.stdout.endswith(b"xxx")


def test_flood_interrupted_by_timeout_keeps_partial_output(make_env: Any) -> None:
    env = make_env(max_output_bytes=50_000)
    result = env.exec("while :; do printf 'yyyyyyyyyyyyyyyy'; done", timeout=2)
    assert result.timed_out and result.exit_code == 124
    assert result.stdout_truncation is not None and result.stdout.startswith(b"yyyy")
    assert env.exec("echo calm").stdout == b"calm\n"


def test_concurrent_commands_on_one_environment(make_env: Any) -> None:
    env = make_env()
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        results[i] = env.exec(f"echo {i}; sleep 0.5", stdin=f"in-{i}", env={"N": str(i)})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {i: r.stdout for i, r in results.items()} == {i: f"{i}\n".encode() for i in range(8)}


def test_empty_argv_is_refused(make_env: Any) -> None:
    env = make_env(task=f"argv-{uuid.uuid4().hex[:6]}")
    with pytest.raises(ValueError):
        env.exec([])


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_bad_arguments_are_refused_before_anything_runs(make_env: Any, mode: str) -> None:
    from envlayer.errors import InvalidArgument

    env = make_env(exec_mode=mode)
    for kwargs in ({"timeout": float("nan")}, {"timeout": -1}, {"env": {"BAD NAME": "x"}}, {"cwd": "a\0b"}):
        with pytest.raises(InvalidArgument):
            env.exec("touch /tmp/must-not-exist", **kwargs)
    with pytest.raises(InvalidArgument):
        env.exec("echo \0")
    assert env.exec("test -e /tmp/must-not-exist").exit_code == 1


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_large_stdin_and_ctrl_c_mid_flood(make_env: Any, mode: str) -> None:
    import os as _os

    env = make_env(exec_mode=mode, max_output_bytes=10_000)
    payload = _os.urandom(3_000_000)
    result = env.exec("wc -c", stdin=payload, timeout=120)
    assert result.stdout.split() == [b"3000000"]

    def interrupt(stream: str, chunk: bytes) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        env.exec("while :; do echo flood; done", on_output=interrupt, timeout=60)
    assert env.exec("echo after").stdout == b"after\n"


def test_oneshot_stdin_and_env_under_v4(fake_apiserver_v4: Any, options: Any, profile: str) -> None:
    """v4 cannot close stdin: the one-shot wrapper bounds it, so ``cat`` still ends."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    env = KubernetesEnvironment(
        options(exec_mode="oneshot", kubeconfig=fake_apiserver_v4.kubeconfig), task_id="v4-oneshot", profile=profile
    )
    try:
        assert env.exec("cat", stdin=b"bounded\x00data").stdout == b"bounded\x00data"
        assert env.exec(["cat"], stdin="argv form").stdout == b"argv form"
        assert env.exec('printf %s "$V"', env={"V": "two\nlines"}).stdout == b"two\nlines"
        assert env.exec("cat", timeout=10).stdout == b""
        assert env._cluster.protocol == "v4.channel.k8s.io"
    finally:
        env.cleanup(force_remove=True)
        env.wait_for_cleanup(30)


def test_rbac_denial_names_the_namespace_and_the_role(
    fake_apiserver: Any, options: Any, tmp_path: Any, control: Any
) -> None:
    import os
    import subprocess
    import sys

    from envlayer_kubernetes.backend import KubernetesEnvironment

    kubeconfig = str(tmp_path / "kubeconfig")
    control.write_kubeconfig(kubeconfig, fake_apiserver.port, "envlayer-test", token="forbidden")
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(options(kubeconfig=kubeconfig), task_id="rbac", profile="rbac")
    text = str(info.value)
    assert "refused" in text and "'envlayer-test'" in text and "403" in text and "cannot create" in text
    assert "Role in docs/backends/kubernetes.md" in text
    code = "import sys; from envlayer.cli.app import main; sys.exit(main(['doctor', '--backend', 'kubernetes']))"
    env = dict(os.environ, ENVLAYER_KUBERNETES_KUBECONFIG=kubeconfig)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "FAIL kubernetes" in out.stdout and "cannot list" in out.stdout and "fix: grant the Role" in out.stdout


def test_fake_server_stops_and_cleans_up_when_its_test_run_is_killed(tmp_path: Any, control: Any) -> None:
    """A test run killed with SIGKILL cannot stop its fake API server: the server notices
    its parent is gone, removes its containers and exits (nothing is left running)."""
    import os
    import signal
    import subprocess
    import sys

    code = f"""
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("fc", {str(control.__file__)!r})
fc = importlib.util.module_from_spec(spec); sys.modules["fc"] = fc; spec.loader.exec_module(fc)
server = fc.start_fake({str(tmp_path)!r})
from envlayer_kubernetes.backend import KubernetesEnvironment
from envlayer_kubernetes.options import KubernetesOptions
KubernetesEnvironment(KubernetesOptions(image=fc.IMAGE, kubeconfig=server.kubeconfig), task_id="t", profile="killed")
print(server.proc.pid, server.instance, flush=True)
time.sleep(300)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=control.child_environ()
    )
    try:
        line = child.stdout.readline().split()
        assert len(line) == 2, "the child did not start its fake"
        pid, instance = int(line[0]), line[1]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the orphaned fake API server kept running")
    import docker

    api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    left = api.containers(all=True, filters={"label": f"{control.FAKE_LABEL}={instance}"})
    control.remove_containers(instance)
    assert left == []


@pytest.fixture
def faults(fake_apiserver: Any) -> Iterator[Any]:
    """``faults(**fields)`` makes the session's fake fail its next requests (see
    ``fake_apiserver.Faults``); cleared after the test whatever happens."""
    try:
        yield fake_apiserver.set_faults
    finally:
        fake_apiserver.set_faults()


def test_throttled_api_calls_are_retried_after_retry_after(
    fake_apiserver: Any, faults: Any, make_env: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """429 with Retry-After on the create and the status polls: waited for and retried;
    the environment works and each retry is logged."""
    caplog.set_level("WARNING", logger="envlayer.kubernetes")
    before = len(fake_apiserver.routes())
    faults(status=429, count=3, retry_after="1", routes="rest")
    env = make_env(exec_mode="oneshot")
    assert env.exec("echo through").stdout == b"through\n"
    throttled = [r for r in fake_apiserver.routes()[before:] if r["status"] == 429]
    assert len(throttled) == 3
    retries = [r.getMessage() for r in caplog.records if "retrying in 1.0 s" in r.getMessage()]
    assert len(retries) == 3 and "429" in retries[0]


@pytest.mark.parametrize("status", [502, 503, 504])
def test_exec_handshake_answered_by_a_failing_gateway_is_retried(
    fake_apiserver: Any, faults: Any, make_env: Any, status: int
) -> None:
    """The exec route answering 502/503/504 before the upgrade: the command did not start,
    so the handshake is retried and the command runs once."""
    env = make_env(exec_mode="oneshot")
    env.write_file("count", "")
    faults(status=status, count=2, routes="exec")
    assert env.exec("echo x >> count; cat count").stdout == b"x\n"


def test_a_throttle_that_does_not_end_fails_with_the_status_named(
    fake_apiserver: Any, faults: Any, options: Any, profile: str
) -> None:
    """Retries are bounded: a cluster that keeps answering 429 gives a clear error."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    faults(status=429, count=1000, retry_after="0", routes="rest")
    with pytest.raises(BackendUnavailable, match="429") as info:
        KubernetesEnvironment(options(), task_id=f"throttled-{uuid.uuid4().hex[:6]}", profile=profile)
    assert "throttl" in (info.value.hint or "")


def test_a_stalled_exec_handshake_is_bounded_by_api_timeout(fake_apiserver: Any, faults: Any, make_env: Any) -> None:
    """The API server accepts the exec connection and answers nothing: the call fails
    after ``api_timeout`` with the handshake named (before, it waited for the server)."""
    env = make_env(exec_mode="oneshot", api_timeout=2)
    faults(stall=8, count=1, routes="exec")
    with pytest.raises(BackendUnavailable, match=r"no answer to the exec handshake in 2 s"):
        env.exec("echo never")
    assert env.exec("echo after").stdout == b"after\n"


def test_a_oneshot_command_too_long_for_a_url_runs(make_env: Any) -> None:
    """A one-shot string command of 300 KB: in the exec URL it would pass the API server's
    limit and, as one argv word in the pod, the kernel's 128 KiB cap; it goes over stdin
    instead and runs unchanged."""
    env = make_env(exec_mode="oneshot")
    result = env.exec(f"printf %s '{'0123456789' * 30_000}' | wc -c", timeout=120)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == b"300000"


def test_a_oneshot_argv_of_many_words_runs(make_env: Any) -> None:
    """An argv of 40,000 words (240 KB in a URL): over stdin, every word intact."""
    env = make_env(exec_mode="oneshot")
    words = [f"w{i:04d}" for i in range(40_000)]
    result = env.exec(["sh", "-c", 'echo "$#" "$1" "${40000}"', "sh", *words], timeout=120)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == b"40000 w0000 w39999\n"


def test_an_idle_session_connection_dropped_silently_restarts_the_shell(
    fake_apiserver: Any, make_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load balancer forgot the idle session websocket (TCP open, nothing passes): the
    next call's ping goes unanswered, so the shell is restarted before the command is sent
    and the result says so; the command runs once, in the new shell."""
    from envlayer_kubernetes import channel

    from envlayer.execution.shell_session import RESTARTED_AFTER_KILL

    monkeypatch.setattr(channel, "PROBE_IDLE", 0.0)  # probe at every call, not only after 15 s idle
    monkeypatch.setattr(channel, "ANSWER_WITHIN", PONG_WITHIN)
    env = make_env()  # the default api_timeout (30 s) bounds the handshakes, generous under load
    assert env.exec("export KEPT=1; echo first").stdout == b"first\n"
    fake_apiserver.blackhole_open_execs()
    result = env.exec("echo second ${KEPT:-reset}", timeout=20)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"second reset\n", False)
    assert result.recovered == RESTARTED_AFTER_KILL


def test_a_session_connection_dropped_mid_command_is_detected_by_its_pings(
    fake_apiserver: Any, make_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropped silently while a command runs: the keepalive pings go unanswered, so the
    call fails as a broken stream (the command may have partly run; never re-run) instead
    of waiting for its timeout; the next call works in a new shell."""
    from envlayer_kubernetes import channel

    monkeypatch.setattr(channel, "PING_EVERY", 0.5)
    monkeypatch.setattr(channel, "ANSWER_WITHIN", PONG_WITHIN)
    env = make_env()  # the default api_timeout (30 s) bounds the handshakes, generous under load
    assert env.exec("true").ok
    dropped: list[bool] = []

    def drop_once_started(stream: str, chunk: bytes) -> None:
        if b"started" in chunk and not dropped:
            dropped.append(True)
            fake_apiserver.blackhole_open_execs()

    with pytest.raises(BackendUnavailable, match="broke while the command ran"):
        env.exec("echo started; sleep 300; echo late", timeout=120, on_output=drop_once_started)
    assert dropped, "the stream broke before the drop: nothing was proved"
    assert env.exec("echo again").stdout == b"again\n"
