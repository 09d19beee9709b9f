"""Lifecycle of Modal sandboxes with real processes, the real SDK and the fake server:
tags at create, cross-process attach, races, persist/opt-out/force, the reaper, the
fingerprint rule, replacement of a terminated sandbox, and error mapping."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from modal_testenv import APP, IMAGE, QUOTA_TAG, child_code
from modal_testenv import running as _running

from envlayer.errors import BackendUnavailable
from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.sandbox.tags import sanitize
from envlayer.testing.fixtures import first_line_then_kill
from envlayer.testing.racing import race

pytestmark = pytest.mark.modal


def _wait_until(predicate: Any, timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_tags_are_set_at_create_never_after(make_env: Any, profile: str, fake_modal: Any) -> None:
    import modal

    task = f"team/alpha:{uuid.uuid4().hex[:6]}"
    env = make_env(task)
    tags = modal.Sandbox.from_id(env.sandbox_id).get_tags()
    assert tags["envlayer.managed"] == "1"
    assert tags["envlayer.task"] == sanitize(task) and tags["envlayer.profile"] == sanitize(profile)
    assert tags["envlayer.fingerprint"].startswith("v1-") and tags["envlayer.persist"] == "1"
    assert abs(float(tags["envlayer.created-at"]) - time.time()) < 60
    assert "SandboxTagsSetV2" not in fake_modal.rpcs("ak-envlayer-tests")


def test_two_processes_attach_to_one_sandbox(run_python: Any, profile: str) -> None:
    task = f"attach-{uuid.uuid4().hex[:6]}"
    code = child_code(task, profile) + "print(env.sandbox_id); env.exec('echo hi >> shared.txt').check()\n"
    first = run_python(code).strip()
    second = run_python(code).strip()
    assert first == second and first.startswith("sb-")
    out = run_python(
        child_code(task, profile)
        + "print(env.read_text('shared.txt'), end=''); env.cleanup(force_remove=True); env.wait_for_cleanup(30)\n"
    )
    assert out == "hi\nhi\n"


def test_sigkill_of_the_creator_then_a_new_process_attaches(run_python: Any, profile: str) -> None:
    task = f"sigkill-{uuid.uuid4().hex[:6]}"
    creator = run_python(
        child_code(task, profile)
        + "env.write_file('mark.txt', 'alive')\nprint(env.sandbox_id, flush=True)\nimport time; time.sleep(300)\n",
        wait=False,
    )
    first = first_line_then_kill(creator)
    assert first.startswith("sb-"), creator.stderr.read() if creator.stderr else ""
    out = run_python(
        child_code(task, profile)
        + "print(env.sandbox_id, env.read_text('mark.txt')); env.cleanup(force_remove=True); env.wait_for_cleanup(30)\n"
    )
    assert out.split() == [first, "alive"]


def test_sixteen_racing_processes_make_one_sandbox(fake_modal: Any, profile: str) -> None:
    task = f"race-{uuid.uuid4().hex[:6]}"
    code = child_code(task, profile) + "print(env.sandbox_id)\n"
    env = {**os.environ, **fake_modal.env("ak-envlayer-race")}
    prelude = "import modal, envlayer_modal.backend, envlayer_modal.options\n"
    outs = [racer.stdout.strip() for racer in race(prelude, code, 16, timeout=180, env=env)]
    try:
        assert len(set(outs)) == 1
        assert _running(task, profile) == [outs[0]]
    finally:
        import modal

        modal.Sandbox.from_id(outs[0]).terminate()


def test_persist_keeps_running_opt_out_and_force_terminate(make_env: Any, profile: str) -> None:
    kept = make_env()
    kept.cleanup()
    assert kept.wait_for_cleanup(5)
    assert _running(kept.task_id, profile) == [kept.sandbox_id]

    forced = make_env(kept.task_id)
    assert forced.sandbox_id == kept.sandbox_id
    forced.cleanup(force_remove=True)
    assert forced.wait_for_cleanup(30)
    assert _running(kept.task_id, profile) == []

    private = make_env(persist_across_processes=False)
    other = make_env(private.task_id, persist_across_processes=False)
    assert private.sandbox_id != other.sandbox_id
    private.cleanup()
    assert private.wait_for_cleanup(30)
    assert _running(private.task_id, profile) == [other.sandbox_id]


def test_cleanup_force_after_plain_cleanup_still_terminates(make_env: Any, profile: str) -> None:
    env = make_env()
    env.cleanup()
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(30)
    assert _running(env.task_id, profile) == []


def test_reaper_spares_busy_and_other_profile_sandboxes(make_env: Any, profile: str, options: Any) -> None:
    from envlayer_modal.backend import ModalEnvironment

    reap_profile = f"{profile}-reap"
    idle = make_env(prof=reap_profile)
    busy = make_env(prof=reap_profile)
    busy.exec("sleep 300 > /dev/null 2>&1 &").check()
    other = make_env()
    dry = ModalEnvironment.reap_orphans(profile=reap_profile, max_age=0, dry_run=True, options=options())
    assert [i.id for i in dry] == [idle.sandbox_id]
    assert _running(idle.task_id, reap_profile) == [idle.sandbox_id]
    reaped = ModalEnvironment.reap_orphans(profile=reap_profile, max_age=0, dry_run=False, options=options())
    assert [i.id for i in reaped] == [idle.sandbox_id]
    assert _running(idle.task_id, reap_profile) == []
    assert _running(busy.task_id, reap_profile) == [busy.sandbox_id]
    assert _running(other.task_id, profile) == [other.sandbox_id]
    young = ModalEnvironment.reap_orphans(profile=profile, max_age=3600, dry_run=False, options=options())
    assert young == []


def test_reaper_ends_private_sandbox_of_a_dead_process(run_python: Any, profile: str, options: Any) -> None:
    from envlayer_modal.backend import ModalEnvironment

    orphan_profile = f"{profile}-orphan"
    task = f"orphan-{uuid.uuid4().hex[:6]}"
    child = run_python(
        child_code(task, orphan_profile, persist_across_processes=False)
        + "print(env.sandbox_id, flush=True)\nimport time; time.sleep(300)\n",
        wait=False,
    )
    sandbox_id = first_line_then_kill(child)
    assert _running(task, orphan_profile) == [sandbox_id]
    reaped = ModalEnvironment.reap_orphans(profile=orphan_profile, max_age=3600, dry_run=False, options=options())
    assert [i.id for i in reaped] == [sandbox_id]
    assert _running(task, orphan_profile) == []


def test_list_and_remove_sandbox(make_env: Any, profile: str, options: Any) -> None:
    from envlayer_modal.backend import ModalEnvironment

    env = make_env()
    listed = ModalEnvironment.list_sandboxes(profile=profile, options=options())
    mine = [i for i in listed if i.task == sanitize(env.task_id)]
    assert [i.id for i in mine] == [env.sandbox_id] and mine[0].backend == "modal" and mine[0].status == "running"
    env.exec("sleep 300 > /dev/null 2>&1 &").check()
    assert ModalEnvironment.remove_sandbox(env.task_id, profile=profile, options=options(), force=False) == []
    removed = ModalEnvironment.remove_sandbox(env.task_id, profile=profile, options=options(), force=True)
    assert [i.id for i in removed] == [env.sandbox_id]
    assert _running(env.task_id, profile) == []


def test_fingerprint_change_recreates_or_errors(make_env: Any, profile: str, caplog: pytest.LogCaptureFixture) -> None:
    from envlayer.sandbox.recorded_options import OptionChange, SandboxOptionsDiffer

    first = make_env()
    with pytest.raises(SandboxOptionsDiffer, match="different options") as info:
        make_env(first.task_id, memory=256, on_fingerprint_mismatch="error")
    assert info.value.changes == [OptionChange("memory", None, 256)]  # read back from the sandbox's tag
    assert info.value.recorded is not None and info.value.recorded["image"] == first.options.image
    assert _running(first.task_id, profile) == [first.sandbox_id]
    with caplog.at_level(logging.WARNING, logger="envlayer.modal"):
        second = make_env(first.task_id, memory=256)
    assert second.sandbox_id != first.sandbox_id
    assert _running(first.task_id, profile) == [second.sandbox_id]
    notice = second.exec("true").notice
    assert "was replaced" in notice and "memory: null -> 256" in notice
    assert notice in [r.getMessage() for r in caplog.records if r.name == "envlayer.modal"]
    assert second.exec("true").notice == ""


@pytest.mark.parametrize("mode", ["oneshot", "session"])
def test_terminated_sandbox_is_replaced_and_the_next_command_says_so(make_env: Any, profile: str, mode: str) -> None:
    import modal

    env = make_env(exec_mode=mode)
    env.exec("cd /tmp").check()
    gone = env.sandbox_id
    modal.Sandbox.from_id(gone).terminate()
    assert _wait_until(lambda: _running(env.task_id, profile) == [])
    result = env.exec("echo back")
    assert result.stdout == b"back\n" and result.recovered == "sandbox recreated"
    assert env.sandbox_id != gone
    assert make_env(env.task_id, exec_mode=mode).sandbox_id == env.sandbox_id


def test_idle_timeout_ends_a_sandbox_nobody_uses(make_env: Any, profile: str) -> None:
    env = make_env(idle_timeout=2)
    env.exec("true").check()
    env.cleanup()
    assert _wait_until(lambda: _running(env.task_id, profile) == [], timeout=20)


# --- errors ----------------------------------------------------------------------------------


def _child_error(code: str, env: dict[str, str], timeout: float = 60) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


_BUILD_AND_REPORT = (
    "from envlayer.errors import BackendUnavailable\n"
    "from envlayer_modal.backend import ModalEnvironment\n"
    "from envlayer_modal.options import ModalOptions\n"
    "try:\n"
    "    ModalEnvironment(ModalOptions(image={image!r}, app_name={app!r}), task_id='e', profile={profile!r})\n"
    "    print('no error')\n"
    "except BackendUnavailable as exc:\n"
    "    print(str(exc))\n"
)


def test_missing_credentials_say_how_to_set_them(fake_modal: Any, tmp_path: Any, profile: str) -> None:
    env = {k: v for k, v in fake_modal.env().items() if not k.startswith("MODAL_TOKEN")}
    env["MODAL_CONFIG_PATH"] = str(tmp_path / "empty.toml")
    code = "import os\nfor k in ('MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET'): os.environ.pop(k, None)\n"
    out = _child_error(code + _BUILD_AND_REPORT.format(image=IMAGE, app=APP, profile=profile), env)
    assert "modal token new" in out and "MODAL_TOKEN_ID" in out


def test_unreachable_api_fails_fast_with_a_hint(profile: str, tmp_path: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "MODAL_SERVER_URL": f"http://127.0.0.1:{port}",
        "MODAL_TOKEN_ID": "ak-x",
        "MODAL_TOKEN_SECRET": "as-x",
        "MODAL_CONFIG_PATH": str(tmp_path / "empty.toml"),
    }
    started = time.monotonic()
    out = _child_error(_BUILD_AND_REPORT.format(image=IMAGE, app=APP, profile=profile), env, timeout=30)
    assert "unreachable" in out and "MODAL_SERVER_URL" in out
    assert time.monotonic() - started < 20


def test_unknown_image_names_the_image(make_env: Any) -> None:
    with pytest.raises(BackendUnavailable) as info:
        make_env(image="envlayer-test:does-not-exist")
    assert "envlayer-test:does-not-exist" in str(info.value) and "image" in info.value.hint


def test_quota_error_says_to_wait_or_free_sandboxes(make_env: Any) -> None:
    with pytest.raises(BackendUnavailable) as info:
        make_env(tags={"quota": QUOTA_TAG})
    assert "quota" in str(info.value).lower() and "envlayer reap" in info.value.hint


def test_importing_the_plugin_and_listing_backends_imports_no_sdk() -> None:
    code = (
        "import sys\n"
        "import envlayer_modal, envlayer_modal.backend, envlayer_modal.options\n"
        "from envlayer.discovery.backend_registry import list_backends\n"
        "names = [b.name for b in list_backends()]\n"
        "assert 'modal' in names, names\n"
        "sdk = ('modal', 'modal_proto', 'grpclib', 'synchronicity')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in sdk)\n"
        "print(loaded)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_no_credential_is_reported_without_importing_the_sdk(tmp_path: Any) -> None:
    """``envlayer ls``/``reap``/``doctor`` ask every installed backend: where no credential
    can be found, Modal says so without importing the SDK (0.4-0.8 s of CPU per command)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env["MODAL_CONFIG_PATH"] = str(tmp_path / "absent.toml")
    code = (
        "import sys\n"
        "from envlayer.errors import BackendUnavailable\n"
        "from envlayer_modal.backend import ModalEnvironment\n"
        "from envlayer_modal.options import ModalOptions\n"
        "try:\n"
        "    ModalEnvironment.check_available(ModalOptions())\n"
        "except BackendUnavailable as exc:\n"
        "    print(exc.message, '|', exc.hint)\n"
        "sdk = ('modal', 'modal_proto', 'grpclib', 'synchronicity')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in sdk))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    error, loaded = proc.stdout.splitlines()
    assert "no Modal credentials" in error and "modal token new" in error and "MODAL_TOKEN_ID" in error, error
    assert loaded == "[]"


def test_doctor_checks_the_modal_backend(fake_modal: Any, tmp_path: Any) -> None:
    code = "import sys\nfrom envlayer.cli.app import main\nsys.exit(main(['doctor', '--backend', 'modal']))\n"
    env = {**os.environ, **fake_modal.env(), "ENVLAYER_MODAL_APP_NAME": APP, "ENVLAYER_MODAL_IMAGE": IMAGE}
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0 and ok.stdout.startswith("ok   modal"), ok.stdout + ok.stderr
    env = {k: v for k, v in env.items() if not k.startswith("MODAL_TOKEN")}
    env["MODAL_CONFIG_PATH"] = str(tmp_path / "empty.toml")
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 1 and "FAIL modal" in bad.stdout and "modal token new" in bad.stdout, bad.stdout


def test_session_watchdog_spares_a_long_command(make_env: Any) -> None:
    """The command runs longer than an idle shell may live (idle_exit 1 s plus two 1-s looks
    of the watchdog: ``envlayer_modal.stream.WATCHDOG``) and is not killed. (Whether the
    shell is still there for a next call depends on how soon that call comes: after 1 s
    idle it may rightly be gone, so that is not asked here.)"""
    env = make_env(session_idle_exit=1)
    result = env.exec("sleep 4; echo done", timeout=60)
    assert result.stdout == b"done\n" and result.exit_code == 0 and result.recovered == ""


def _delay_the_write_of(monkeypatch: Any, text: bytes, seconds: float) -> None:
    """The first stdin write to a session shell that contains ``text`` leaves ``seconds``
    late: as a command does on a loaded machine or network."""
    from envlayer_modal.stream import ExecStream

    write, delayed = ExecStream.write, []

    def late_write(self: Any, data: bytes) -> None:
        if text in data and not delayed:
            delayed.append(data)
            time.sleep(seconds)
        write(self, data)

    monkeypatch.setattr(ExecStream, "write", late_write)


def test_a_command_arriving_as_the_idle_shell_ends_runs_in_a_new_shell(make_env: Any, monkeypatch: Any) -> None:
    """The command reaches the session shell after the watchdog ended it as idle (1 s, looked
    at every second): it never started, so it runs in a new shell (before: exit 137, no
    output). The first call had no state to lose, so ``recovered`` stays empty."""
    _delay_the_write_of(monkeypatch, b"echo ran", 3.0)
    env = make_env(session_idle_exit=1)
    result = env.exec("echo ran", timeout=60)
    assert (result.stdout, result.exit_code, result.recovered) == (b"ran\n", 0, "")


def test_a_command_arriving_after_the_idle_end_says_the_state_was_reset(make_env: Any, monkeypatch: Any) -> None:
    """The same with a shell that held state: the command runs in a new shell, and its
    result says exported variables were reset (they were: the new shell has only the
    configured ones)."""
    _delay_the_write_of(monkeypatch, b"echo ${A-unset}", 3.0)
    env = make_env(session_idle_exit=1)
    env.exec("export A=1").check()
    result = env.exec("echo ${A-unset}", timeout=60)
    assert (result.stdout, result.exit_code) == (b"unset\n", 0)
    assert result.recovered == RESTARTED_AFTER_KILL


def test_every_process_dies_then_the_sandbox_ends_by_itself(run_python: Any, profile: str) -> None:
    """Cost safety: the creator is SIGKILLed with its session shell open; the shell exits
    after session_idle_exit, the sandbox goes idle and idle_timeout terminates it."""
    task = f"dies-{uuid.uuid4().hex[:6]}"
    child = run_python(
        child_code(task, profile, idle_timeout=2, session_idle_exit=2)
        + "env.exec('cd /tmp').check()\nprint(env.sandbox_id, flush=True)\nimport time; time.sleep(300)\n",
        wait=False,
    )
    sandbox_id = first_line_then_kill(child)
    assert sandbox_id.startswith("sb-"), child.stderr.read() if child.stderr else ""
    assert _running(task, profile) == [sandbox_id]
    assert _wait_until(lambda: _running(task, profile) == [], timeout=60)


def test_session_commands_refresh_the_reapers_lease(make_env: Any) -> None:
    env = make_env()
    env.exec("true").check()
    assert env.exec("test -e /tmp/.envlayer-lease && echo leased").stdout == b"leased\n"


def test_fingerprint_mismatch_never_terminates_another_users_sandbox(
    fake_modal: Any, make_env: Any, profile: str
) -> None:
    """Sandbox names are shared by everyone in the workspace: a sandbox that another user
    (here: another login name) created with other options is refused, not replaced."""
    import modal

    task = f"shared-{uuid.uuid4().hex[:6]}"
    code = child_code(task, profile) + "print(env.sandbox_id)\n"
    env = {**os.environ, **fake_modal.env(), "USER": "someone-else", "LOGNAME": "someone-else"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    theirs = proc.stdout.strip()
    try:
        with pytest.raises(BackendUnavailable) as info:
            make_env(task, memory=256)
        assert "someone-else" in str(info.value) and "not terminated" in str(info.value)
        assert _running(task, profile) == [theirs]
        assert make_env(task).sandbox_id == theirs  # same options: shared as before
    finally:
        modal.Sandbox.from_id(theirs).terminate()
