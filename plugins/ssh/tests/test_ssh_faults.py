"""Faults against a real sshd: restarts, drops mid-command, timeouts and interrupts that
must kill the remote tree, channel limits, and shared-connection lifetimes."""

from __future__ import annotations

import gc
import logging
import threading
import uuid

import pytest
from envlayer_ssh import pool
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.errors import ConnectionLost
from envlayer_ssh.options import SSHOptions
from silent_drop import SilentDropProxy
from ssh_testserver import SSHServer

from envlayer.errors import BackendUnavailable
from envlayer.execution.streams import StreamEnded

pytestmark = pytest.mark.ssh
MODES = ["session", "oneshot"]


def _unique_sleep() -> str:
    """A sleep duration nobody else uses, so its processes can be found by command line."""
    return f"{3000 + uuid.uuid4().int % 100000}.{uuid.uuid4().int % 1000:03d}"


def _running(observer: SSHEnvironment, needle: str) -> list[str]:
    """Command lines of live remote processes containing ``needle`` (seen from another env)."""
    result = observer.exec(
        "for d in /proc/[0-9]*; do "
        "s=$(cut -d' ' -f3 $d/stat 2>/dev/null); [ \"$s\" = Z ] && continue; "
        "tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done"
    )
    return [line for line in result.stdout_text.splitlines() if needle in line and "/proc/" not in line]


# --- reconnects ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_sshd_restart_between_calls_reconnects_and_reports(own_sshd: SSHServer, make_env, mode: str, caplog) -> None:
    env = make_env(own_sshd, exec_mode=mode)
    assert env.exec("cd /tmp && echo one").stdout == b"one\n"
    own_sshd.restart()
    caplog.set_level(logging.WARNING, logger="envlayer.ssh")
    result = env.exec("echo two; pwd")
    assert result.exit_code == 0
    assert result.recovered == "reconnected"
    assert result.stdout_text.startswith("two\n")
    if mode == "session":
        assert result.stdout_text == "two\n/tmp\n", "the restarted shell keeps the last directory"
    assert env.reconnects == 1
    assert env.exec("true").recovered == ""
    assert any("re-established" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_write_to_a_closed_channel_says_nothing_was_sent(sshd: SSHServer, make_env) -> None:
    """What lets a session tell "gone before the command went out" (run it in a new shell)
    from "dropped while sending" (may or may not have run): paramiko refuses a send on a
    closed channel before handing any byte to the transport."""
    env = make_env(sshd)
    assert env.exec("true").exit_code == 0
    stream = env._session.stream
    stream.channel.close()
    with pytest.raises(StreamEnded):
        stream.write(b"echo never\n")


def test_file_operations_reconnect_after_sshd_restart(own_sshd: SSHServer, make_env) -> None:
    env = make_env(own_sshd, exec_mode="oneshot", cwd="/tmp")
    name = f"envlayer-reconnect-{uuid.uuid4().hex}.txt"  # the host's /tmp is shared with other runs
    env.write_file(name, b"before")
    own_sshd.restart()
    assert env.read_file(name) == b"before"
    env.write_file(name, b"after")
    assert env.exec(f"cat {name}; rm {name}").stdout == b"after"
    assert env.reconnects == 1


@pytest.mark.parametrize("operation", ["read", "write", "download"])
def test_a_file_operation_on_a_connection_that_died_silently_runs_again_on_a_new_one(
    sshd: SSHServer, make_env, operation: str, tmp_path
) -> None:
    """The connection is gone but the client learns it only when it sends the request
    (a forgotten NAT entry, a host that went away): the operation is safe to repeat, so
    it is run again once on a new connection instead of failing."""
    known_hosts = tmp_path / "known_hosts"
    with SilentDropProxy(sshd.port) as proxy:
        known_hosts.write_text(sshd.host_key_line().replace(f":{sshd.port} ", f":{proxy.port} ", 1))
        env = make_env(sshd, port=proxy.port, known_hosts=str(known_hosts), exec_mode="oneshot", cwd="/tmp")
        name = f"envlayer-silent-{uuid.uuid4().hex}"  # the host's /tmp is shared with other runs
        env.write_file(f"{name}/f.txt", b"before")
        proxy.wait_quiet(0.5)
        proxy.drop_silently()
        try:
            if operation == "read":
                assert env.read_file(f"{name}/f.txt") == b"before"
            elif operation == "write":
                env.write_file(f"{name}/f.txt", b"after")
                assert env.read_file(f"{name}/f.txt") == b"after"
            else:
                assert env.download_dir(name, str(tmp_path / "copy")).files == 1
                assert (tmp_path / "copy" / "f.txt").read_bytes() == b"before"
            assert env.reconnects == 1
        finally:
            env.exec(f"rm -rf {name}")
            env.cleanup()  # while the proxy still forwards


@pytest.mark.parametrize("mode", MODES)
def test_drop_mid_command_raises_may_have_run_and_is_not_rerun(
    own_sshd: SSHServer, make_env, mode: str, tmp_path
) -> None:
    env = make_env(own_sshd, exec_mode=mode)
    count = f"/tmp/envlayer-drop-count-{uuid.uuid4().hex}"  # the host's /tmp is shared with other runs
    env.exec(f"rm -f {count}; export EXPORTED_BEFORE=1").check()
    timer = threading.Timer(0.7, own_sshd.restart)
    timer.start()
    try:
        with pytest.raises(ConnectionLost) as info:
            env.exec(f"echo x >> {count}; sleep 20", timeout=30)
    finally:
        timer.join()
    assert isinstance(info.value, BackendUnavailable)
    assert "may or may not have run" in info.value.message
    after = env.exec(f"cat {count}; rm -f {count}")
    assert after.stdout == b"x\n", "the command must not be re-run by the reconnect"
    assert env.reconnects == 1
    # docs/backends/ssh.md: a drop during a command loses the session's exports.
    assert env.exec('printf %s "${EXPORTED_BEFORE:-unset}"').stdout == b"unset"


def test_unreachable_host_is_backend_unavailable(make_env, sshd: SSHServer) -> None:
    from ssh_testserver import free_port

    with pytest.raises(BackendUnavailable) as info:
        make_env(sshd, port=free_port())
    assert "cannot reach" in info.value.message
    with pytest.raises(BackendUnavailable):
        SSHEnvironment.check_available(SSHOptions(**sshd.options(port=free_port())))


def test_authentication_refused_is_backend_unavailable(sshd: SSHServer, make_env) -> None:
    with pytest.raises(BackendUnavailable) as info:
        make_env(sshd, key_files=[], password="wrong-password")
    assert "authentication" in info.value.message
    assert "wrong-password" not in str(info.value)


# --- timeouts and interrupts kill the remote tree ------------------------------------------


@pytest.mark.parametrize(("mode", "shell"), [("session", "/bin/sh"), ("oneshot", "/bin/sh"), ("oneshot", "/bin/bash")])
def test_timeout_leaves_no_remote_process(sshd: SSHServer, make_env, mode: str, shell: str) -> None:
    env = make_env(sshd, exec_mode=mode, shell=shell)
    observer = make_env(sshd, exec_mode="oneshot")
    n = _unique_sleep()
    script = f"sleep {n} & (sleep {n}; echo never) & sh -c 'sleep {n}' & setsid sleep {n} & sleep {n}"
    result = env.exec(script, timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert _running(observer, f"sleep {n}") == []
    assert env.exec("echo next").stdout == b"next\n"


def test_session_builtin_loop_timeout_kills_the_shell(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    env.exec("cd /tmp && export KEEP_ME=1").check()
    pid = env.exec('printf %s "$$"').stdout_text
    result = env.exec("while :; do :; done", timeout=1)
    assert result.timed_out
    observer = make_env(sshd, exec_mode="oneshot")
    # A killed process stays a zombie until sshd reaps it; `kill -0` succeeds on a zombie,
    # so look at its state: the shell must be gone or a zombie (it runs nothing).
    state = observer.exec(f"cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null || echo gone").stdout_text.strip()
    assert state in ("gone", "Z"), f"the spinning shell must be gone, its state is {state!r}"
    after = env.exec('pwd; printf %s "$$"')
    assert after.stdout_text.splitlines()[0] == "/tmp"
    assert after.stdout_text.splitlines()[1] != pid


def test_session_timeout_spares_earlier_background_jobs(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    observer = make_env(sshd, exec_mode="oneshot")
    n = _unique_sleep()
    env.exec(f"sleep {n} > /dev/null 2>&1 &").check()
    assert env.exec("sleep 30", timeout=1).timed_out
    assert len(_running(observer, f"sleep {n}")) == 1
    observer.exec(f"pkill -f 'sleep {n}'")


@pytest.mark.parametrize("mode", MODES)
def test_interrupt_kills_remote_tree_and_propagates(sshd: SSHServer, make_env, mode: str) -> None:
    env = make_env(sshd, exec_mode=mode)
    observer = make_env(sshd, exec_mode="oneshot")
    n = _unique_sleep()

    def interrupt(stream: str, chunk: bytes) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        env.exec(f"echo started; sleep {n} & sleep {n}", on_output=interrupt)
    assert _running(observer, f"sleep {n}") == []
    assert env.exec("echo after").stdout == b"after\n"


# --- channel limits ------------------------------------------------------------------


def _run_concurrently(func, count: int) -> list[object]:
    results: list[object] = [None] * count

    def run(i: int) -> None:
        try:
            results[i] = func(i)
        except BaseException as exc:  # collected and asserted by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def test_twenty_concurrent_oneshot_commands_with_max_sessions_10(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, exec_mode="oneshot")
    results = _run_concurrently(lambda i: env.exec(f"sleep 0.3; echo {i}"), 20)
    for i, result in enumerate(results):
        assert not isinstance(result, BaseException), result
        assert result.stdout == f"{i}\n".encode() and result.exit_code == 0
    assert len(env._pool.connections) == 1, "short commands queue on one connection"


def test_fast_concurrent_oneshot_commands_never_drop_the_connection(sshd: SSHServer, make_env) -> None:
    """A command that ends at once races its own stdin EOF against the server's CLOSE; an
    EOF sent after the CLOSE makes sshd drop the connection with every command on it."""
    env = make_env(sshd, exec_mode="oneshot")
    log_before = len(sshd.read_log())
    for _ in range(10):
        results = _run_concurrently(lambda i: env.exec(f"echo {i}"), 20)
        for i, result in enumerate(results):
            assert not isinstance(result, BaseException), result
            assert result.stdout == f"{i}\n".encode() and result.exit_code == 0
    assert "nonexistent channel" not in sshd.read_log()[log_before:]
    assert env.reconnects == 0


def test_twenty_concurrent_sessions_spill_to_a_second_connection(sshd: SSHServer, make_env) -> None:
    envs = [make_env(sshd) for _ in range(20)]
    results = _run_concurrently(lambda i: envs[i].exec(f"sleep 0.3; echo {i}"), 20)
    for i, result in enumerate(results):
        assert not isinstance(result, BaseException), result
        assert result.stdout == f"{i}\n".encode()
    assert len(envs[0]._pool.connections) == 2


def test_server_limit_below_max_sessions_is_learned(make_env) -> None:
    server = SSHServer(max_sessions=3)
    try:
        server.start()
        env = make_env(server, exec_mode="oneshot", max_sessions=10)
        results = _run_concurrently(lambda i: env.exec(f"sleep 0.3; echo {i}"), 8)
        for i, result in enumerate(results):
            assert not isinstance(result, BaseException), result
            assert result.stdout == f"{i}\n".encode()
        assert env._pool.connections[0].capacity <= 3
        env.cleanup()
    finally:
        server.close()


# --- shared connection lifetime ------------------------------------------------------


def test_cleanup_of_one_environment_keeps_the_shared_connection(sshd: SSHServer, make_env) -> None:
    first = make_env(sshd)
    second = make_env(sshd, exec_mode="oneshot")
    assert first._pool is second._pool
    transport = second._pool.connections[0].transport()
    first.cleanup()
    assert second.exec("echo still").stdout == b"still\n"
    assert second._pool.connections[0].transport() is transport
    assert second.reconnects == 0
    assert pool.open_pools()[second.target] == 1
    second.cleanup()
    assert second.target not in pool.open_pools()
    assert not transport.is_active()


def test_garbage_collected_environment_releases_only_its_share(sshd: SSHServer, make_env) -> None:
    keeper = make_env(sshd)
    throwaway = SSHEnvironment(SSHOptions(**sshd.options()))
    assert pool.open_pools()[keeper.target] == 2
    del throwaway
    gc.collect()
    assert pool.open_pools()[keeper.target] == 1
    assert keeper.exec("echo alive").stdout == b"alive\n"


def test_channels_all_held_by_shells_is_a_clear_error(sshd: SSHServer, make_env) -> None:
    first = make_env(sshd, max_sessions=2, max_connections=1)
    make_env(sshd, max_sessions=2, max_connections=1)
    with pytest.raises(BackendUnavailable) as info:
        make_env(sshd, max_sessions=2, max_connections=1)
    assert "held by session shells" in info.value.message and "max_connections" in info.value.hint
    first.cleanup()
    assert make_env(sshd, max_sessions=2, max_connections=1).exec("echo freed").stdout == b"freed\n"
