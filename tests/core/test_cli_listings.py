"""Listings a person can act on (the local backend's snapshots, the real CLI): ids in
full as `snapshots rm` takes them, `-q` for ids only, `--format json` like `--json`;
`snapshots rm` takes the NAME `snapshots ls` shows, and says so when nothing was removed."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run


def _local(workdir: Path, *args: str) -> list[str]:
    (workdir / "work").mkdir(exist_ok=True)
    return [*args, "--backend", "local", "-o", f"snapshot_dir={workdir / 'store'}", "-o", f"cwd={workdir / 'work'}"]


def test_snapshots_are_listed_in_full_and_removed_by_name(workdir: Path) -> None:
    taken = run(*_local(workdir, "snapshot", "src", "--name", "deps-installed"), cwd=workdir)
    assert taken.returncode == 0, taken.stderr
    snapshot_id = taken.stdout.strip()
    assert len(snapshot_id) > 12  # the id that was cut to 12 characters in the table
    table = run(*_local(workdir, "snapshots", "ls"), cwd=workdir)
    assert snapshot_id in table.stdout.split()
    quiet = run(*_local(workdir, "snapshots", "ls", "-q"), cwd=workdir)
    assert quiet.stdout.split() == [snapshot_id]
    as_format = json.loads(run(*_local(workdir, "snapshots", "ls", "--format", "json"), cwd=workdir).stdout)
    assert [s["id"] for o in as_format for s in o["sandboxes"]] == [snapshot_id]
    removed = run(*_local(workdir, "snapshots", "rm", "deps-installed", "--json"), cwd=workdir)
    assert removed.returncode == 0, removed.stderr
    assert [s["id"] for o in json.loads(removed.stdout) for s in o["sandboxes"]] == [snapshot_id]
    again = run(*_local(workdir, "snapshots", "rm", "deps-installed"), cwd=workdir)
    assert again.returncode == 1
    assert "no snapshot with id or name 'deps-installed'" in again.stderr


def test_rm_needs_tasks_or_all(workdir: Path) -> None:
    neither = run("rm", "--backend", "local", cwd=workdir)
    assert neither.returncode == 1 and "name the tasks to remove, or --all" in neither.stderr
    both = run("rm", "t1", "--all", "--backend", "local", cwd=workdir)
    assert both.returncode == 1 and "not both" in both.stderr


def test_config_prints_toml_that_reads_back_equal(workdir: Path) -> None:
    import tomllib

    env = {"ENVLAYER_LOCAL_ENV": '{"A": "x\\"y"}', "ENVLAYER_LOCAL_TIMEOUT": "5"}
    as_json = json.loads(run("config", "--json", "--backend", "local", cwd=workdir, env=env).stdout)
    text = run("config", "--backend", "local", cwd=workdir, env=env)
    assert text.returncode == 0, text.stderr
    parsed = tomllib.loads(text.stdout)
    options = parsed.pop("backends")["local"]
    assert parsed == {k: v["value"] for k, v in as_json["settings"].items() if v["value"] is not None}
    assert options == {k: v["value"] for k, v in as_json["options"].items() if v["value"] is not None}
    assert options["timeout"] == 5.0 and options["inherit_env"] is True
