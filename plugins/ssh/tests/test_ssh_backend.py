"""Backend behaviour beyond the conformance suite: session semantics, connecting through
the ssh config, a jump host and a password, file confinement, directory transfer,
registration and import cost."""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions
from ssh_testserver import SSHServer

from envlayer.capabilities import Capability, capabilities_of
from envlayer.config import load_settings
from envlayer.discovery.backend_registry import load_backend
from envlayer.errors import BackendUnavailable, FileTooLarge, SandboxPathError, SandboxPermissionDenied
from envlayer.options import OptionError
from envlayer.transfer import TransferSummary

pytestmark = pytest.mark.ssh


# --- session semantics -------------------------------------------------------------


def test_exit_keeps_cwd_and_exports_for_the_next_call(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    env.exec("cd /tmp && export KEPT='a b' && FOO=local").check()
    assert env.exec("exit 7").exit_code == 7
    result = env.exec('pwd; printf "%s|%s" "$KEPT" "${FOO:-}"')
    assert result.stdout_text == "/tmp\na b|"


def test_no_state_file_left_after_exit_then_cleanup(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    assert env._session is not None
    state = f"{env._session.state_dir}/state"
    assert env.exec("export A=1; exit 3").exit_code == 3
    observer = make_env(sshd, exec_mode="oneshot")
    assert observer.exec(f"test -f {state}").exit_code == 0, "the EXIT trap saved the exports"
    env.cleanup()
    assert observer.exec(f"test -f {state}").exit_code == 1


def test_syntax_error_is_contained(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    env.exec("cd /tmp").check()
    result = env.exec("echo 'unterminated")
    assert result.exit_code == 2
    assert b"rror" in result.stderr
    assert env.exec("pwd").stdout == b"/tmp\n"


def test_exec_replacing_the_shell_returns_its_status(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    assert env.exec("exec sh -c 'echo replaced; exit 5'").exit_code == 5
    assert env.exec("echo back").stdout == b"back\n"


@pytest.mark.parametrize("size", [10, 65536, 65537, 3_000_000])
def test_session_stdin_small_and_large(sshd: SSHServer, make_env, size: int) -> None:
    env = make_env(sshd, cwd="/tmp")
    payload = os.urandom(size)
    result = env.exec("sha256sum | cut -d' ' -f1; pwd", stdin=payload)
    assert result.stdout_text == hashlib.sha256(payload).hexdigest() + "\n/tmp\n"
    assert env._session is not None
    private = env._session.state_dir
    assert env.exec(f"ls -A {private} | grep -c '^in-'", cwd="/").stdout == b"0\n", "stdin files are removed"
    assert env.exec(f"stat -c %a {private}").stdout == b"700\n", "stdin files are private"


def test_per_call_cwd_and_env_do_not_persist(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, cwd="/")
    assert env.exec("pwd; cd /usr", cwd="/tmp", env={"ONCE": "1"}).stdout == b"/tmp\n"
    assert env.exec('pwd; printf %s "${ONCE:-unset}"').stdout == b"/\nunset"


def test_missing_working_directory_is_126(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, cwd="/definitely/not/here")
    result = env.exec("true")
    assert result.exit_code == 126
    assert b"working directory does not exist" in result.stderr
    assert make_env(sshd, exec_mode="oneshot").exec("true", cwd="/not/there").exit_code == 126


def test_configured_env_is_exported(sshd: SSHServer, make_env) -> None:
    for mode in ("session", "oneshot"):
        env = make_env(sshd, exec_mode=mode, env={"GREETING": "hi 'there'"})
        assert env.exec('printf %s "$GREETING"').stdout == b"hi 'there'"
        assert env.exec("echo $PAGER $GIT_PAGER").stdout_text == "cat cat\n"  # agent default
        assert make_env(sshd, exec_mode=mode, env={"PAGER": "more"}).exec("echo $PAGER").stdout_text == "more\n"


def test_streaming_delivers_both_streams_as_they_come(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    chunks: list[tuple[str, bytes]] = []
    result = env.exec("echo one; echo two >&2; sleep 0.2; echo three", on_output=lambda s, c: chunks.append((s, c)))
    assert b"".join(c for s, c in chunks if s == "stdout") == result.stdout == b"one\nthree\n"
    assert b"".join(c for s, c in chunks if s == "stderr") == result.stderr == b"two\n"


def test_oneshot_runs_the_configured_shell_even_when_login_shell_differs(sshd: SSHServer, make_env) -> None:
    dash = make_env(sshd, exec_mode="oneshot")
    bash = make_env(sshd, exec_mode="oneshot", shell="/bin/bash")
    assert dash.exec('printf %s "${BASH_VERSION:-none}"').stdout == b"none"
    assert bash.exec('printf %s "${BASH_VERSION:-none}"').stdout != b"none"
    assert dash._pool.login_shell_is == {"/bin/sh": True, "/bin/bash": False}


def test_signal_death_of_the_oneshot_shell_is_255(sshd: SSHServer, make_env) -> None:
    assert make_env(sshd, exec_mode="oneshot").exec("kill -9 $$").exit_code == 255


def test_capabilities_follow_the_mode(sshd: SSHServer, make_env) -> None:
    session = make_env(sshd)
    oneshot = make_env(sshd, exec_mode="oneshot")
    assert Capability.PERSISTENT_SESSION in capabilities_of(session)
    assert Capability.PERSISTENT_SESSION not in capabilities_of(oneshot)
    for env in (session, oneshot):
        caps = capabilities_of(env)
        assert {Capability.STREAMING, Capability.DIRECTORY_TRANSFER} <= caps
        assert not caps & {Capability.FORCE_REMOVE, Capability.WAIT_FOR_CLEANUP, Capability.REAP_ORPHANS}


# --- connecting ------------------------------------------------------------------------


def test_ssh_config_alias_supplies_host_port_user_and_key(sshd: SSHServer, make_env, tmp_path) -> None:
    config = tmp_path / "config"
    config.write_text(
        f"Host testbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.files.client_key}\n"
    )
    env = make_env(sshd, host="testbox", port=None, user=None, key_files=[], ssh_config=str(config))
    assert env.target.hostname == "127.0.0.1" and env.target.port == sshd.port
    assert env.exec("id -un").stdout_text.strip() == sshd.user


@pytest.mark.parametrize("hops", [1, 2])
def test_proxy_jump_through_jump_hosts(sshd: SSHServer, make_env, hops: int) -> None:
    hop = f"{sshd.user}@127.0.0.1:{sshd.port}"
    env = make_env(sshd, proxy_jump=",".join([hop] * hops), exec_mode="oneshot")
    chain, target = 0, env.target
    while target.jump is not None:
        chain, target = chain + 1, target.jump
    assert chain == hops
    assert env.exec("echo jumped").stdout == b"jumped\n"
    jump = env._pool._jump
    assert jump is not None and jump.connections[0].alive, "the final hop runs inside the jump connection"


def test_agent_auth(sshd: SSHServer, make_env, tmp_path, monkeypatch) -> None:
    if shutil.which("ssh-agent") is None or shutil.which("ssh-add") is None:
        pytest.skip("ssh-agent is not installed (apt-get install openssh-client)")
    sock = str(tmp_path / "agent.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.02)
        subprocess.run(
            ["ssh-add", sshd.files.client_key],
            env={**os.environ, "SSH_AUTH_SOCK": sock},
            check=True,
            capture_output=True,
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        env = make_env(sshd, key_files=[], use_agent=True)
        assert env.exec("echo agent").stdout == b"agent\n"
        env.cleanup()
    finally:
        agent.kill()
        agent.wait()


def test_password_auth_and_no_secret_in_logs_or_repr(sshd: SSHServer, make_env, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    env = make_env(sshd, key_files=[], password=sshd.password)
    assert env.exec("echo pw").stdout == b"pw\n"
    assert sshd.password not in caplog.text
    assert sshd.password not in repr(env.options) and "***" in repr(env.options)
    assert sshd.password not in repr(env.target)


def test_no_host_is_reported_with_a_hint() -> None:
    with pytest.raises(BackendUnavailable) as info:
        SSHEnvironment(SSHOptions())
    assert "ENVLAYER_SSH_HOST" in info.value.hint
    with pytest.raises(BackendUnavailable):
        SSHEnvironment.check_available(SSHOptions())


def test_check_available_accepts_a_reachable_host(sshd: SSHServer) -> None:
    SSHEnvironment.check_available(SSHOptions(**sshd.options()))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("port", 0),
        ("host_key_policy", "yes"),
        ("exec_mode", "pty"),
        ("mode", "pty"),
        ("max_sessions", 0),
        ("env", {"BAD-NAME": "x"}),
    ],
)
def test_bad_options_are_rejected(key: str, value: object) -> None:
    with pytest.raises(OptionError) as info:
        SSHOptions(**{key: value})
    assert info.value.key == key


def test_deprecated_mode_is_taken_as_exec_mode_with_a_warning_and_a_log_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`mode` (the old name of `exec_mode`) still works for one release: as a keyword, in a
    config file and as ENVLAYER_SSH_MODE, each with a DeprecationWarning and a log note."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "envlayer.toml").write_text('[backends.ssh]\nmode = "oneshot"\n')
    sources = {
        "keyword": lambda: SSHOptions(mode="oneshot"),
        "config file": lambda: load_settings(cwd=project, env={}).options_for("ssh", SSHOptions, env={}),
        "variable": lambda: load_settings(cwd=tmp_path, env={"ENVLAYER_SSH_MODE": "oneshot"}).options_for(
            "ssh", SSHOptions, env={"ENVLAYER_SSH_MODE": "oneshot"}
        ),
    }
    for source, make in sources.items():
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="envlayer.ssh"),
            pytest.warns(DeprecationWarning, match="exec_mode"),
        ):
            options = make()
        assert (options.exec_mode, options.mode) == ("oneshot", None), source
        assert "`mode` will be removed" in caplog.text, source
    with pytest.raises(OptionError, match="conflicts with exec_mode") as info:
        SSHOptions(mode="session", exec_mode="oneshot")
    assert info.value.key == "mode"


# --- files -------------------------------------------------------------------------------


def test_symlink_escape_from_file_root_refused(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, cwd="/tmp")
    root = f"/tmp/envlayer-root-{os.getpid()}"
    env.exec(f"rm -rf {root}; mkdir -p {root} && ln -s /etc {root}/etc-link").check()
    env.options.file_root = root
    try:
        with pytest.raises(SandboxPathError):
            env.read_file(f"{root}/etc-link/passwd")
        with pytest.raises(SandboxPathError):
            env.write_file(f"{root}/etc-link/new-file", b"x")
        env.write_file(f"{root}/fine/ok.txt", b"ok")
        assert env.read_file(f"{root}/fine/ok.txt") == b"ok"
    finally:
        env.options.file_root = None
        env.exec(f"rm -rf {root}")


def test_relative_paths_follow_the_session_cwd(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    own = uuid.uuid4().hex  # the host's /tmp and the login's home are shared with other runs
    env.exec(f"mkdir -p /tmp/envlayer-rel-{own} && cd /tmp/envlayer-rel-{own}").check()
    env.write_file("here.txt", b"rel")
    assert env.exec(f"cat /tmp/envlayer-rel-{own}/here.txt").stdout == b"rel"
    assert env.read_file("here.txt") == b"rel"
    env.write_file(f"~/home-{own}.txt", b"home")
    assert env.exec(f"cat ~/home-{own}.txt; rm ~/home-{own}.txt").stdout == b"home"
    env.exec(f"cd / && rm -rf /tmp/envlayer-rel-{own}")


def test_write_keeps_existing_mode(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd, cwd="/tmp")
    env.exec("printf old > envlayer-mode.sh && chmod 751 envlayer-mode.sh").check()
    env.write_file("envlayer-mode.sh", b"new")
    assert env.exec("stat -c %a envlayer-mode.sh; cat envlayer-mode.sh").stdout == b"751\nnew"
    env.exec("rm -f envlayer-mode.sh")


@pytest.mark.parametrize("way", ["tar", "sftp"])
def test_directory_roundtrip(sshd: SSHServer, make_env, tmp_path, way: str) -> None:
    env = make_env(sshd, exec_mode="oneshot")
    if way == "sftp":
        env._files._tar_flavour = None  # a remote without tar: file by file over SFTP
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_bytes(b"top")
    (src / "a" / "b" / "deep.bin").write_bytes(bytes(range(256)) * 100)
    (src / "a" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (src / "a" / "run.sh").chmod(0o755)
    (src / "link").symlink_to("/etc/passwd")
    remote = f"/tmp/envlayer-dir-{os.getpid()}"
    try:
        (src / "empty").mkdir()
        (src / "top.txt").chmod(0o640)
        sent = env.upload_dir(src, remote)
        assert sent == TransferSummary(files=3, bytes=3 + 25600 + len("#!/bin/sh\necho run\n"))
        assert (env._files._tar_flavour is None) == (way == "sftp")
        assert env.exec(f"{remote}/a/run.sh").stdout == b"run\n"
        assert env.exec(f"stat -c %a {remote}/top.txt {remote}/a/run.sh").stdout == b"640\n755\n"
        assert env.exec(f"test -d {remote}/empty").exit_code == 0
        assert env.exec(f"test -e {remote}/link").exit_code != 0
        env.exec(f"ln -s /etc/hostname {remote}/remote-link").check()
        dst = tmp_path / "dst"
        assert env.download_dir(remote, dst) == sent
        assert (dst / "top.txt").read_bytes() == b"top"
        assert (dst / "a" / "b" / "deep.bin").read_bytes() == bytes(range(256)) * 100
        assert os.access(dst / "a" / "run.sh", os.X_OK)
        assert not (dst / "remote-link").exists()
    finally:
        env.exec(f"rm -rf {remote}")


def test_tar_upload_of_many_files_and_a_refused_target(sshd: SSHServer, make_env, tmp_path) -> None:
    env = make_env(sshd, exec_mode="oneshot")
    src = tmp_path / "many"
    for i in range(40):
        (src / f"d{i}").mkdir(parents=True)
        for j in range(50):
            (src / f"d{i}" / f"f{j}.txt").write_text(f"{i}-{j}\n")
    remote = f"/tmp/envlayer-many-{os.getpid()}"
    try:
        assert env.upload_dir(src, remote) == TransferSummary(
            files=2000, bytes=sum(len(f"{i}-{j}\n") for i in range(40) for j in range(50))
        )
        assert env.exec(f"find {remote} -type f | wc -l; cat {remote}/d39/f49.txt").stdout_text.split() == [
            "2000",
            "39-49",
        ]
        env.exec(f"mkdir {remote}/locked && chmod 555 {remote}/locked").check()
        with pytest.raises(SandboxPermissionDenied):
            env.upload_dir(src / "d0", f"{remote}/locked")
    finally:
        env.exec(f"chmod -R u+w {remote}; rm -rf {remote}")


def test_directory_transfer_checks_size_cap_first(sshd: SSHServer, make_env, tmp_path) -> None:
    env = make_env(sshd, exec_mode="oneshot", max_file_bytes=1000)
    (tmp_path / "small").write_bytes(b"s")
    (tmp_path / "big").write_bytes(b"b" * 2000)
    remote = f"/tmp/envlayer-cap-{os.getpid()}"
    with pytest.raises(FileTooLarge):
        env.upload_dir(tmp_path, remote)
    assert env.exec(f"test -e {remote}").exit_code != 0


# --- registration and import cost ---------------------------------------------------------


def test_entry_point_loads_the_backend() -> None:
    assert load_backend("ssh") is SSHEnvironment


def test_importing_the_backend_does_not_import_paramiko() -> None:
    code = "import sys, envlayer_ssh.backend; print(any(m.startswith('paramiko') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_cancel_from_another_thread_kills_the_remote_tree(sshd: SSHServer, make_env, mode: str) -> None:
    from envlayer.testing.cancelling import exec_cancelled_after_output

    env = make_env(sshd, exec_mode=mode)
    # Durations no other test uses: the loopback sandbox is this machine, where other tests
    # (other pytest-xdist workers, other runs) have their own sleeps, e.g. the kit's 310-313.
    first = 5000 + os.getpid() % 50_000 * 2
    result = exec_cancelled_after_output(env, f"echo started; sleep {first} & sleep {first + 1}", timeout=120)
    assert result.cancelled and result.exit_code == 130 and result.stdout_text == "started\n"
    assert env.exec(f"pgrep -xf 'sleep ({first}|{first + 1})' || echo none").stdout_text == "none\n"


def test_download_takes_the_files_in_tar_streams_and_sftp_only_what_they_left_out(
    sshd: SSHServer, make_env, tmp_path, monkeypatch
) -> None:
    import paramiko
    from envlayer_ssh import tar_download

    env = make_env(sshd, exec_mode="oneshot")
    remote = f"/tmp/envlayer-tar-down-{os.getpid()}"
    names = [f"d{i % 5}/odd name -{i}\n.txt" for i in range(30)]
    long = "d0/" + "/".join(["y" * 200] * 6) + "/f"  # longer than any command line below
    for name in [*names, long]:
        path = shlex.quote(f"{remote}/{name}")
        env.exec(f'mkdir -p "$(dirname {path})" && printf %s {path} > {path}').check()
    env.exec(f"chmod 751 {shlex.quote(f'{remote}/{names[0]}')}").check()
    gets: list[str] = []
    real_get = paramiko.SFTPClient.get

    def get(self: paramiko.SFTPClient, source: str, *args: object, **kwargs: object) -> object:
        gets.append(source)
        return real_get(self, source, *args, **kwargs)

    monkeypatch.setattr(paramiko.SFTPClient, "get", get)
    monkeypatch.setattr(tar_download, "LINE_MAX", 1200)  # several archives
    try:
        got = env.download_dir(remote, tmp_path / "dst")
        assert got.files == 31
        for name in [*names, long]:
            assert (tmp_path / "dst" / name).read_text() == f"{remote}/{name}"
        assert gets == [f"{remote}/{long}"], "only the name no command line could hold goes over SFTP"
        assert stat.S_IMODE(os.stat(tmp_path / "dst" / names[0]).st_mode) == 0o751
    finally:
        env.exec(f"rm -rf {remote}")


def test_tar_download_batches_count_the_bytes_sent(monkeypatch) -> None:
    from envlayer_ssh import tar_download

    monkeypatch.setattr(tar_download, "LINE_MAX", 60)
    names = ["é" * 20, "a" * 10, "b" * 10, "c" * 100, "d"]  # 20 characters of 2 bytes each
    assert list(tar_download.batches(names, "cd x &&")) == [["é" * 20], ["a" * 10, "b" * 10, "d"]]
