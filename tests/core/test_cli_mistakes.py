"""Typical mistakes on the `envlayer` command line, each answered once, naming what the
user wrote and what to do, before anything runs (through the installed script)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import own_brokers, run


def test_doctor_reports_an_unknown_backend_once(workdir: Path) -> None:
    out = run("doctor", "--backend", "nosuch", cwd=workdir)
    assert out.returncode == 1
    assert out.stdout.count("FAIL nosuch") == 1 and out.stdout.count("fix: ") == 1, out.stdout
    (entry,) = json.loads(run("doctor", "--backend", "nosuch", "--json", cwd=workdir).stdout)
    assert entry["error"]["type"] == "BackendNotFound"


@pytest.mark.parametrize("command", [["exec", "--no-broker"], ["exec"], ["ls"], ["config"]], ids=" ".join)
def test_a_bad_flag_value_names_the_flag(workdir: Path, command: list[str]) -> None:
    args = ["true"] if command[0] == "exec" else []
    out = run(*command, "--profile", "a b", *args, cwd=workdir)
    assert out.returncode in (1, 125)
    assert "--profile: invalid profile name 'a b'" in out.stderr and "argument" not in out.stderr, out.stderr
    if command != ["ls"]:  # a sweep names the backend it could not load: "nosuch: error: ..."
        out = run(*command, "--backend", "nosuch", *args, cwd=workdir)
        assert "--backend: unknown backend 'nosuch'" in out.stderr, out.stderr


def test_config_shows_a_flag_as_the_source(workdir: Path) -> None:
    data = json.loads(run("config", "--json", "--profile", "p1", cwd=workdir).stdout)
    assert data["settings"]["profile"] == {"value": "p1", "source": "--profile"}


def test_an_unknown_exec_option_shows_execs_usage(workdir: Path) -> None:
    out = run("exec", "--foo", "touch", "ran", cwd=workdir)
    assert out.returncode == 2
    assert out.stderr.startswith("usage: envlayer exec ") and "unrecognized arguments: --foo" in out.stderr
    assert not (workdir / "ran").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["completion", "bash", "--json"],
        ["completion", "bash", "-v"],
        ["completion", "bash", "--backend", "local"],
        ["broker", "status", "-o", "foo=bar"],
        ["broker", "status", "--profile", "p"],
        ["backends", "--backend", "local"],
        ["backends", "-v"],
        ["doctor", "-v"],
        ["config", "--verbose"],
        ["exec", "-v", "true"],
    ],
    ids=" ".join,
)
def test_a_shared_flag_a_command_ignores_is_refused(workdir: Path, args: list[str]) -> None:
    out = run(*args, cwd=workdir)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.startswith(f"usage: envlayer {args[0]} ") and "unrecognized arguments" in out.stderr


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "-inf"])
def test_reap_refuses_a_max_age_that_is_not_a_finite_positive_number(workdir: Path, value: str) -> None:
    out = run("reap", "--backend", "local", f"--max-age={value}", cwd=workdir)
    assert out.returncode == 2 and out.stdout == ""
    assert "usage: envlayer reap " in out.stderr and "--max-age" in out.stderr and value in out.stderr


@pytest.mark.parametrize("broker", ["1", "0"])
def test_exec_rm_on_local_says_nothing_about_force_remove(workdir: Path, broker: str) -> None:
    """local keeps nothing after cleanup (it declares no persist_across_processes), so
    its plain cleanup is a complete removal: no note that it "may keep the sandbox"."""
    with own_brokers(workdir, ENVLAYER_BROKER=broker) as env:
        out = run("exec", "--rm", "echo hi", cwd=workdir, env=env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "hi\n", "")


@pytest.mark.parametrize("words", [["nosuchcmd"], ["nosuchcmd", "arg"]], ids=" ".join)
@pytest.mark.parametrize("broker", ["1", "0"])
def test_a_missing_command_reads_like_a_plain_shells_message(workdir: Path, broker: str, words: list[str]) -> None:
    with own_brokers(workdir, ENVLAYER_BROKER=broker) as env:
        out = run("exec", *words, cwd=workdir, env=env)
    assert out.returncode == 127
    assert out.stderr.endswith(": 1: nosuchcmd: not found\n") and "eval" not in out.stderr, out.stderr
