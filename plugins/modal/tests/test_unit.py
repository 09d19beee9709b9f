"""Unit tests of the Modal plugin's own logic: names, tags, options, the reaper's decision,
the one-shot wrapper, and the mapping of SDK errors. No server needed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from typing import Any

import pytest
from envlayer_modal import naming, reaper
from envlayer_modal import tags as T
from envlayer_modal.client import probe, translate
from envlayer_modal.oneshot import oneshot_argv
from envlayer_modal.options import ModalOptions

from envlayer.errors import BackendUnavailable
from envlayer.options import OptionError
from envlayer.sandbox import recorded_options
from envlayer.sandbox.idle_check import parse_idle_check
from envlayer.sandbox.tags import sanitize


@pytest.mark.parametrize(
    ("profile", "task"),
    [("default", "default"), ("p" * 200, "t" * 200), ("team/a b", "issue #7: ünïcode"), ("", ""), ("..", "--")],
)
def test_sandbox_names_are_valid_modal_names(profile: str, task: str) -> None:
    from modal._utils.name_utils import is_valid_object_name

    for name in (naming.sandbox_name(profile, task), naming.private_name(profile, task)):
        assert is_valid_object_name(name), name
        assert len(name) <= 63


def test_sandbox_names_are_deterministic_and_distinct() -> None:
    assert naming.sandbox_name("p", "t") == naming.sandbox_name("p", "t")
    assert naming.sandbox_name("a/b", "t") != naming.sandbox_name("a_b", "t")
    assert naming.private_name("p", "t") != naming.private_name("p", "t")


def test_create_tags_carry_identity_and_never_let_user_tags_override() -> None:
    opts = ModalOptions(tags={"team": "ml"})
    tags = T.create_tags(profile="team/alpha", task="t 1", options=opts, persist=False, owner="1-2-h", now=1000)
    assert tags == {
        "team": "ml",
        T.OWNER: "1-2-h",
        T.MANAGED: "1",
        T.TASK: sanitize("t 1"),
        T.PROFILE: sanitize("team/alpha"),
        T.FINGERPRINT: T.sandbox_fingerprint(opts),
        T.PERSIST: "0",
        T.CREATED_AT: "1000",
        T.IDLE_TIMEOUT: "900",
        T.CREATOR: T.creator_label(),
        T.OPTIONS: recorded_options.encode(recorded_options.record_of(opts, T.SHAPING_OPTIONS)),
    }
    assert json.loads(tags[T.OPTIONS])["tags"] == {"team": "ml"}
    assert T.selector(profile="team/alpha", task="t 1") == {
        T.MANAGED: "1",
        T.PROFILE: sanitize("team/alpha"),
        T.TASK: sanitize("t 1"),
    }
    assert T.created_at(tags) == 1000.0 and T.created_at({}) is None and T.created_at({T.CREATED_AT: "x"}) is None


def test_every_tag_the_backend_sets_is_documented_by_its_full_name() -> None:
    """docs/backends/modal.md once named the owner tag ``envlayer.sandbox.owner``."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "backends" / "modal.md").read_text()
    keys = {value for value in vars(T).values() if isinstance(value, str) and value.startswith(T.PREFIX)} - {T.PREFIX}
    assert {T.OWNER, T.MANAGED, T.IDLE_TIMEOUT} <= keys
    assert [key for key in sorted(keys) if not re.search(rf"`{re.escape(key)}[`=]", doc)] == []


def test_fingerprint_covers_creation_options_only() -> None:
    base = T.sandbox_fingerprint(ModalOptions())
    assert T.sandbox_fingerprint(ModalOptions(memory=512)) != base
    assert T.sandbox_fingerprint(ModalOptions(image="debian:12")) != base
    assert T.sandbox_fingerprint(ModalOptions(env={"A": "secret"}, timeout=5, shell="/bin/bash")) == base


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"app_name": "has space"}, "app_name"),
        ({"image": " "}, "image"),
        ({"cwd": "relative"}, "cwd"),
        ({"shell": "sh"}, "shell"),
        ({"cpu": 0}, "cpu"),
        ({"memory": -1}, "memory"),
        ({"sandbox_timeout": 0}, "sandbox_timeout"),
        ({"sandbox_timeout": 90_000}, "sandbox_timeout"),
        ({"idle_timeout": 0}, "idle_timeout"),
        ({"session_idle_exit": 0}, "session_idle_exit"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"secrets": [" "]}, "secrets"),
        ({"tags": {"envlayer.task": "x"}}, "tags"),
        ({"max_transfer_bytes": -1}, "max_transfer_bytes"),
    ],
)
def test_bad_options_name_their_key(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(OptionError) as info:
        ModalOptions(**kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


def test_idle_timeout_is_on_by_default_and_can_be_disabled() -> None:
    assert ModalOptions().idle_timeout and ModalOptions().idle_timeout < ModalOptions().sandbox_timeout
    assert ModalOptions().session_idle_exit < (ModalOptions().idle_timeout or 0)
    assert ModalOptions(idle_timeout=None).idle_timeout is None
    assert ModalOptions().workdir == "/workspace" and ModalOptions(cwd="/src").workdir == "/src"


@pytest.mark.parametrize(
    ("output", "created", "max_age", "reclaim"),
    [
        (b"1000 900 0\n", None, 50, True),
        (b"1000 900 0\n", None, 200, False),
        (b"1000 900 1\n", None, 0, False),
        (b"1000 - 0\n", 500.0, 400, True),
        (b"1000 - 0\n", None, 0, False),
        (b"", 0.0, 0, False),
        (b"garbage", 0.0, 0, False),
    ],
)
def test_reaper_decision(output: bytes, created: float | None, max_age: float, reclaim: bool) -> None:
    assert parse_idle_check(output, created, max_age) is reclaim


def test_reaper_idle_check_runs_in_a_posix_shell() -> None:
    out = subprocess.run(["sh", "-c", reaper.IDLE_CHECK], capture_output=True, timeout=30).stdout
    now, mtime, busy = out.decode().split()
    assert now.isdigit() and (mtime == "-" or mtime.isdigit()) and busy in ("0", "1")


def test_oneshot_wrapper_runs_argv_and_strings_in_cwd(tmp_path) -> None:
    argv = oneshot_argv("/bin/sh", ["printf", "%s|", "a b", "$HOME"], cwd=str(tmp_path), touch_lease=False)
    assert subprocess.run(argv, capture_output=True, timeout=30).stdout == b"a b|$HOME|"
    argv = oneshot_argv("/bin/sh", "pwd; exit 3", cwd=str(tmp_path), touch_lease=False)
    proc = subprocess.run(argv, capture_output=True, timeout=30)
    assert (proc.stdout.decode().strip(), proc.returncode) == (str(tmp_path), 3)
    argv = oneshot_argv("/bin/sh", "true", cwd=str(tmp_path / "missing"), touch_lease=False)
    proc = subprocess.run(argv, capture_output=True, timeout=30)
    assert proc.returncode == 126 and b"working directory does not exist" in proc.stderr


def test_a_staged_long_command_keeps_argv_quoting_stdin_and_cwd_and_removes_its_file(tmp_path) -> None:
    from envlayer_modal.oneshot import script_argv, script_of, too_long

    command = ["printf", "%s|", "a b", "it's", "$HOME", "x" * 70_000]
    assert too_long(oneshot_argv("/bin/sh", command, cwd="/", touch_lease=False))
    staged = tmp_path / "cmd"
    staged.write_bytes(script_of(command))
    argv = script_argv("/bin/sh", str(staged), cwd=str(tmp_path), touch_lease=False)
    assert not too_long(argv)
    out = subprocess.run(argv, capture_output=True, timeout=30).stdout
    assert out == b"a b|it's|$HOME|" + b"x" * 70_000 + b"|" and not staged.exists()
    staged.write_bytes(script_of("pwd; cat; exit 4"))
    proc = subprocess.run(argv, capture_output=True, input=b"in", timeout=30)
    assert (proc.stdout, proc.returncode) == (f"{tmp_path}\nin".encode(), 4)


def test_sdk_errors_map_to_backend_unavailable_with_hints() -> None:
    from modal import exception as E

    cases = [
        (E.AuthError("Token missing"), "modal token new"),
        (E.ResourceExhaustedError("quota"), "envlayer reap"),
        (E.RemoteError("Image build failed for x"), "`image` option"),
        (E.ConnectionError("boom"), "network"),
        (E.InvalidError("odd"), "retry"),
    ]
    for exc, hint in cases:
        mapped = translate(exc, "doing it")
        assert isinstance(mapped, BackendUnavailable) and hint in mapped.hint, (exc, mapped)
        assert "doing it" in mapped.message


def test_probe_reports_an_unreachable_api_at_once() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendUnavailable) as info:
        probe([f"http://127.0.0.1:{port}"], timeout=2)
    assert "MODAL_SERVER_URL" in info.value.hint


def test_the_creator_label_names_the_login_and_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "alice")
    alice = T.creator_label()
    monkeypatch.setenv("LOGNAME", "bob")
    bob = T.creator_label()
    assert alice.startswith("alice_") and bob.startswith("bob_")
    assert alice.split("_", 1)[1][:8] == bob.split("_", 1)[1][:8]  # the same host


FAKE_SLEEP = """#!{python}
import os, sys, time
with open({record!r}, "a") as out:
    out.write(sys.argv[1] + "\\n")
# wait (bounded) until the watched shell has exec'd and blocks on its stdin, so each look
# of the watchdog sees the same idle shell however fast the looks come
stat = open(f"/proc/{{os.getppid()}}/stat").read()
shell = stat.rsplit(")", 1)[1].split()[1]
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        started = b"envlayer-session" not in open(f"/proc/{{shell}}/cmdline", "rb").read()
        state = open(f"/proc/{{shell}}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        break
    if started and state == "S":
        break
    time.sleep(0.01)
"""


@pytest.mark.parametrize("idle_exit", [1, 2, 7])
def test_the_session_watchdog_looks_at_least_every_idle_exit_seconds(tmp_path, idle_exit: int) -> None:
    """The watchdog looks at the shell at least every ``idle_exit`` seconds (5 s at most),
    so an idle shell is killed within idle_exit plus two looks, not after two 5-s looks
    when idle_exit is shorter. Run on this machine with a ``sleep`` that only records its
    argument (and waits for the shell to be idle), so the count is exact and nothing waits."""
    import sys

    from envlayer_modal.stream import session_argv

    record = tmp_path / "slept"
    fake_sleep = tmp_path / "bin" / "sleep"
    fake_sleep.parent.mkdir()
    fake_sleep.write_text(FAKE_SLEEP.format(python=sys.executable, record=str(record)))
    fake_sleep.chmod(0o755)
    read_end, write_end = os.pipe()  # stdin that stays open and silent: an idle shell
    try:
        path = f"{fake_sleep.parent}:/usr/bin:/bin"
        argv = session_argv("/bin/sh", idle_exit, "s1", "note")
        shell = subprocess.Popen(argv, stdin=read_end, env={**os.environ, "PATH": path, "TMPDIR": str(tmp_path)})
        try:
            assert shell.wait(timeout=60) == -9  # killed by the watchdog
        finally:
            shell.kill()
    finally:
        os.close(read_end)
        os.close(write_end)
    slept = [int(line) for line in record.read_text().split()]
    assert max(slept) <= idle_exit, slept
    assert sum(slept) <= idle_exit + 2 * max(slept), f"killed after {slept} (idle_exit {idle_exit})"


class WatchedShell:
    """A session shell under the watchdog on this machine, its stdin a pipe the test
    writes, ``sleep`` replaced by :data:`FAKE_SLEEP` (each look recorded, none waiting)."""

    def __init__(self, tmp_path: Any, idle_exit: int) -> None:
        import sys

        from envlayer_modal.stream import session_argv

        self.record = tmp_path / "slept"
        self.note = tmp_path / ".envlayer-session-s1" / "note"
        self.note.parent.mkdir()
        fake_sleep = tmp_path / "bin" / "sleep"
        fake_sleep.parent.mkdir()
        fake_sleep.write_text(FAKE_SLEEP.format(python=sys.executable, record=str(self.record)))
        fake_sleep.chmod(0o755)
        read_end, self.stdin = os.pipe()
        env = {**os.environ, "PATH": f"{fake_sleep.parent}:/usr/bin:/bin", "TMPDIR": str(tmp_path)}
        self.shell = subprocess.Popen(
            session_argv("/bin/sh", idle_exit, "s1", "note"), stdin=read_end, stdout=subprocess.DEVNULL, env=env
        )
        os.close(read_end)

    def send(self, script: str) -> None:
        os.write(self.stdin, script.encode())

    def looks(self) -> int:
        return len(self.record.read_text().split()) if self.record.exists() else 0

    def wait_for_looks(self, count: int) -> None:
        deadline = time.monotonic() + 60
        while self.looks() < count and self.shell.poll() is None:
            assert time.monotonic() < deadline, f"{self.looks()} looks"
            time.sleep(0.01)

    def close(self) -> None:
        self.shell.kill()
        self.shell.wait()
        os.close(self.stdin)


def test_the_watchdog_ends_a_shell_waiting_between_commands_and_leaves_its_note(tmp_path: Any) -> None:
    """A shell that ran its first script (fd 7 open, as the session's init leaves it) and
    waits for its next command is killed, and the note says it ended between commands."""
    watched = WatchedShell(tmp_path, 1)
    try:
        watched.send("exec 7>&1\n")
        assert watched.shell.wait(timeout=60) == -9
        assert watched.note.exists()
    finally:
        watched.close()


def test_the_watchdog_ends_a_shell_that_never_got_its_first_script_without_a_note(tmp_path: Any) -> None:
    watched = WatchedShell(tmp_path, 1)
    try:
        assert watched.shell.wait(timeout=60) == -9
        assert not watched.note.exists()
    finally:
        watched.close()


def test_the_watchdog_spares_a_command_blocked_without_children(tmp_path: Any) -> None:
    """A command that neither reads, nor has children, nor ends (a builtin blocked on a
    FIFO) is not idleness: the shell stays through many looks (before, the watchdog killed
    it within idle_exit plus two looks), and is ended only once the command returned and
    the shell waits for the next one. (Its first look may come before or during the command:
    on a loaded machine it came only during it, which the watchdog must not take for a shell
    that never started.)"""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    watched = WatchedShell(tmp_path, 1)
    try:
        # as the session runs a command: stdin /dev/null, fds 7 and 8 closed
        watched.send(f"exec 7>&1\n{{ read x < {fifo}; }} </dev/null 7>&-\n")
        deadline = time.monotonic() + 60
        while os.readlink(f"/proc/{watched.shell.pid}/fd/0") != "/dev/null":  # the command runs
            assert time.monotonic() < deadline and watched.shell.poll() is None, "the shell ended"
            time.sleep(0.005)
        looks = watched.looks()
        watched.wait_for_looks(looks + 8)
        assert watched.shell.poll() is None and not watched.note.exists()
        os.close(os.open(fifo, os.O_WRONLY))  # the command's read gets end of file and returns
        assert watched.shell.wait(timeout=60) == -9
        assert watched.note.exists()
    finally:
        watched.close()


class _StalledStdin:
    """A process whose stdin write never returns (a router that stopped taking input)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sends: list[bytes] = []

    def send(self, data: bytes, *, eof: bool = False) -> None:
        self.sends.append(data)
        self.release.wait()


def test_a_session_write_that_stalls_ends_at_its_deadline_and_sends_nothing_more() -> None:
    from envlayer_modal.stream import ExecStream

    from envlayer.execution.streams import WriteTimedOut

    process = _StalledStdin()
    stream = ExecStream(process)  # type: ignore[arg-type]
    try:
        with pytest.raises(WriteTimedOut):
            stream.write(b"raw input", time.monotonic() + 0.2)
        stream.close()
        assert process.sends == [b"raw input"], "no EOF may follow a write that is still under way"
    finally:
        process.release.set()
