"""Unit tests of the Daytona plugin's own logic: options, identity, the reaper's rule, the
shell protocol (run in this host's real ``sh``), and that listing backends imports no SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from envlayer_daytona import identity, stream, sweep
from envlayer_daytona.options import DaytonaOptions

from envlayer.config import load_settings
from envlayer.errors import ConfigError
from envlayer.options import OptionError
from envlayer.testing.fixtures import run_in_new_interpreter


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


# --- the stream's poll answers ------------------------------------------------------------


def test_parse_poll() -> None:
    assert stream.parse_poll("@state -\n@out\n 41 42\n 43\n@err\n@end\n") == ("-", b"ABC", b"")
    assert stream.parse_poll("@state 3\n@out\n@err\n 00 ff\n@end\n") == ("3", b"", b"\x00\xff")
    with pytest.raises(ValueError, match="incomplete"):
        stream.parse_poll("@state -\n@out\n 41")
    with pytest.raises(ValueError, match="incomplete"):
        stream.parse_poll("OCI runtime exec failed\n")


# --- import discipline -------------------------------------------------------------------


def test_listing_backends_and_loading_options_import_no_sdk() -> None:
    code = (
        "import sys\n"
        "from envlayer.discovery.backend_registry import list_backends\n"
        "names = [b.name for b in list_backends()]\n"
        "assert 'daytona' in names, names\n"
        "import envlayer_daytona.backend, envlayer_daytona.options\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('daytona', 'daytona_api_client', 'daytona_toolbox_api_client', 'httpx', 'aiohttp', 'pydantic')))\n"
    )
    assert run_in_new_interpreter(code).strip() == "[]"


def test_cli_help_and_backends_import_no_sdk() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from envlayer.cli.app import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    main(['backends', '--json'])\n"
        "print(json.dumps(['daytona' in sys.modules, buf.getvalue()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True)
    imported, listing = json.loads(out.stdout)
    assert not imported and "daytona" in listing


def test_every_sdk_state_has_an_action() -> None:
    """Each state of the SDK's SandboxState enum is handled on purpose in one table."""
    from daytona_api_client.models.sandbox_state import SandboxState
    from envlayer_daytona.sandbox import STATE_ACTIONS

    missing = [state.value for state in SandboxState if state.value not in STATE_ACTIONS]
    assert missing == [], f"add these states to envlayer_daytona.sandbox.STATE_ACTIONS: {missing}"
    assert set(STATE_ACTIONS) == {state.value for state in SandboxState}, "a state the SDK does not list"


def test_every_process_exec_carries_a_timeout() -> None:
    """Without ``timeout`` the SDK's ``process.exec`` sends its request with no HTTP timeout
    (``daytona/_sync/process.py``: ``http_timeout(timeout + 5 if timeout else None)``), so a
    stalled toolbox would hang the caller: every call in the plugin passes one."""
    import ast
    from pathlib import Path

    import envlayer_daytona

    untimed = []
    for path in sorted(Path(envlayer_daytona.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None)
            if (
                isinstance(node, ast.Call)
                and isinstance(func, ast.Attribute)
                and func.attr == "exec"
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "process"
                and not any(k.arg == "timeout" for k in node.keywords)
            ):
                untimed.append(f"{path.name}:{node.lineno}")
    assert untimed == []


@pytest.mark.parametrize("task", ["www.example.com", "WWW.x", "http://a/b", "see javascript:x", "data:1", "a<b>"])
def test_names_pass_the_servers_display_string_check(task: str) -> None:
    """The API rejects a sandbox name matching its IsSafeDisplayString patterns
    (apps/api/src/common/validators/is-safe-string.validator.ts, copied here): no task or
    profile, however written, makes such a name."""
    import re

    from envlayer_daytona.identity import private_name, sandbox_name

    url = re.compile(
        r"https?://|ftps?://|sftp://|ssh://|wss?://|file://|ldaps?://|javascript:|data:|mailto:|tel:|www\.", re.I
    )
    html = re.compile(r"<[a-zA-Z/][^>]*>?")
    for name in (sandbox_name(task, task), private_name("p", task), sandbox_name("www.p", "t")):
        assert not url.search(name) and not html.search(name), name


def test_a_process_that_only_imported_the_backend_exits_without_noise() -> None:
    """The exit hook stops SDK clients only when the client module was loaded: importing it
    during interpreter shutdown failed ("can't register atexit after shutdown")."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import envlayer_daytona.stream"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, "")
