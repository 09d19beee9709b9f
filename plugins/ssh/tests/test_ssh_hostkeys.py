"""Host-key verification against a real sshd: refuse unknown and changed keys, record on
accept-new, and hints whose command really trusts the key."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from envlayer_ssh.errors import HostKeyError
from silent_drop import SilentDropProxy
from ssh_testserver import SSHServer

from envlayer.errors import BackendUnavailable

pytestmark = pytest.mark.ssh


def _no_auth_attempted(server: SSHServer) -> bool:
    return "Accepted publickey" not in server.read_log() and "Failed publickey" not in server.read_log()


def test_unknown_host_key_refused_before_authenticating(own_sshd: SSHServer, make_env) -> None:
    Path(own_sshd.files.known_hosts).write_text("")
    with pytest.raises(HostKeyError) as info:
        make_env(own_sshd)
    err = info.value
    assert isinstance(err, BackendUnavailable)
    assert "is not in" in err.message and "SHA256:" in err.message
    assert f"ssh-keyscan -p {own_sshd.port} -t ssh-ed25519 127.0.0.1 >> {own_sshd.files.known_hosts}" in err.hint
    assert "accept-new" in err.hint
    assert _no_auth_attempted(own_sshd)


def test_missing_known_hosts_file_refused(own_sshd: SSHServer, make_env, tmp_path) -> None:
    with pytest.raises(HostKeyError):
        make_env(own_sshd, known_hosts=str(tmp_path / "nope" / "known_hosts"))
    assert not (tmp_path / "nope").exists()


def test_hint_command_trusts_the_key(own_sshd: SSHServer, make_env) -> None:
    Path(own_sshd.files.known_hosts).write_text("")
    with pytest.raises(HostKeyError) as info:
        make_env(own_sshd)
    command = re.search(r"`(ssh-keyscan [^`]*)`", info.value.hint)
    assert command is not None
    subprocess.run(command.group(1), shell=True, check=True, capture_output=True, timeout=30)
    env = make_env(own_sshd)
    assert env.exec("echo trusted").stdout == b"trusted\n"


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_changed_host_key_refused(own_sshd: SSHServer, make_env, policy: str) -> None:
    make_env(own_sshd, host_key_policy=policy).exec("true").check()
    before = Path(own_sshd.files.known_hosts).read_text()
    own_sshd.new_host_key()
    own_sshd.restart()
    with pytest.raises(HostKeyError) as info:
        make_env(own_sshd, host_key_policy=policy, exec_mode="oneshot")
    assert "CHANGED" in info.value.message
    assert f"ssh-keygen -R '[127.0.0.1]:{own_sshd.port}' -f {own_sshd.files.known_hosts}" in info.value.hint
    assert Path(own_sshd.files.known_hosts).read_text() == before


def test_a_new_environment_on_a_connection_that_died_unseen_checks_the_new_host_key(
    own_sshd: SSHServer, make_env, tmp_path
) -> None:
    """The shared connection died without the client being told (then the server came
    back with another key): the next environment's constructor proves the connection
    with a round trip, reconnects, and refuses the changed key, instead of taking the
    dead connection for a verified one (seen under load after a plain restart)."""
    known_hosts = tmp_path / "known_hosts"
    with SilentDropProxy(own_sshd.port) as proxy:
        known_hosts.write_text(own_sshd.host_key_line().replace(f":{own_sshd.port} ", f":{proxy.port} ", 1))
        options = {"port": proxy.port, "known_hosts": str(known_hosts), "exec_mode": "oneshot"}
        first = make_env(own_sshd, **options)
        first.exec("true").check()
        proxy.wait_quiet(0.5)
        proxy.drop_silently()
        own_sshd.new_host_key()
        own_sshd.restart()
        try:
            with pytest.raises(HostKeyError) as info:
                make_env(own_sshd, **options)
            assert "CHANGED" in info.value.message
        finally:
            first.cleanup()  # while the proxy still forwards


def test_changed_key_refused_on_reconnect_of_a_live_environment(own_sshd: SSHServer, make_env) -> None:
    env = make_env(own_sshd)
    env.exec("true").check()
    own_sshd.new_host_key()
    own_sshd.restart()
    with pytest.raises(HostKeyError):
        env.exec("true")


def test_accept_new_records_the_key_then_strict_accepts_it(own_sshd: SSHServer, make_env, tmp_path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    env = make_env(own_sshd, host_key_policy="accept-new", known_hosts=str(known))
    assert env.exec("echo first").stdout == b"first\n"
    assert known.read_text() == own_sshd.host_key_line()
    assert oct(known.stat().st_mode & 0o777) == "0o600"
    strict = make_env(own_sshd, known_hosts=str(known), exec_mode="oneshot")
    assert strict.exec("echo again").stdout == b"again\n"
    assert known.read_text() == own_sshd.host_key_line()


def test_insecure_accepts_any_key_and_records_nothing(own_sshd: SSHServer, make_env, tmp_path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    env = make_env(own_sshd, host_key_policy="insecure", known_hosts=str(known))
    assert env.exec("echo ok").stdout == b"ok\n"
    assert known.read_text() == ""


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_host_known_only_under_another_key_type_is_refused(own_sshd: SSHServer, make_env, tmp_path, policy) -> None:
    other = tmp_path / "other_ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(other)], check=True, capture_output=True)
    key_type, blob = (tmp_path / "other_ecdsa.pub").read_text().split()[:2]
    Path(own_sshd.files.known_hosts).write_text(f"[127.0.0.1]:{own_sshd.port} {key_type} {blob}\n")
    with pytest.raises(HostKeyError) as info:
        make_env(own_sshd, host_key_policy=policy)
    assert "ssh-keygen -R" in info.value.hint
    assert Path(own_sshd.files.known_hosts).read_text().count("\n") == 1
