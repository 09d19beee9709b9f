"""Unit tests of the Daytona plugin's own logic: options, identity, the reaper's rule, the
shell protocol (run in this host's real ``sh``), and that listing backends imports no SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from envlayer_daytona import identity, script, sweep
from envlayer_daytona.options import DaytonaOptions

from envlayer.config import load_settings
from envlayer.errors import ConfigError
from envlayer.options import OptionError


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"image": "a", "snapshot": "b"}, "image"),
        ({"snapshot": " "}, "snapshot"),
        ({"api_url": "ftp://x"}, "api_url"),
        ({"cwd": "relative"}, "cwd"),
        ({"cpu": 2}, "cpu"),
        ({"image": "a", "memory_gib": -1}, "memory_gib"),
        ({"auto_stop_interval": -1}, "auto_stop_interval"),
        ({"auto_delete_interval": -5}, "auto_delete_interval"),
        ({"activity_interval": 0}, "activity_interval"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"labels": {"envlayer.task": "x"}}, "labels"),
    ],
)
def test_bad_options_name_their_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(OptionError) as info:
        DaytonaOptions(**kwargs)
    assert info.value.key == key


def test_defaults_keep_auto_stop_on_and_private_sandboxes_auto_delete() -> None:
    opts = DaytonaOptions()
    assert opts.auto_stop_interval == 15 and opts.effective_auto_delete is None
    assert DaytonaOptions(persist_across_processes=False).effective_auto_delete == 0
    assert DaytonaOptions(persist_across_processes=False, auto_delete_interval=30).effective_auto_delete == 30


def test_options_from_environment_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVLAYER_DAYTONA_SNAPSHOT", "my-snap")
    monkeypatch.setenv("ENVLAYER_DAYTONA_AUTO_STOP_INTERVAL", "30")
    monkeypatch.setenv("ENVLAYER_DAYTONA_LABELS", '{"team": "a"}')
    opts = load_settings(backend="daytona").options_for("daytona", DaytonaOptions)
    assert (opts.snapshot, opts.auto_stop_interval, opts.labels) == ("my-snap", 30, {"team": "a"})
    monkeypatch.setenv("ENVLAYER_DAYTONA_AUTO_STOP_INTERVAL", "soon")
    with pytest.raises(ConfigError, match="AUTO_STOP_INTERVAL"):
        load_settings(backend="daytona").options_for("daytona", DaytonaOptions)


def test_names_are_deterministic_distinct_and_valid() -> None:
    a = identity.sandbox_name("prof", "task/1")
    assert a == identity.sandbox_name("prof", "task/1")
    assert a != identity.sandbox_name("prof", "task_1")  # same slug, different pair
    assert a.startswith("envlayer-prof-task_1-") and len(a) <= 80
    private = identity.private_name("prof", "task/1")
    assert private.startswith(a + "-p") and private != identity.private_name("prof", "task/1")


def test_labels_keep_values_exact_and_user_labels_cannot_override() -> None:
    labels = identity.managed_labels(
        profile="team/alpha: x", task="t 1", fingerprint_value="v1-x", persist=False, extra={"envlayer.task": "evil"}
    )
    assert labels[identity.TASK] == "t 1" and labels[identity.PROFILE] == "team/alpha: x"
    assert labels[identity.PERSIST] == "0" and identity.parse_time(labels[identity.CREATED_AT]) is not None
    assert identity.selector(profile="p", task="t") == {
        identity.MANAGED: "1",
        identity.PROFILE: "p",
        identity.TASK: "t",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", 1767323045.0),
        ("2026-01-02T03:04:05.123456789Z", 1767323045.123456),
        ("2026-01-02T04:04:05+01:00", 1767323045.0),
        ("", None),
        ("yesterday", None),
        (None, None),
    ],
)
def test_parse_time(text: Any, expected: float | None) -> None:
    got = identity.parse_time(text)
    assert got == pytest.approx(expected) if expected is not None else got is None


def _sb(state: str, labels: dict[str, str], updated: str | None = None) -> Any:
    return SimpleNamespace(state=state, labels=labels, updated_at=updated, last_activity_at=None)


def test_reaper_rule() -> None:
    mine = {identity.MANAGED: "1", identity.PROFILE: "p", identity.CREATED_AT: "2026-01-01T00:00:00Z"}
    now = identity.parse_time("2026-01-01T01:00:00Z") or 0.0
    assert sweep.is_reapable(_sb("stopped", mine), profile="p", max_age=60, now=now)
    assert sweep.is_reapable(_sb("archived", mine), profile="p", max_age=60, now=now)
    assert not sweep.is_reapable(_sb("started", mine), profile="p", max_age=60, now=now)
    assert not sweep.is_reapable(_sb("stopped", mine), profile="other", max_age=60, now=now)
    assert not sweep.is_reapable(_sb("stopped", mine), profile="p", max_age=7200, now=now)
    recent = _sb("stopped", mine, updated="2026-01-01T00:59:30Z")
    assert not sweep.is_reapable(recent, profile="p", max_age=60, now=now)
    unmanaged = {k: v for k, v in mine.items() if k != identity.MANAGED}
    assert not sweep.is_reapable(_sb("stopped", unmanaged), profile="p", max_age=60, now=now)
    undated = {identity.MANAGED: "1", identity.PROFILE: "p"}
    assert not sweep.is_reapable(_sb("stopped", undated), profile="p", max_age=60, now=now)


# --- the shell protocol, run by this host's sh ------------------------------------------


class LocalSession:
    """A local ``sh`` fed session commands on stdin, standing in for the daemon's session."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("{ " + text + "\n} >/dev/null 2>&1\n")
        self.proc.stdin.flush()

    def setup(self, env: dict[str, str], start: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(script.session_setup(env, start, True) + "\n")
        self.proc.stdin.flush()
        self.pid = int(self.proc.stdout.readline())
        self.cwd = self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def local_session(tmp_path: Any) -> Iterator[LocalSession]:
    session = LocalSession()
    session.setup({"FROM_SETUP": "it's set"}, str(tmp_path / "work"))
    yield session
    session.close()


def _poll_until_done(exec_id: str, pid: int) -> tuple[script.Poll, bytes, bytes]:
    out = err = b""
    for _ in range(200):
        text = subprocess.run(
            [
                "sh",
                "-c",
                script.poll_script(
                    exec_id, out_offset=len(out), err_offset=len(err), wait=1.0, shell_pid=pid, live=False, final=False
                ),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        poll = script.parse_poll(text)
        out, err = out + poll.out, err + poll.err
        if poll.exit_code is not None and poll.done:
            return poll, out, err
    raise AssertionError("the command never finished")


def test_protocol_binary_output_exit_code_and_persistence(local_session: LocalSession, tmp_path: Any) -> None:
    assert local_session.cwd == str(tmp_path / "work")
    first = uuid.uuid4().hex
    local_session.send(
        script.command_script(
            "printf '\\000\\377x'; echo e >&2; cd /tmp; export KEPT=1; printf %s \"$FROM_SETUP\"; (exit 3)",
            exec_id=first,
            isolated=False,
            cwd=None,
            env=None,
            stdin_path=None,
        )
    )
    poll, out, err = _poll_until_done(first, local_session.pid)
    assert (poll.exit_code, out, err, poll.pwd) == (3, b"\x00\xffxit's set", b"e\n", "/tmp")
    assert not [n for n in os.listdir(script.SPOOL) if n.startswith(first)]
    second = uuid.uuid4().hex
    local_session.send(
        script.command_script(
            ["printf", "%s|%s|%s", "$KEPT", "${ONCE}"],
            exec_id=second,
            isolated=False,
            cwd=None,
            env=None,
            stdin_path=None,
        )
    )
    _, out, _ = _poll_until_done(second, local_session.pid)
    assert out == b"$KEPT|${ONCE}|"  # argv words are not interpreted
    third = uuid.uuid4().hex
    local_session.send(
        script.command_script(
            'pwd; printf "%s %s" "$KEPT" "$ONCE"',
            exec_id=third,
            isolated=False,
            cwd="/",
            env={"ONCE": "a b'c"},
            stdin_path=None,
        )
    )
    _, out, _ = _poll_until_done(third, local_session.pid)
    assert out == b"/\n1 a b'c"


def test_protocol_exit_ends_the_shell_but_keeps_the_status(local_session: LocalSession) -> None:
    exec_id = uuid.uuid4().hex
    local_session.send(
        script.command_script("echo bye; exit 42", exec_id=exec_id, isolated=False, cwd=None, env=None, stdin_path=None)
    )
    poll, out, _ = _poll_until_done(exec_id, local_session.pid)
    assert (poll.exit_code, out, poll.shell_alive) == (42, b"bye\n", False)


def test_parse_poll_rejects_a_cut_answer() -> None:
    with pytest.raises(ValueError, match="incomplete"):
        script.parse_poll("@state 1 -\n@out\n 41")
    poll = script.parse_poll("@state 1 -\n@out\n 41 42\n 43\n@err\n@end\n")
    assert (poll.exit_code, poll.out, poll.err, poll.done, poll.shell_alive) == (None, b"ABC", b"", False, True)


def test_kill_script_command_is_one_quoted_sh_call() -> None:
    text = script.kill_script("abc123", 77)
    assert text.startswith("sh -c ") and "envlayer-kill" in text and " abc123 77 1 " in text


# --- import discipline -------------------------------------------------------------------


def test_listing_backends_and_loading_options_import_no_sdk() -> None:
    code = (
        "import sys\n"
        "from envlayer.registry import list_backends\n"
        "names = [b.name for b in list_backends()]\n"
        "assert 'daytona' in names, names\n"
        "import envlayer_daytona.backend, envlayer_daytona.options\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('daytona', 'daytona_api_client', 'daytona_toolbox_api_client', 'httpx', 'aiohttp', 'pydantic')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_help_and_backends_import_no_sdk() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from envlayer.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    main(['backends', '--json'])\n"
        "print(json.dumps(['daytona' in sys.modules, buf.getvalue()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True)
    imported, listing = json.loads(out.stdout)
    assert not imported and "daytona" in listing
