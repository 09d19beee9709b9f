"""The session broker on the local backend, through real ``envlayer`` processes."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from broker_helpers import BrokerRun, alive, descendants, processes_with, wait_until

from envlayer.testing.secrets import ENVLAYER_SCRIPT


def _status(brk: BrokerRun) -> list[dict]:
    out = brk.run("broker", "status", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_session_state_persists_across_calls_in_one_broker(brk: BrokerRun, tmp_path: Path) -> None:
    target = tmp_path / "src"
    target.mkdir()
    first = brk.run("exec", "--task", "t", "--", f"cd {target} && export GREETING=hello")
    assert first.returncode == 0, first.stderr
    assert brk.run("exec", "--task", "t", "--", "pwd").stdout == f"{target}\n"
    assert brk.run("exec", "--task", "t", "--", "echo $GREETING").stdout == "hello\n"
    # another task has its own session, started in the caller's directory
    assert brk.run("exec", "--task", "other", "--", "pwd; echo ${GREETING:-unset}").stdout == f"{brk.workdir}\nunset\n"
    [broker] = _status(brk)
    assert sorted(e["task"] for e in broker["environments"]) == ["other", "t"]
    assert {e["backend"] for e in broker["environments"]} == {"local"}
    assert {e["profile"] for e in broker["environments"]} == {brk.profile}
    assert len(brk.broker_pids()) == 1


def test_fresh_runs_outside_the_session(brk: BrokerRun) -> None:
    brk.run("exec", "--task", "t", "--", "cd / && export GREETING=hello")
    fresh = brk.run("exec", "--task", "t", "--fresh", "--", "pwd; echo ${GREETING:-unset}")
    assert fresh.stdout == f"{brk.workdir}\nunset\n", fresh.stderr
    assert brk.run("exec", "--task", "t", "--", "pwd; echo $GREETING").stdout == "/\nhello\n"


def test_exit_codes_missing_commands_and_timeout(brk: BrokerRun) -> None:
    assert brk.run("exec", "--task", "t", "--", "exit 7").returncode == 7
    missing = brk.run("exec", "--task", "t", "--", "no-such-program-xyz", "arg")
    assert missing.returncode == 127 and "no-such-program-xyz" in missing.stderr
    timed = brk.run("exec", "--task", "t", "--timeout", "1", "--", "sleep 30")
    assert timed.returncode == 124
    assert "envlayer: command timed out after 1.0s and was killed" in timed.stderr
    assert brk.run("exec", "--task", "t", "--", "echo next").stdout == "next\n"
    bad = brk.run("exec", "--task", "t", "--timeout", "nan", "--", "true")
    assert bad.returncode == 125 and "timeout" in bad.stderr


def test_stdin_is_forwarded_with_i_only(brk: BrokerRun) -> None:
    data = b"line one\n\x00binary\xff tail without newline"
    out = subprocess.run(
        [ENVLAYER_SCRIPT, "exec", "-i", "--task", "t", "--", "cat"],
        input=data,
        capture_output=True,
        cwd=brk.workdir,
        env=brk.environ(),
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == data
    assert brk.run("exec", "--task", "t", "--", "cat", stdin="not forwarded").stdout == ""


def test_env_flags_env_files_and_cwd_as_in_process(brk: BrokerRun) -> None:
    (brk.workdir / "vars.env").write_text("FROM_FILE=file\n# comment\n")
    (brk.workdir / "sub").mkdir()
    args = ["exec", "--task", "t", "-e", "A=1", "-e", "SECRET_NAME", "--env-file", "vars.env", "--cwd", "sub"]
    cmd = ["--", "echo $A $SECRET_NAME $FROM_FILE; pwd"]
    through = brk.run(*args, *cmd, env={"SECRET_NAME": "s3"})
    direct = brk.run(*args, "--no-broker", *cmd, env={"SECRET_NAME": "s3"})
    assert through.stdout == direct.stdout == f"1 s3 file\n{brk.workdir}/sub\n", through.stderr
    unset = brk.run("exec", "--task", "t", "-e", "NOT_SET_ANYWHERE", "--", "true")
    assert unset.returncode == 125 and "NOT_SET_ANYWHERE is not set" in unset.stderr


def test_json_has_the_in_process_shape(brk: BrokerRun) -> None:
    through = json.loads(brk.run("exec", "--json", "--task", "t", "--", "echo out; echo err >&2; exit 3").stdout)
    direct = json.loads(brk.run("exec", "--json", "--no-broker", "--", "echo out; echo err >&2; exit 3").stdout)
    assert through.keys() == direct.keys()
    for key in ("exit_code", "stdout", "stderr", "timed_out", "notes", "error"):
        assert through[key] == direct[key], key
    assert through["exit_code"] == 3 and through["stdout"] == "out\n" and through["error"] is None
    failed = brk.run("exec", "--json", "--backend", "no-such-backend", "--", "true")
    assert failed.returncode == 125
    assert json.loads(failed.stdout)["error"]["type"] == "BackendNotFound"


def test_usage_errors_and_help_are_the_in_process_ones(brk: BrokerRun) -> None:
    usage = brk.run("exec", "--timeout")
    assert usage.returncode == 2 and "usage: envlayer exec" in usage.stderr
    helped = brk.run("exec", "--help")
    assert helped.returncode == 0 and "--no-broker" in helped.stdout
    assert brk.run("exec", "--task", "t", "--", "true").returncode == 0
    assert "usage" not in brk.log()


def test_output_streams_before_the_command_ends(brk: BrokerRun) -> None:
    flag = brk.workdir / "go"
    script = f"echo first; while [ ! -e {flag} ]; do sleep 0.05; done; echo second"
    proc = brk.popen("exec", "--task", "t", "--", script)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"first\n"  # the command is still waiting for the flag
        assert proc.poll() is None
        flag.touch()
        assert proc.stdout.read() == b"second\n"
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait()


def test_concurrent_calls_on_one_task_overflow_to_one_shot(brk: BrokerRun) -> None:
    brk.run("exec", "--task", "t", "--", "cd /tmp")
    flag = brk.workdir / "go"
    busy = brk.popen("exec", "--task", "t", "--", f"echo busy; while [ ! -e {flag} ]; do sleep 0.05; done; pwd")
    try:
        assert busy.stdout is not None and busy.stdout.readline() == b"busy\n"
        others = [brk.popen("exec", "--task", "t", "--", f"echo {i}; pwd") for i in range(3)]
        outputs = [p.communicate(timeout=60) for p in others]
        assert [p.returncode for p in others] == [0, 0, 0]
        assert [o[0] for o in outputs] == [f"{i}\n/tmp\n".encode() for i in range(3)]
        assert busy.poll() is None  # they ran while the session was busy
        flag.touch()
        assert busy.communicate(timeout=60)[0] == b"/tmp\n" and busy.returncode == 0
    finally:
        busy.kill()
        busy.wait()
    assert len(brk.broker_pids()) == 1


def test_concurrent_first_calls_start_one_broker(brk: BrokerRun) -> None:
    procs = [brk.popen("exec", "--task", f"t{i}", "--", "echo ok") for i in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [r[1] for r in results]
    assert all(r[0] == b"ok\n" for r in results)
    assert len(brk.sockets()) == 1 and len(brk.broker_pids()) == 1
    assert len(_status(brk)[0]["environments"]) == 4


def test_ctrl_c_kills_the_command_tree_not_the_broker(brk: BrokerRun) -> None:
    marker = f"elbflood{uuid.uuid4().hex[:8]}"
    brk.run("exec", "--task", "t", "--", "true")
    [broker] = brk.broker_pids()
    proc = brk.popen("exec", "--task", "t", "--", f"(yes {marker} &) ; yes {marker}")
    try:
        assert proc.stdout is not None and proc.stdout.read(4096)  # the flood is flowing
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert b"envlayer: interrupted; the command was killed" in err
    wait_until(lambda: not processes_with(marker), f"the {marker} processes' end")
    assert alive(broker) and brk.broker_pids() == [broker]
    assert brk.run("exec", "--task", "t", "--", "echo still serving").stdout == "still serving\n"


def test_reader_going_away_exits_141_and_kills_the_command(brk: BrokerRun) -> None:
    marker = f"elbpipe{uuid.uuid4().hex[:8]}"
    proc = brk.popen("exec", "--task", "t", "--", "yes", marker)
    assert proc.stdout is not None and proc.stdout.readline() == f"{marker}\n".encode()
    proc.stdout.close()
    assert proc.wait(60) == 141
    assert proc.stderr is not None and proc.stderr.read() == b""
    wait_until(lambda: not processes_with(marker), f"the {marker} process's end")


def test_broker_killed_mid_command_is_reported_and_replaced(brk: BrokerRun) -> None:
    flag = brk.workdir / "go"
    brk.run("exec", "--task", "t", "--", "cd /tmp")
    [old] = brk.broker_pids()
    proc = brk.popen("exec", "--task", "t", "--", f"echo running; while [ ! -e {flag} ]; do sleep 0.05; done")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"running\n"
        started = descendants(old)
        assert started
        os.kill(old, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 125
    assert f"the broker (pid {old}) went away while the command ran".encode() in err
    assert b"was not run again" in err
    flag.touch()  # the orphaned command may now end, and its shell with it
    wait_until(lambda: not any(alive(p) for p in started), "the dead broker's processes' end")
    after = brk.run("exec", "--task", "t", "--", "pwd")
    assert after.returncode == 0 and after.stdout == f"{brk.workdir}\n"  # a new session
    [new] = brk.broker_pids()
    assert new != old


def test_idle_broker_exits_and_the_next_call_starts_one(brk: BrokerRun) -> None:
    idle = {"ENVLAYER_BROKER_IDLE_TIMEOUT": "1"}
    assert brk.run("exec", "--task", "t", "--", "true", env=idle).returncode == 0
    [pid] = brk.broker_pids()
    wait_until(lambda: pid not in brk.broker_pids(), "the idle broker's exit")
    assert os.listdir(brk.runtime) == []  # a broker that exits cleanly leaves no file, log included
    assert brk.run("exec", "--task", "t", "--", "echo again", env=idle).stdout == "again\n"


def test_the_idle_timeout_is_read_where_the_broker_was_started(brk: BrokerRun) -> None:
    (brk.workdir / "envlayer.toml").write_text("broker_idle_timeout = 1\n")
    assert brk.run("exec", "--", "true").returncode == 0
    [pid] = brk.broker_pids()
    wait_until(lambda: pid not in brk.broker_pids(), "the idle broker's exit", timeout=30)


def test_broker_status_and_stop(brk: BrokerRun) -> None:
    assert brk.run("broker", "status").stdout == "no broker running\n"
    brk.run("exec", "--task", "t1", "--", "true")
    [broker] = _status(brk)
    assert broker["pid"] in brk.broker_pids() and broker["socket"] in brk.sockets()
    assert broker["uptime"] >= 0
    [env] = broker["environments"]
    assert env["backend"] == "local" and env["task"] == "t1" and env["in_flight"] == 0
    text = brk.run("broker", "status").stdout
    assert f"broker pid {broker['pid']}" in text and "t1" in text
    stopped = brk.run("broker", "stop")
    assert stopped.returncode == 0 and f"broker pid {broker['pid']} stopped" in stopped.stdout
    assert brk.broker_pids() == [] and brk.sockets() == []


def test_turning_the_broker_off(brk: BrokerRun) -> None:
    assert brk.run("exec", "--no-broker", "--", "echo a").stdout == "a\n"
    assert brk.run("exec", "--", "echo b", env={"ENVLAYER_BROKER": "0"}).stdout == "b\n"
    (brk.workdir / "envlayer.toml").write_text("broker = false\n")
    assert brk.run("exec", "--", "echo c").stdout == "c\n"
    assert brk.sockets() == [] and brk.broker_pids() == []


def test_config_turning_it_off_is_honoured_by_a_running_broker(brk: BrokerRun) -> None:
    brk.run("exec", "--task", "t", "--", "cd /")
    (brk.workdir / "envlayer.toml").write_text("broker = false\n")
    assert brk.run("exec", "--task", "t", "--", "pwd").stdout == f"{brk.workdir}\n"  # in-process: no session


def test_one_broker_serves_every_directory_and_environment(brk: BrokerRun, tmp_path: Path) -> None:
    elsewhere, target = tmp_path / "elsewhere", tmp_path / "target"
    elsewhere.mkdir()
    target.mkdir()
    assert brk.run("exec", "--task", "t1", "--", f"cd {target} && export KEPT=yes").returncode == 0
    from_elsewhere = brk.run("exec", "--task", "t1", "--", "pwd; echo $KEPT", cwd=elsewhere, env={"ELB_UNRELATED": "1"})
    assert from_elsewhere.stdout == f"{target}\nyes\n", from_elsewhere.stderr
    assert brk.run("exec", "--task", "t1", "--", "pwd", env={"ELB_UNRELATED": "2"}).stdout == f"{target}\n"
    # a new task starts in the directory, and with the variables, of the call that made it
    fresh = brk.run("exec", "--task", "t2", "--", "pwd; echo $ELB_UNRELATED", cwd=elsewhere, env={"ELB_UNRELATED": "3"})
    assert fresh.stdout == f"{elsewhere}\n3\n", fresh.stderr
    assert len(brk.broker_pids()) == 1
    [broker] = _status(brk)
    assert sorted(e["task"] for e in broker["environments"]) == ["t1", "t2"]


def test_each_call_reads_its_own_configuration_and_variables(brk: BrokerRun, tmp_path: Path) -> None:
    toy_project = tmp_path / "toy-project"
    toy_project.mkdir()
    (toy_project / "envlayer.toml").write_text('backend = "toy"\n')
    assert "envlayer-toy-" in brk.run("exec", "--", "pwd", cwd=toy_project).stdout  # its ./envlayer.toml
    assert brk.run("exec", "--", "pwd").stdout == f"{brk.workdir}\n"
    assert "envlayer-toy-" in brk.run("exec", "--", "pwd", env={"ENVLAYER_BACKEND": "toy"}).stdout
    for value in ("first", "second"):  # -e NAME: this call's value
        assert (
            brk.run("exec", "-e", "ELB_VALUE", "--", "echo $ELB_VALUE", env={"ELB_VALUE": value}).stdout == f"{value}\n"
        )
    assert len(brk.broker_pids()) == 1


def test_a_backend_declaring_no_variables_gets_an_environment_per_environment(brk: BrokerRun) -> None:
    """The toy plugin declares no ``environment_variables``: every variable selects."""
    toy = ("exec", "--backend", "toy", "--task", "t", "--", "pwd")
    first = brk.run(*toy, env={"ELB_SELECTS": "1"})
    assert first.returncode == 0, first.stderr
    assert brk.run(*toy, env={"ELB_SELECTS": "1"}).stdout == first.stdout  # the same environment
    assert brk.run(*toy, env={"ELB_SELECTS": "2"}).stdout != first.stdout  # another one
    [broker] = _status(brk)
    assert [e["task"] for e in broker["environments"]] == ["t", "t"]
    removed = brk.run("exec", "--backend", "toy", "--task", "t", "--rm", "--", "true", env={"ELB_SELECTS": "1"})
    assert removed.returncode == 0, removed.stderr
    assert _status(brk)[0]["environments"] == []  # exec --rm releases the task under every set of variables


def test_rm_releases_the_task_the_broker_holds(brk: BrokerRun) -> None:
    assert brk.run("exec", "--task", "t1", "--", "cd /").returncode == 0
    removed = brk.run("rm", "t1", "--force")
    assert removed.returncode == 0, removed.stderr
    assert "nothing removed" not in removed.stdout and "session released" in removed.stdout
    assert _status(brk)[0]["environments"] == []
    assert brk.run("exec", "--task", "t1", "--", "pwd").stdout == f"{brk.workdir}\n"


def test_in_process_exec_rm_releases_the_task_the_broker_holds(brk: BrokerRun) -> None:
    assert brk.run("exec", "--task", "t1", "--", "cd /").returncode == 0
    assert brk.run("exec", "--task", "t1", "--rm", "--no-broker", "--", "true").returncode == 0
    assert _status(brk)[0]["environments"] == []


@pytest.mark.parametrize("problem", ["unwritable", "world-writable", "symlink"])
def test_unusable_runtime_dir_falls_back_in_process(brk: BrokerRun, tmp_path: Path, problem: str) -> None:
    if problem == "unwritable":
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        runtime = str(blocker / "rt")
        why = "cannot create the runtime directory"
    elif problem == "world-writable":
        runtime = str(tmp_path / "open")
        os.mkdir(runtime)
        os.chmod(runtime, 0o777)
        why = "has mode 0777: open to group or others"
    else:
        runtime = str(tmp_path / "link")
        os.symlink(brk.runtime, runtime)
        why = "is a symlink"
    out = brk.run("exec", "--", "echo works", env={"ENVLAYER_RUNTIME_DIR": runtime})
    assert out.returncode == 0 and out.stdout == "works\n"
    assert out.stderr.startswith("envlayer: note: ") and why in out.stderr and "running in-process" in out.stderr
    assert out.stderr.count("\n") == 1
    assert brk.broker_pids() == []


def test_runtime_dir_owned_by_another_user_falls_back(brk: BrokerRun, tmp_path: Path, other_user: str) -> None:
    runtime = tmp_path / "theirs"
    runtime.mkdir(mode=0o700)
    shutil_chown(runtime, other_user)
    out = brk.run("exec", "--", "echo works", env={"ENVLAYER_RUNTIME_DIR": str(runtime)})
    assert out.returncode == 0 and out.stdout == "works\n"
    assert "belongs to uid" in out.stderr and "running in-process" in out.stderr


def shutil_chown(path: Path, user: str) -> None:
    import shutil

    shutil.chown(path, user=user)


PEER_PROBE = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(sys.argv[1])
except OSError as exc:
    print("connect failed:", exc.strerror)
    sys.exit(0)
req = b"\\0".join([b"1", b"exec", b"/", b"3", b"exec", b"--", b"id", b"A=1"])
sock.sendall(b"Q" + len(req).to_bytes(4, "big") + req)
data = b""
while True:
    chunk = sock.recv(65536)
    if not chunk:
        break
    data += chunk
print(repr(data))
"""


def test_another_user_is_refused(brk: BrokerRun, other_user: str) -> None:
    brk.run("exec", "--task", "t", "--", "true")
    [sock] = brk.sockets()
    mode = stat.S_IMODE(os.stat(sock).st_mode)
    assert mode == 0o600 and stat.S_IMODE(os.stat(brk.runtime).st_mode) == 0o700
    probe = ["runuser", "-u", other_user, "--", "/usr/bin/python3", "-c", PEER_PROBE, sock]
    blocked = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    assert "connect failed: Permission denied" in blocked.stdout, blocked.stderr
    # even with the permissions opened up by mistake, the peer's uid is checked
    os.chmod(brk.runtime, 0o711)
    os.chmod(sock, 0o666)
    refused = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    assert "belongs to another user" in refused.stdout and "b'P" in refused.stdout, refused.stderr
    assert "uid=" not in refused.stdout
    assert "refused a connection from uid" in brk.log()
    os.chmod(brk.runtime, 0o700)
    assert brk.run("exec", "--task", "t", "--", "echo mine").stdout == "mine\n"
    brk.run("broker", "stop")  # a broker that logged a warning keeps its log, and only that
    assert [name.rsplit(".", 1)[1] for name in os.listdir(brk.runtime)] == ["log"]
    assert "refused a connection from uid" in brk.log()


def test_the_client_path_imports_no_sdk_and_no_cli(brk: BrokerRun) -> None:
    probe = (
        "import sys; from envlayer.cli.broker.client import exec_via_broker; "
        "code = exec_via_broker(['exec', '--task', 't', '--', 'true']); "
        "heavy = [m for m in sys.modules if m.startswith(('envlayer.cli.app', 'envlayer.cli.exec', "
        "'envlayer.config', 'stevedore', 'docker', 'paramiko', 'json', 'typing', 'socket', 'subprocess'))]; "
        "print(code, heavy)"
    )
    brk.run("exec", "--task", "t", "--", "true")  # a broker is running
    out = subprocess.run(
        [os.path.join(os.path.dirname(ENVLAYER_SCRIPT), "python"), "-c", probe],
        capture_output=True,
        text=True,
        cwd=brk.workdir,
        env=brk.environ(),
        timeout=60,
    )
    assert out.stdout == "0 []\n", out.stderr


def test_rm_through_the_broker_says_what_in_process_says(brk: BrokerRun) -> None:
    brk.run("exec", "--task", "t", "--", "cd /")
    through = brk.run("exec", "--task", "t", "--rm", "--", "pwd")
    direct = brk.run("exec", "--task", "t", "--rm", "--no-broker", "--", "true")
    assert through.returncode == 0 and through.stdout == "/\n"
    assert through.stderr == direct.stderr == ""  # local keeps nothing: no force_remove note
    assert _status(brk)[0]["environments"] == []  # released: the next call gets a new session
    assert brk.run("exec", "--task", "t", "--", "pwd").stdout == f"{brk.workdir}\n"


def test_a_killed_client_cancels_its_command(brk: BrokerRun) -> None:
    marker = f"elbclient{uuid.uuid4().hex[:8]}"
    proc = brk.popen("exec", "--task", "t", "--", "sh", "-c", "echo started; sleep 3600; true", marker)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        assert processes_with(marker)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    wait_until(lambda: not processes_with(marker), "the command's end after its client died")
    assert brk.run("exec", "--task", "t", "--", "echo next").stdout == "next\n"


def test_broker_serve_in_the_foreground(brk: BrokerRun) -> None:
    server = brk.popen("broker", "serve")
    try:
        wait_until(brk.sockets, "the foreground broker's socket")
        [pid] = wait_until(brk.broker_pids, "the foreground broker's pid file")
        assert pid == server.pid
        assert brk.run("exec", "--task", "t", "--", "echo served").stdout == "served\n"
        assert brk.broker_pids() == [server.pid]  # no other broker was started
        server.send_signal(signal.SIGINT)
        assert server.wait(60) == 0
    finally:
        server.kill()
        server.wait()
    assert brk.sockets() == []
    assert server.stderr is not None and b"listening on" in server.stderr.read()


def test_bytes_that_are_not_utf8_pass_through(brk: BrokerRun) -> None:
    raw = b"caf\xe9\xff"
    out = subprocess.run(
        [ENVLAYER_SCRIPT.encode(), b"exec", b"--task", b"t", b"--", b"printf", b"%s|%s", raw, b"$RAW"],
        capture_output=True,
        cwd=brk.workdir,
        env={**{k.encode(): v.encode() for k, v in brk.environ().items()}, b"RAW": raw},
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == raw + b"|$RAW", out.stderr
    out = subprocess.run(
        [ENVLAYER_SCRIPT.encode(), b"exec", b"--task", b"t", b"--", b'printf %s "$RAW"'],
        capture_output=True,
        cwd=brk.workdir,
        env={**{k.encode(): v.encode() for k, v in brk.environ().items()}, b"RAW": raw},
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == raw, out.stderr
    assert len(brk.broker_pids()) == 1


def test_the_client_exit_codes_are_the_cli_ones() -> None:
    from envlayer import result
    from envlayer.cli import exec_plan as cli_exec
    from envlayer.cli.broker import client

    assert client.ENVLAYER_FAILURE == cli_exec.ENVLAYER_FAILURE
    assert client.BROKEN_PIPE_EXIT_CODE == cli_exec.BROKEN_PIPE_EXIT_CODE
    assert client.INTERRUPT_EXIT_CODE == result.INTERRUPT_EXIT_CODE


PARTIAL_STDIN = """
import os, sys
from envlayer.cli.broker import connection, protocol, runtime_dir
directory = os.environ["ENVLAYER_RUNTIME_DIR"]
path = runtime_dir.broker_path(directory, runtime_dir.INSTALLATION_DIGEST, "sock")
sock = connection.connect(path)
argv = ["exec", "-i", "--task", "t", "--", "cat > " + sys.argv[1]]
protocol.send(sock, protocol.REQUEST, protocol.encode_request("exec", os.getcwd(), argv, os.environ))
kind, _ = protocol.receive(sock)
protocol.send(sock, protocol.STDIN, b"only the first part")
sock.close()
print(kind.decode())
"""


def test_a_client_lost_while_sending_stdin_runs_nothing(brk: BrokerRun) -> None:
    brk.run("exec", "--task", "t", "--", "true")
    target = brk.workdir / "written"
    python = os.path.join(os.path.dirname(ENVLAYER_SCRIPT), "python")
    probe = subprocess.run(
        [python, "-c", PARTIAL_STDIN, str(target)], capture_output=True, text=True, cwd=brk.workdir, env=brk.environ()
    )
    assert probe.stdout == "N\n", probe.stderr
    assert brk.run("exec", "--task", "t", "--", "echo after").stdout == "after\n"  # served after the lost call
    assert not target.exists()


def test_stopping_the_broker_interrupts_a_running_command_and_says_why(brk: BrokerRun) -> None:
    marker = f"elbstop{uuid.uuid4().hex[:8]}"
    proc = brk.popen("exec", "--task", "t", "--", "sh", "-c", "echo started; sleep 3600; true", marker)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        stopped = brk.run("broker", "stop")
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130
    assert b"envlayer: interrupted; the command was killed" in err and b"was stopped" in err
    wait_until(lambda: not processes_with(marker), "the command's end")
