"""Lifecycle of Daytona sandboxes with real processes, the real SDK and the fake API.

Cross-process attach, SIGKILL then attach, 16 racing processes, restart on use, persist vs
opt-out vs force, the reaper's rules, activity refresh during a long command, and the errors
a user meets (missing key, unreachable API, unknown snapshot, quota). Each scenario asserts
the API routes it used, so an SDK upgrade that changes the wire shows up here.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daytona_testkit import FAKE_KEY, IMAGE, FakeDaytona, child_code, run_python, start_fake, stop_fake

from envlayer.errors import BackendUnavailable
from envlayer.testing.racing import race

pytestmark = pytest.mark.docker


def _sdk(fake: FakeDaytona) -> Any:
    from daytona import Daytona, DaytonaConfig

    return Daytona(DaytonaConfig(api_key=FAKE_KEY, api_url=fake.url))


def _managed(fake: FakeDaytona, profile: str, task: str | None = None) -> list[Any]:
    from envlayer_daytona.sweep import list_managed

    return list_managed(_sdk(fake), profile=profile, task=task)


def test_create_attach_and_routes(fake_daytona: FakeDaytona, make_env: Callable[..., Any]) -> None:
    mark = fake_daytona.mark()
    env = make_env()
    created = fake_daytona.routes_since(mark)
    assert {"create", "process.execute"} <= created
    assert "unknown" not in created
    mark = fake_daytona.mark()
    result = env.exec("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    ran = fake_daytona.routes_since(mark)
    assert "process.execute" in ran and ran <= {"process.execute", "last-activity"}
    labels = _managed(fake_daytona, env.profile, env.task_id)[0].labels
    assert labels["envlayer.managed"] == "1" and labels["envlayer.task"] == env.task_id
    assert labels["envlayer.profile"] == env.profile and labels["envlayer.persist"] == "1"
    assert labels["envlayer.fingerprint"].startswith("v1-") and labels["envlayer.created-at"].endswith("Z")


def test_timeout_keeps_output_and_never_uses_the_408_path(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any]
) -> None:
    env = make_env()
    mark = fake_daytona.mark()
    result = env.exec("echo before; echo warn >&2; sleep 60; echo after", timeout=1.5)
    assert result.timed_out and result.exit_code == 124
    assert result.stdout == b"before\n" and result.stderr.startswith(b"warn\n")
    entries = fake_daytona.entries_since(mark)
    assert all(e["status"] != 408 for e in entries)
    assert env.exec("ps | grep -c 'sleep 6[0]' || true").stdout_text.strip() == "0"
    assert env.exec("echo usable").stdout == b"usable\n"


def test_cwd_and_export_persist_in_session_mode(make_env: Callable[..., Any]) -> None:
    env = make_env()
    env.exec("mkdir -p /tmp/keep && cd /tmp/keep && export KEPT=1").check()
    assert env.exec('pwd; echo "$KEPT"').stdout_text == "/tmp/keep\n1\n"
    env.exec("exit 4")  # ends the session shell: the next call starts in the last directory
    assert env.exec("pwd").stdout_text == "/tmp/keep\n"


def test_oneshot_mode_isolates_calls(make_env: Callable[..., Any]) -> None:
    env = make_env(exec_mode="oneshot")
    env.exec("cd /tmp && export GONE=1").check()
    assert env.exec('pwd; echo "${GONE:-unset}"').stdout_text == "/workspace\nunset\n"


def test_concurrent_calls_on_one_environment(make_env: Callable[..., Any]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    env = make_env()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: env.exec(f"sleep 0.3; echo {i}"), range(4)))
    assert [r.stdout_text for r in results] == [f"{i}\n" for i in range(4)]


def test_cross_process_attach(fake_daytona: FakeDaytona, make_env: Callable[..., Any], profile: str) -> None:
    task = f"xproc-{uuid.uuid4().hex[:6]}"
    out = run_python(
        child_code(fake_daytona.url, task, profile)
        + "env.write_file('from-child.txt', b'hello')\nprint(env.sandbox_id)\nenv.cleanup()\n"
    )
    mark = fake_daytona.mark()
    env = make_env(task)
    assert env.sandbox_id == out.strip()
    assert env.read_file("from-child.txt") == b"hello"
    entries = fake_daytona.entries_since(mark)
    assert {"route": "create", "status": 409} in [{k: e[k] for k in ("route", "status")} for e in entries]
    assert "get" in fake_daytona.routes_since(mark)


def test_sigkill_then_attach(fake_daytona: FakeDaytona, make_env: Callable[..., Any], profile: str) -> None:
    task = f"killed-{uuid.uuid4().hex[:6]}"
    code = child_code(fake_daytona.url, task, profile) + (
        "import sys, time\nenv.exec('echo alive > marker')\nprint(env.sandbox_id, flush=True)\n"
        "env.exec('sleep 300', timeout=600)\n"
    )
    proc = run_python(code, wait=False)
    try:
        sandbox_id = proc.stdout.readline().strip()
        assert sandbox_id, proc.stderr.read()
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    env = make_env(task)
    assert env.sandbox_id == sandbox_id
    assert env.exec("cat marker").stdout == b"alive\n"


def test_sixteen_racing_processes_make_one_sandbox(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], profile: str
) -> None:
    task = f"race-{uuid.uuid4().hex[:6]}"
    code = child_code(fake_daytona.url, task, profile) + "print(env.sandbox_id)\nenv.cleanup()\n"
    prelude = "from daytona import Daytona, DaytonaConfig\nimport envlayer_daytona.backend, envlayer_daytona.options\n"
    env = {**os.environ, "DAYTONA_API_KEY": FAKE_KEY}
    ids = [racer.stdout.strip() for racer in race(prelude, code, 16, timeout=300, env=env)]
    assert len(set(ids)) == 1
    assert [s.id for s in _managed(fake_daytona, profile, task)] == ids[:1]
    make_env(task)  # so the test removes it


def test_stopped_sandbox_is_restarted_on_use(fake_daytona: FakeDaytona, make_env: Callable[..., Any]) -> None:
    env = make_env()
    env.write_file("survives.txt", b"kept")
    _sdk(fake_daytona).get(env.sandbox_id).stop()
    mark = fake_daytona.mark()
    result = env.exec("cat survives.txt")
    assert result.stdout == b"kept" and result.recovered == "sandbox restarted"
    assert "start" in fake_daytona.routes_since(mark)
    archived = _sdk(fake_daytona).get(env.sandbox_id)
    archived.archive()
    assert env.read_file("survives.txt") == b"kept"


def test_deleted_sandbox_is_recreated_on_use(fake_daytona: FakeDaytona, make_env: Callable[..., Any]) -> None:
    env = make_env()
    first = env.sandbox_id
    _sdk(fake_daytona).get(first).delete()
    result = env.exec("echo again")
    assert result.stdout == b"again\n" and result.recovered == "sandbox recreated"
    assert env.sandbox_id != first


def test_attach_starts_a_stopped_sandbox(fake_daytona: FakeDaytona, make_env: Callable[..., Any]) -> None:
    env = make_env()
    env.cleanup()
    _sdk(fake_daytona).get(env.sandbox_id).stop()
    again = make_env(env.task_id)
    assert again.sandbox_id == env.sandbox_id
    assert str(_sdk(fake_daytona).get(env.sandbox_id).state.value) == "started"


def test_persist_vs_opt_out_vs_force(fake_daytona: FakeDaytona, make_env: Callable[..., Any], profile: str) -> None:
    kept = make_env()
    kept.cleanup()
    assert kept.wait_for_cleanup(30)
    assert [s.id for s in _managed(fake_daytona, profile, kept.task_id)] == [kept.sandbox_id]

    private = make_env(persist_across_processes=False)
    assert _managed(fake_daytona, profile, private.task_id)[0].labels["envlayer.persist"] == "0"
    assert _sdk(fake_daytona).get(private.sandbox_id).auto_delete_interval == 0
    private.cleanup()
    assert private.wait_for_cleanup(30)
    assert _managed(fake_daytona, profile, private.task_id) == []

    kept.cleanup(force_remove=True)
    assert kept.wait_for_cleanup(30)
    assert _managed(fake_daytona, profile, kept.task_id) == []


def test_fingerprint_mismatch(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    from envlayer.sandbox.recorded_options import OptionChange, SandboxOptionsDiffer

    env = make_env(labels={"team": "a"})
    with pytest.raises(SandboxOptionsDiffer, match="different options") as info:
        make_env(env.task_id, labels={"team": "b"}, on_fingerprint_mismatch="error")
    assert info.value.changes == [OptionChange("labels", {"team": "a"}, {"team": "b"})]  # read back from its labels
    assert info.value.recorded is not None and info.value.recorded["image"] == env.options.image
    with caplog.at_level(logging.WARNING, logger="envlayer.daytona"):
        replaced = make_env(env.task_id, labels={"team": "b"})
    assert replaced.sandbox_id != env.sandbox_id
    notice = replaced.exec("true").notice
    assert "was replaced" in notice and 'labels: {"team": "a"} -> {"team": "b"}' in notice
    assert any(notice in r.getMessage() for r in caplog.records if r.name == "envlayer.daytona")
    assert replaced.exec("true").notice == ""


def test_reaper_rules(fake_daytona: FakeDaytona, make_env: Callable[..., Any], options: Callable[..., Any]) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment

    mine, other = f"reap-{uuid.uuid4().hex[:6]}", f"reap-other-{uuid.uuid4().hex[:6]}"
    stopped, running, foreign = make_env(prof=mine), make_env(prof=mine), make_env(prof=other)
    sdk = _sdk(fake_daytona)
    sdk.get(stopped.sandbox_id).stop()
    sdk.get(foreign.sandbox_id).stop()
    time.sleep(1.1)
    opts = options()
    assert DaytonaEnvironment.reap_orphans(profile=mine, max_age=3600, dry_run=False, options=opts) == []
    would = DaytonaEnvironment.reap_orphans(profile=mine, max_age=1, dry_run=True, options=opts)
    assert [i.id for i in would] == [stopped.sandbox_id]
    assert len(_managed(fake_daytona, mine)) == 2
    reaped = DaytonaEnvironment.reap_orphans(profile=mine, max_age=1, dry_run=False, options=opts)
    assert [i.id for i in reaped] == [stopped.sandbox_id]
    assert [s.id for s in _managed(fake_daytona, mine)] == [running.sandbox_id]
    assert [s.id for s in _managed(fake_daytona, other)] == [foreign.sandbox_id]


def test_list_and_remove(make_env: Callable[..., Any], options: Callable[..., Any]) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment

    prof = f"ls-{uuid.uuid4().hex[:6]}"
    env = make_env(prof=prof)
    listed = DaytonaEnvironment.list_sandboxes(profile=prof, options=options())
    assert [(i.id, i.task, i.profile, i.status) for i in listed] == [(env.sandbox_id, env.task_id, prof, "started")]
    assert DaytonaEnvironment.remove_sandbox(env.task_id, profile=prof, options=options(), force=False) == []
    removed = DaytonaEnvironment.remove_sandbox(env.task_id, profile=prof, options=options(), force=True)
    assert [i.id for i in removed] == [env.sandbox_id]
    assert DaytonaEnvironment.list_sandboxes(profile=prof, options=options()) == []


def test_directory_transfer_and_path_confinement(make_env: Callable[..., Any], tmp_path: Path) -> None:
    from envlayer_daytona.files import extract

    from envlayer.errors import SandboxPathError
    from envlayer.transfer import TransferSummary

    env = make_env()
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"A")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (src / "link").symlink_to("/etc/passwd")
    assert env.upload_dir(str(src), "tree") == TransferSummary(files=2, bytes=257)
    assert env.exec("cat tree/a.txt; test -e tree/link || echo no-link").stdout == b"Ano-link\n"
    assert env.download_dir("tree", tmp_path / "back") == TransferSummary(files=2, bytes=257)
    assert (tmp_path / "back" / "sub" / "b.bin").read_bytes() == bytes(range(256))
    env.exec("mkdir -p evil && ln -sf /etc/passwd evil/link && echo ok > evil/ok").check()
    assert env.download_dir("evil", tmp_path / "evil") == TransferSummary(files=1, bytes=3)
    assert not (tmp_path / "evil" / "link").exists()
    with pytest.raises(FileNotFoundError):
        env.download_dir("no-such-dir", tmp_path / "none")
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("fine.txt", "../escape.txt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(SandboxPathError):
        extract(buf.getvalue(), str(tmp_path / "hostile"))
    assert not (tmp_path / "hostile" / "fine.txt").exists() and not (tmp_path / "escape.txt").exists()


@pytest.fixture(scope="module")
def clock_fake(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeDaytona]:
    """A fake whose lifecycle clock moves only when the test advances it (auto-stop then
    depends on what happened between two advances, never on how fast the machine is), and
    with a 1-CPU quota."""
    fake = start_fake(tmp_path_factory.mktemp("clock-daytona"), max_cpu=1, manual_clock=True)
    try:
        yield fake
    finally:
        stop_fake(fake)


def _clock_env(fake: FakeDaytona, profile: str, **kw: Any) -> Any:
    from envlayer_daytona.backend import DaytonaEnvironment
    from envlayer_daytona.options import DaytonaOptions

    opts = DaytonaOptions(api_url=fake.url, snapshot=IMAGE, cwd="/workspace", timeout=60, **kw)
    return DaytonaEnvironment(opts, task_id=f"clock-{uuid.uuid4().hex[:6]}", profile=profile)


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll ``check`` until true; fail saying ``what`` did not happen (the bound only turns
    a hang into a failure: nothing here depends on how long it takes)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s")
        time.sleep(0.05)


def _start_gated_command(pool: Any, env: Any, gate: str) -> tuple[Any, threading.Event]:
    """Run, on ``pool``, a command that prints ``started`` and then waits until file ``gate``
    exists; returns its future and an event set once ``started`` was received."""
    started = threading.Event()

    def seen(stream: str, chunk: bytes) -> None:
        if b"started" in chunk:
            started.set()

    command = f"echo started; while [ ! -e {gate} ]; do sleep 0.1; done; echo done"
    future = pool.submit(env.exec, command, timeout=600, on_output=seen)
    _wait_for(lambda: started.is_set() or future.done(), "the command's start")
    assert started.is_set(), future.result()
    return future, started


def test_activity_refresh_keeps_a_long_command_alive(clock_fake: FakeDaytona, profile: str) -> None:
    """auto_stop_interval = 3 Daytona minutes on a fake whose clock the test moves: while one
    command runs, the clock goes 4 minutes forward, one minute at a time, and after each minute
    the test waits for the environment's next activity refresh (activity_interval 0.5 s): the
    sandbox is never idle for 3 minutes, the command survives and finishes. Without refreshes
    (activity_interval 3600 s) the same 4 minutes stop the sandbox under the running command:
    the call says so (NOT re-run), and the next call restarts the sandbox."""
    from concurrent.futures import ThreadPoolExecutor

    env = _clock_env(clock_fake, profile, auto_stop_interval=3, activity_interval=0.5)
    gate = f"/tmp/gate-{uuid.uuid4().hex[:8]}"
    try:
        with ThreadPoolExecutor(1) as pool:
            running, _ = _start_gated_command(pool, env, gate)
            for _ in range(4):
                clock_fake.advance_clock(1)
                mark = clock_fake.mark()
                _wait_for(lambda m=mark: "last-activity" in clock_fake.routes_since(m), "an activity refresh")
                assert str(_sdk(clock_fake).get(env.sandbox_id).state.value) == "started"
            env.write_file(gate, b"")
            result = running.result(timeout=600)
        assert result.stdout == b"started\ndone\n" and result.exit_code == 0 and result.recovered == ""
    finally:
        env.cleanup(force_remove=True)
        env.wait_for_cleanup(30)
    lazy = _clock_env(clock_fake, profile, auto_stop_interval=3, activity_interval=3600)
    try:
        with ThreadPoolExecutor(1) as pool:
            running, _ = _start_gated_command(pool, lazy, gate)
            mark = clock_fake.mark()
            for _ in range(4):
                clock_fake.advance_clock(1)
            assert str(_sdk(clock_fake).get(lazy.sandbox_id).state.value) == "stopped"
            with pytest.raises(BackendUnavailable, match="NOT re-run"):
                running.result(timeout=600)
        assert "last-activity" not in clock_fake.routes_since(mark)
        again = lazy.exec("echo back")
        assert again.stdout == b"back\n" and again.recovered == "sandbox restarted"
    finally:
        lazy.cleanup(force_remove=True)
        lazy.wait_for_cleanup(30)


def test_quota_is_a_clear_error(clock_fake: FakeDaytona, profile: str) -> None:
    first = _clock_env(clock_fake, profile, auto_stop_interval=0)
    try:
        with pytest.raises(BackendUnavailable) as info:
            _clock_env(clock_fake, profile, auto_stop_interval=0)
        assert "quota" in info.value.message and "envlayer rm" in info.value.hint
    finally:
        first.cleanup(force_remove=True)
        first.wait_for_cleanup(30)


def test_unknown_snapshot_and_image(fake_daytona: FakeDaytona, options: Callable[..., Any], profile: str) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment

    with pytest.raises(BackendUnavailable) as info:
        DaytonaEnvironment(options(snapshot="no-such-snapshot:1"), task_id="missing-snap", profile=profile)
    assert "snapshot" in info.value.message and "image" in info.value.hint
    with pytest.raises(BackendUnavailable) as info:
        DaytonaEnvironment(options(snapshot=None, image="no-such-image:1"), task_id="missing-img", profile=profile)
    assert "no-such-image:1" in info.value.message


def test_missing_key_and_unreachable_api(
    fake_daytona: FakeDaytona, options: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment

    monkeypatch.delenv("DAYTONA_API_KEY")
    monkeypatch.delenv("DAYTONA_JWT_TOKEN", raising=False)
    monkeypatch.chdir(os.path.dirname(__file__))  # the SDK also reads .env files of the cwd
    with pytest.raises(BackendUnavailable) as info:
        DaytonaEnvironment.check_available(options())
    assert "DAYTONA_API_KEY" in info.value.hint
    monkeypatch.setenv("DAYTONA_API_KEY", "wrong-key")
    with pytest.raises(BackendUnavailable, match="refused the credentials"):
        DaytonaEnvironment.check_available(options())
    monkeypatch.setenv("DAYTONA_API_KEY", FAKE_KEY)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/api"
    with pytest.raises(BackendUnavailable) as info:
        DaytonaEnvironment.check_available(options(api_url=closed))
    assert "cannot reach" in info.value.message and "api_url" in info.value.hint
    DaytonaEnvironment.check_available(options())


def test_envlayer_doctor_checks_daytona(fake_daytona: FakeDaytona, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    base = {**os.environ, "ENVLAYER_DAYTONA_API_URL": fake_daytona.url, "DAYTONA_API_KEY": FAKE_KEY}
    argv = [sys.executable, "-m", "envlayer.cli.app", "doctor", "--backend", "daytona", "--json"]
    ok = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=base, timeout=120)
    entry = next(e for e in json.loads(ok.stdout) if e["backend"] == "daytona")
    assert entry["ok"], entry
    base.pop("DAYTONA_API_KEY")
    bad = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=base, timeout=120)
    entry = next(e for e in json.loads(bad.stdout) if e["backend"] == "daytona")
    assert not entry["ok"] and "DAYTONA_API_KEY" in entry["error"]["hint"] and bad.returncode == 1
