"""A named local task owns its options (issue 39): the CLI records them in a file under
``XDG_STATE_HOME``, later calls on the task take them as defaults from any directory, a
differing option changes them in place with a note (nothing on this machine is removed),
credential values are never written, and the default task keeps no record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envlayer.local.tasks import record_path
from tests.core.cli_run import own_brokers, run


@pytest.mark.parametrize("broker", ["1", "0"])
def test_a_named_task_keeps_its_options_across_calls_and_directories(tmp_path: Path, broker: str) -> None:
    first, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    first.mkdir()
    elsewhere.mkdir()
    with own_brokers(tmp_path, ENVLAYER_BROKER=broker, XDG_STATE_HOME=str(tmp_path / "state")) as env:
        made = run("exec", "--task", "t", "-o", f"cwd={first}", "echo precious > state", cwd=elsewhere, env=env)
        assert made.returncode == 0, made.stderr
        again = run("exec", "--task", "t", "pwd; cat state", cwd=elsewhere, env=env)
        assert (again.returncode, again.stdout) == (0, f"{first}\nprecious\n"), again.stderr
        moved = run("exec", "--task", "t", "-o", f"cwd={elsewhere}", "pwd", cwd=first, env=env)
        assert (moved.returncode, moved.stdout) == (0, f"{elsewhere}\n"), moved.stderr
        assert f'cwd: "{first}" -> "{elsewhere}"' in moved.stderr and "in place" in moved.stderr
        after = run("exec", "--task", "t", "pwd", cwd=first, env=env)
        assert (after.returncode, after.stdout, after.stderr) == (0, f"{elsewhere}\n", "")
    assert (first / "state").read_text() == "precious\n"


def test_the_record_withholds_credentials_and_the_default_task_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    env = {"ENVLAYER_BROKER": "0", "XDG_STATE_HOME": str(state)}
    options = 'env={"API_TOKEN": "s3cret-value", "MODE": "fast"}'
    out = run("exec", "--task", "t", "-o", options, "echo $MODE", cwd=tmp_path, env=env)
    assert (out.returncode, out.stdout) == (0, "fast\n"), out.stderr
    text = Path(record_path("default", "t")).read_text()
    assert json.loads(text)["env"] == {"API_TOKEN": None, "MODE": "fast"} and "s3cret-value" not in text
    plain = run("exec", "--task", "t", "echo $MODE; echo ${API_TOKEN:-withheld}", cwd=tmp_path, env=env)
    # MODE's value comes back from the record; the credential's cannot, and the note says so
    assert (plain.returncode, plain.stdout) == (0, "fast\nwithheld\n"), plain.stderr
    assert 'env: ["API_TOKEN", "MODE"] -> ["MODE"]' in plain.stderr
    assert run("exec", "-o", f"cwd={tmp_path}", "true", env=env).returncode == 0
    assert not Path(record_path("default", "default")).exists()


@pytest.mark.parametrize(
    ("option", "failed"),
    [("cwd={tmp}/no-such-dir", 126), ("shell=/bin/no-such-shell", 125)],
)
def test_options_this_machine_cannot_use_are_not_recorded(tmp_path: Path, option: str, failed: int) -> None:
    """A first call with a missing directory or shell failed, as it must, but its options
    became the task's record, and every later call on the task failed the same way
    (found by the before/after run of issue 39)."""
    env = {"ENVLAYER_BROKER": "0", "XDG_STATE_HOME": str(tmp_path / "state")}
    bad = run("exec", "--task", "t", "-o", option.format(tmp=tmp_path), "true", cwd=tmp_path, env=env)
    assert bad.returncode == failed, bad.stderr
    plain = run("exec", "--task", "t", "pwd", cwd=tmp_path, env=env)
    assert (plain.returncode, plain.stdout) == (0, f"{tmp_path}\n"), plain.stderr
