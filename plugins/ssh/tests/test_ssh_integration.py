"""The ssh backend through the core: configuration from a TOML file and ENVLAYER_SSH_*
variables, ``open_environment``, and the lifecycle dispatcher's fallbacks for the
capabilities ssh does not have."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from ssh_testserver import SSHServer

from envlayer import dispatch as lifecycle
from envlayer.config import load_settings
from envlayer.discovery.backend_registry import load_backend
from envlayer.errors import EnvironmentClosed
from envlayer.factory import open_environment

pytestmark = pytest.mark.ssh


def _config(tmp_path, sshd: SSHServer) -> str:
    path = tmp_path / "envlayer.toml"
    path.write_text(
        'backend = "ssh"\n[backends.ssh]\nhost = "127.0.0.1"\n'
        f'port = {sshd.port}\nuser = "{sshd.user}"\nssh_config = ""\n'
        "use_agent = false\nlook_for_keys = false\n"
    )
    return str(path)


def test_open_environment_from_file_and_env_vars(sshd: SSHServer, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENVLAYER_SSH_KEY_FILES", sshd.files.client_key)
    monkeypatch.setenv("ENVLAYER_SSH_KNOWN_HOSTS", sshd.files.known_hosts)
    monkeypatch.setenv("ENVLAYER_SSH_EXEC_MODE", "oneshot")
    monkeypatch.setenv("ENVLAYER_SSH_MAX_SESSIONS", "4")
    settings = load_settings(config_path=_config(tmp_path, sshd))
    with open_environment(settings=settings, task_id="t1") as env:
        assert env.name == "ssh" and env.task_id == "t1"
        assert env.options.exec_mode == "oneshot" and env.options.max_sessions == 4
        assert env.options.key_files == [sshd.files.client_key]
        assert env.exec("echo configured").stdout == b"configured\n"


def test_dispatcher_fallbacks_for_missing_capabilities(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    assert lifecycle.wait_for_cleanup(env, 1.0) is True
    cls = load_backend("ssh")
    options = cls.Options(**sshd.options())
    for outcome in (
        *lifecycle.reap_orphans([(cls, options)], profile="default", max_age=60),
        *lifecycle.list_sandboxes([(cls, options)], profile=None),
        *lifecycle.remove_sandbox([(cls, options)], "default", profile="default"),
    ):
        assert outcome.supported is False and outcome.error is None
    chunks: list[bytes] = []
    result = lifecycle.exec_streaming(env, "echo s", lambda _s, c: chunks.append(c))
    assert result.stdout == b"s\n" and b"".join(chunks) == b"s\n"
    outcome = lifecycle.cleanup(env, force_remove=True)
    # SSH keeps nothing after cleanup (no persist_across_processes): plain cleanup() is
    # the whole teardown, so there is no "may keep the sandbox" note to give
    assert outcome.forced is False and outcome.note == ""
    assert env.closed


def test_concurrent_calls_on_one_session_are_serialized(sshd: SSHServer, make_env) -> None:
    env = make_env(sshd)
    results: list[bytes] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        out = env.exec(f"echo start-{i}; sleep 0.05; echo end-{i}").stdout
        with lock:
            results.append(out)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == sorted(f"start-{i}\nend-{i}\n".encode() for i in range(6))


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_cleanup_while_a_command_runs(sshd: SSHServer, make_env, mode: str) -> None:
    env = make_env(sshd, exec_mode=mode)
    errors: list[BaseException] = []
    results: list[object] = []
    marker = f"/tmp/envlayer-cleanup-while-running-{uuid.uuid4().hex}"  # the server is this machine

    def run() -> None:
        try:
            results.append(env.exec(f"touch {marker}; sleep 30"))
        except BaseException as exc:  # asserted below
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        # Clean up only once the command runs: a fixed sleep raced the start under load (run2,
        # load 40: the command had not started or not ended within the old 0.5 s / 30 s).
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), f"the command did not start within 60 s; errors: {errors}"
        env.cleanup()
        worker.join(60)
        assert not worker.is_alive(), "cleanup() did not end the running command within 60 s"
    finally:
        if os.path.exists(marker):
            os.unlink(marker)
    assert len(errors) == 1 and isinstance(errors[0], EnvironmentClosed), (errors, results)
    with pytest.raises(EnvironmentClosed):
        env.exec("true")
