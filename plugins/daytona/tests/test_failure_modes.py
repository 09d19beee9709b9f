"""The Daytona backend through the real service's failure modes, against the fake that
reproduces them (see ``fake_daytona.md``): a process's exit status, throttling, 409 while a
state changes, recoverable errors, every state the SDK lists, builds that outlast the
create timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest
from daytona_testkit import FAKE_KEY, IMAGE, FakeDaytona, child_code

pytestmark = pytest.mark.docker

_ENDINGS = {
    "closed": "env.cleanup()\n",
    "left open": "",
    "force_remove": "env.cleanup(force_remove=True)\n",
    "private": "env.cleanup()\n",
}


def _remove_task(fake: FakeDaytona, profile: str, task: str) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment
    from envlayer_daytona.options import DaytonaOptions

    DaytonaEnvironment.remove_sandbox(task, profile=profile, options=DaytonaOptions(api_url=fake.url), force=True)


_REPORT_THREADS_AT_EXIT = textwrap.dedent(
    """\
    import atexit, sys, threading

    def _report_threads():  # registered first, so it runs after every exit hook of the backend
        alive = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
        if alive:
            print("threads alive at exit:", alive, file=sys.stderr)

    atexit.register(_report_threads)
    """
)


@pytest.mark.parametrize("ending", list(_ENDINGS))
def test_a_script_exits_with_its_own_status(fake_daytona: FakeDaytona, profile: str, ending: str) -> None:
    """A script that opens an environment, runs one command and ends it (or not) exits 0
    with nothing on stderr: no thread of the backend or the SDK is caught mid-call by the
    interpreter's shutdown (that aborted the process with SIGABRT, exit 134), and none is
    left alive once the exit hooks ran (the script reports any on stderr)."""
    task = f"exit-{uuid.uuid4().hex[:8]}"
    opts = {"persist_across_processes": ending != "private"}
    code = (
        _REPORT_THREADS_AT_EXIT
        + child_code(fake_daytona.url, task, profile, **opts)
        + textwrap.dedent(
            """\
        result = env.exec("echo hello")
        print(result.stdout.decode(), end="")
        """
        )
        + _ENDINGS[ending]
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "DAYTONA_API_KEY": FAKE_KEY},
        )
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello\n", "")
    finally:
        _remove_task(fake_daytona, profile, task)


def _statuses(fake: FakeDaytona, mark: int, route: str) -> list[int]:
    return [e["status"] for e in fake.entries_since(mark) if e["route"] == route]


def test_throttling_and_brief_outages_are_retried(
    fake_daytona: FakeDaytona, make_env: Any, options: Any, profile: str
) -> None:
    """429 with Retry-After, 502, 503 and 504 on create, get, start, list and delete are
    retried with backoff (each call succeeds after its faults; the route log shows them)."""
    from envlayer_daytona.backend import DaytonaEnvironment

    task = f"thr-{uuid.uuid4().hex[:8]}"
    mark = fake_daytona.mark()
    fake_daytona.fail_next("create", 2, 429, retry_after=0.2)
    env = make_env(task)
    assert _statuses(fake_daytona, mark, "create") == [429, 429, 200]
    env.cleanup()
    env._sandbox.stop()  # the next environment finds it stopped: get, then start
    mark = fake_daytona.mark()
    fake_daytona.fail_next("create", 1, 503)
    fake_daytona.fail_next("get", 1, 502)
    fake_daytona.fail_next("start", 1, 504)
    again = make_env(task)
    assert again.exec("echo back").stdout == b"back\n"
    assert _statuses(fake_daytona, mark, "create") == [503, 409]
    assert _statuses(fake_daytona, mark, "get")[:2] == [502, 200]
    assert _statuses(fake_daytona, mark, "start") == [504, 200]
    opts = options()
    mark = fake_daytona.mark()
    fake_daytona.fail_next("list", 2, 503)
    fake_daytona.fail_next("delete", 1, 429, retry_after=0)
    removed = DaytonaEnvironment.remove_sandbox(task, profile=profile, options=opts, force=True)
    assert [info.task for info in removed] == [task]
    assert _statuses(fake_daytona, mark, "list") == [503, 503, 200]
    assert _statuses(fake_daytona, mark, "delete")[:2] == [429, 200]


def test_a_throttle_that_does_not_end_fails_clearly(fake_daytona: FakeDaytona, options: Any, profile: str) -> None:
    """Retries are bounded: a route that keeps answering 503 fails after the policy's
    attempts with an error that says what happened and what to do."""
    from envlayer_daytona.backend import DaytonaEnvironment

    from envlayer.errors import BackendUnavailable
    from envlayer.sandbox.retry import DEFAULT_POLICY

    mark = fake_daytona.mark()
    fake_daytona.fail_next("list", DEFAULT_POLICY.attempts, 503)
    with pytest.raises(BackendUnavailable) as caught:
        DaytonaEnvironment.list_sandboxes(profile=profile, options=options())
    assert "HTTP 503" in str(caught.value) and "retry" in caught.value.hint
    assert _statuses(fake_daytona, mark, "list") == [503] * DEFAULT_POLICY.attempts


def _rm(fake: FakeDaytona, profile: str, task: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``envlayer rm TASK --force`` against the fake, as a user runs it."""
    argv = [
        sys.executable,
        "-m",
        "envlayer.cli.app",
        "rm",
        task,
        "--force",
        "--backend",
        "daytona",
        "--profile",
        profile,
    ]
    env = {**os.environ, "ENVLAYER_DAYTONA_API_URL": fake.url, "DAYTONA_API_KEY": FAKE_KEY}
    for option in options:
        argv += ["-o", option]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)


def test_rm_waits_out_a_state_change_and_removes(fake_daytona: FakeDaytona, make_env: Any, profile: str) -> None:
    """While a sandbox is stopping, Daytona answers delete with 409 "Sandbox state change in
    progress": `envlayer rm --force` waits for the stop to end, deletes it, and says so."""
    task = f"rm409-{uuid.uuid4().hex[:8]}"
    env = make_env(task)
    env.cleanup()
    fake_daytona.hold(env.sandbox_name, "stopping", then="stopped", refusals=1)
    mark = fake_daytona.mark()
    proc = _rm(fake_daytona, profile, task)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert task in proc.stdout and "nothing removed" not in proc.stdout
    deletes = _statuses(fake_daytona, mark, "delete")
    assert deletes[0] == 409 and deletes[-1] == 200
    assert _managed_names(fake_daytona, profile, task) == []


def test_rm_that_cannot_remove_says_so_and_fails(fake_daytona: FakeDaytona, make_env: Any, profile: str) -> None:
    """A state change that outlasts `create_timeout`: rm exits non-zero naming the sandbox
    and why, never "nothing removed" with exit 0; the sandbox is still listed."""
    task = f"rm409-{uuid.uuid4().hex[:8]}"
    env = make_env(task)
    env.cleanup()
    fake_daytona.hold(env.sandbox_name, "stopping", then="stopped")  # until the next hold
    try:
        proc = _rm(fake_daytona, profile, task, "create_timeout=2")
        assert proc.returncode != 0, proc.stdout + proc.stderr
        assert env.sandbox_name in proc.stdout + proc.stderr and "state change" in proc.stdout + proc.stderr
        assert _managed_names(fake_daytona, profile, task) == [env.sandbox_name]
    finally:
        fake_daytona.hold(env.sandbox_name, "stopped")  # the stop ends: the test's cleanup can delete it


def test_start_waits_out_a_state_change(fake_daytona: FakeDaytona, make_env: Any) -> None:
    """A sandbox another process is stopping: attaching waits for the stop, then starts it."""
    task = f"st409-{uuid.uuid4().hex[:8]}"
    first = make_env(task)
    first.cleanup()
    fake_daytona.hold(first.sandbox_name, "stopping", then="stopped", seconds=1.5, refusals=1)
    mark = fake_daytona.mark()
    second = make_env(task)
    assert second.exec("echo up").stdout == b"up\n"
    assert _statuses(fake_daytona, mark, "start")[-1] == 200


def _client(fake: FakeDaytona) -> Any:
    from daytona import Daytona, DaytonaConfig

    return Daytona(DaytonaConfig(api_key=FAKE_KEY, api_url=fake.url))


def _managed_names(fake: FakeDaytona, profile: str, task: str) -> list[str]:
    from envlayer_daytona.sweep import list_managed

    return [s.name for s in list_managed(_client(fake), profile=profile, task=task)]


def test_a_recoverable_error_is_recovered_not_replaced(fake_daytona: FakeDaytona, make_env: Any) -> None:
    """A sandbox in `error` with `recoverable: true` keeps its files: attaching to it, and a
    command on an environment that holds it, call `recover` and never `delete`."""
    task = f"rec-{uuid.uuid4().hex[:8]}"
    env = make_env(task)
    env.write_file("work.txt", "the agent's work")
    first_id = env.sandbox_id
    env.cleanup()
    fake_daytona.hold(env.sandbox_name, "error", recoverable=True, errorReason="disk quota exceeded")
    mark = fake_daytona.mark()
    again = make_env(task)
    assert again.sandbox_id == first_id and again.read_file("work.txt") == b"the agent's work"
    fake_daytona.hold(env.sandbox_name, "error", recoverable=True, errorReason="disk quota exceeded")
    result = again.exec("cat work.txt")
    assert result.stdout == b"the agent's work" and "recovered" in result.recovered
    routes = fake_daytona.routes_since(mark)
    assert _statuses(fake_daytona, mark, "recover") == [200, 200] and "delete" not in routes


def test_an_unrecoverable_error_is_replaced_with_a_notice(fake_daytona: FakeDaytona, make_env: Any) -> None:
    """A sandbox in `error` that Daytona does not call recoverable is replaced, and the
    result says its data is lost."""
    task = f"err-{uuid.uuid4().hex[:8]}"
    env = make_env(task)
    env.write_file("work.txt", "gone")
    first_id = env.sandbox_id
    fake_daytona.hold(env.sandbox_name, "error", recoverable=False, errorReason="runner lost")
    result = env.exec("ls work.txt 2>/dev/null; echo done")
    assert result.stdout == b"done\n" and env.sandbox_id != first_id
    assert "recreated" in result.recovered and "lost" in result.recovered and "runner lost" in result.recovered


def test_paused_and_pausing_sandboxes_are_resumed(fake_daytona: FakeDaytona, make_env: Any) -> None:
    """`pausing` is waited for, then the paused sandbox is started (the API's start resumes
    it) with its files; an `unknown` state fails naming the state."""
    from envlayer.errors import BackendUnavailable

    task = f"pause-{uuid.uuid4().hex[:8]}"
    env = make_env(task)
    env.write_file("work.txt", "kept")
    env.cleanup()
    fake_daytona.hold(env.sandbox_name, "pausing", then="paused", seconds=1)
    again = make_env(task)
    assert again.read_file("work.txt") == b"kept" and again.sandbox_id == env.sandbox_id
    again.cleanup()
    fake_daytona.hold(env.sandbox_name, "unknown")
    try:
        with pytest.raises(BackendUnavailable, match="'unknown'"):
            make_env(task)
    finally:
        fake_daytona.hold(env.sandbox_name, "started")


def test_a_task_id_that_looks_like_a_url_makes_an_accepted_name(make_env: Any) -> None:
    """The API refuses sandbox names with `www.` or a URL scheme (IsSafeDisplayString):
    such a task id still gets its sandbox."""
    env = make_env(f"www.example.com/job-{uuid.uuid4().hex[:6]}")
    assert env.exec("echo ok").stdout == b"ok\n" and "www." not in env.sandbox_name.lower()


def test_an_image_build_that_outlasts_create_timeout(
    fake_daytona: FakeDaytona, make_env: Any, profile: str, caplog: pytest.LogCaptureFixture
) -> None:
    """From an image, Daytona builds a snapshot first (the sandbox is `pending_build`): a
    private environment that gives up deletes what it created; in persist mode the sandbox
    keeps building and the next call attaches to it and waits; both say it was building."""
    from envlayer_daytona.sweep import list_managed

    from envlayer.errors import BackendUnavailable

    image = {"snapshot": None, "image": IMAGE}
    task = f"build-{uuid.uuid4().hex[:8]}"
    fake_daytona.build_next(60)
    with (
        caplog.at_level("WARNING", logger="envlayer.daytona"),
        pytest.raises(BackendUnavailable, match="building") as private,
    ):
        make_env(task, persist_across_processes=False, create_timeout=2, **image)
    assert "it was deleted" in str(private.value) and "builds a snapshot" in caplog.text
    client = _client(fake_daytona)
    assert list_managed(client, profile=profile, task=task) == []
    fake_daytona.build_next(4)
    with pytest.raises(BackendUnavailable, match="next call for this task attaches"):
        make_env(task, create_timeout=2, **image)
    [building] = list_managed(client, profile=profile, task=task)
    assert building.state == "pending_build"
    mark = fake_daytona.mark()
    env = make_env(task, create_timeout=60, **image)
    assert env.sandbox_id == building.id and env.exec("echo built").stdout == b"built\n"
    assert _statuses(fake_daytona, mark, "create") == [409]


def test_a_write_right_after_the_shell_started_is_kept(make_env: Any) -> None:
    """Bytes written to a stream's FIFO as soon as its start script printed ``started`` reach
    the shell. A FIFO whose every end is closed drops what it holds: when the start script
    returned before its background FIFO holder had opened ``in``, the first write (the
    session's init script) opened, filled and closed the FIFO alone and was lost, so the
    handshake then ran without ``__el_pre``/``__el_end`` (``ShellStartError``, seen under
    load in a flood test). In the sandbox, with no round trip between the two, 40 starts each
    followed at once by a write: every shell must echo its line."""
    from envlayer_daytona import stream

    env = make_env(f"fifo-{uuid.uuid4().hex[:8]}")
    loop = textwrap.dedent(
        """\
        lost=0; i=0
        while [ $i -lt 40 ]; do
          i=$((i + 1)); d=/tmp/.fifo-race/$i
          sh -c "$1" envlayer "$d" sh >/dev/null || exit 9
          printf 'echo kept\\n' 1<>"$d/in"
          n=0; while [ ! -s "$d/out" ] && [ $n -lt 200 ]; do sleep 0.01; n=$((n + 1)); done
          [ -s "$d/out" ] || lost=$((lost + 1))
          kill "$(cat "$d/holder")"
        done
        rm -rf /tmp/.fifo-race; echo "lost $lost of 40"
        """
    )
    answer = env._sandbox.process.exec(stream._sh(loop, stream._START), timeout=120)
    assert (answer.exit_code, answer.result.strip()) == (0, "lost 0 of 40")
