"""A task owns its Docker container (issue 39): the options it was created with are
recorded in its ``envlayer.options`` label and are the defaults of every later CLI call on
the task; a call whose options differ is refused (exit 125, naming each option old -> new)
unless ``--replace``; the Python API replaces by default but says so in the first result's
notice and the log, and raises under ``on_fingerprint_mismatch = "error"``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from envlayer.sandbox.recorded_options import OptionChange, SandboxOptionsDiffer
from envlayer.testing.secrets import ENVLAYER_SCRIPT

DEBIAN = "envlayer-test:debian"
BUSYBOX = "envlayer-test:busybox"

Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def task_cli(docker_api: Any, profile: str) -> Iterator[tuple[Run, str, dict[str, str]]]:
    """``run(COMMAND, *args)``: ``envlayer COMMAND --backend docker *args`` in a profile of
    its own with no ``ENVLAYER_*`` variable (no image set: only ``-o`` and the task's record
    choose it), the task id to use and that environment; the task's container, workspace and snapshots are
    removed afterwards."""
    prof = f"{profile}-own-{uuid.uuid4().hex[:6]}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ["ENVLAYER_PROFILE"] = prof

    def run(command: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [ENVLAYER_SCRIPT, command, "--backend", "docker", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=environ, input=stdin)

    yield run, "t", environ
    listed = json.loads(run("ls", "--json").stdout)
    for task in {"t"} | {s["task"] for outcome in listed for s in outcome["sandboxes"]}:
        run("rm", task, "--force", "--purge")
    for image in docker_api.images(filters={"label": f"envlayer.profile={prof}"}) or []:
        docker_api.remove_image(image["Id"], force=True)


def _container_ids(run: Run) -> list[str]:
    listed = json.loads(run("ls", "--json").stdout)
    return [s["id"] for outcome in listed for s in outcome["sandboxes"] if s["status"] not in ("data",)]


@pytest.mark.parametrize("broker", ["broker", "no-broker"])
def test_a_differing_option_is_refused_and_the_recorded_ones_are_the_defaults(
    task_cli: tuple[Run, str, dict[str, str]], docker_api: Any, broker: str
) -> None:
    run, task, _ = task_cli
    via = ["--no-broker"] if broker == "no-broker" else []
    made = run("exec", *via, "--task", task, "-o", f"image={DEBIAN}", "echo precious > /opt/state")
    assert made.returncode == 0, made.stderr
    first = _container_ids(run)
    assert len(first) == 1

    refused = run("exec", *via, "--task", task, "-o", f"image={DEBIAN}", "-o", "memory_mb=512", "cat /opt/state")
    assert refused.returncode == 125
    assert "memory_mb: 0 -> 512" in refused.stderr and "--replace" in refused.stderr
    assert refused.stdout == ""

    plain = run("exec", *via, "--task", task, "cat /opt/state")  # the recorded image, without -o
    assert (plain.returncode, plain.stdout) == (0, "precious\n"), plain.stderr
    snapped = run("snapshot", task)
    assert snapped.returncode == 0, snapped.stderr
    other = run("snapshot", "-o", f"image={BUSYBOX}", task)
    assert other.returncode == 125
    assert f'image: "{DEBIAN}" -> "{BUSYBOX}"' in other.stderr
    assert _container_ids(run) == first

    replaced = run("exec", *via, "--task", task, "-o", "memory_mb=512", "--replace", "test ! -e /opt/state")
    assert replaced.returncode == 0, replaced.stderr
    assert "was replaced" in replaced.stderr and "memory_mb: 0 -> 512" in replaced.stderr
    (second,) = _container_ids(run)
    assert second != first[0]
    labels = docker_api.inspect_container(second)["Config"]["Labels"]
    assert json.loads(labels["envlayer.options"])["image"] == DEBIAN  # kept from the record
    again = run("exec", *via, "--task", task, "echo ok")  # the new record is the default now
    assert (again.returncode, again.stdout) == (0, "ok\n"), again.stderr
    assert _container_ids(run) == [second]


def test_a_typo_destroys_nothing(task_cli: tuple[Run, str, dict[str, str]], docker_api: Any) -> None:
    run, task, _ = task_cli
    assert run("exec", "--task", task, "-o", f"image={DEBIAN}", "echo precious > /opt/state").returncode == 0
    before = _container_ids(run)
    misspelt_key = run("exec", "--task", task, "-o", "memroy_mb=512", "true")
    assert misspelt_key.returncode == 125 and "memory_mb" in misspelt_key.stderr  # "did you mean"
    misspelt_value = run("exec", "--task", task, "-o", "image=envlayer-test:debain", "true")
    assert misspelt_value.returncode == 125
    assert 'image: "envlayer-test:debian" -> "envlayer-test:debain"' in misspelt_value.stderr
    kept = run("exec", "--task", task, "cat /opt/state")
    assert (kept.returncode, kept.stdout) == (0, "precious\n"), kept.stderr
    assert _container_ids(run) == before


def test_shell_needs_only_the_task_and_refuses_a_differing_option(
    task_cli: tuple[Run, str, dict[str, str]], docker_api: Any, tmp_path: Any
) -> None:
    from tests.core.tmux_terminal import terminal

    run, task, environ = task_cli
    assert run("exec", "--task", task, "-o", f"image={DEBIAN}", "echo precious > /opt/state").returncode == 0
    before = _container_ids(run)
    shell = [ENVLAYER_SCRIPT, "shell", "--backend", "docker", "--task", task]
    with terminal(shell, str(tmp_path), environ) as t:
        t.wait_for_prompt(r"^#")  # the debian image's sh prompt
        t.send("cat /opt/state; exit 3")
        t.wait_for(r"^precious$")
        t.wait_for(r"^EXIT=3$")
    with terminal([*shell, "-o", f"image={BUSYBOX}"], str(tmp_path), environ) as t:
        t.wait_for(r"different options: image")
        t.wait_for(r"^EXIT=125$")
    assert _container_ids(run) == before


def test_a_fork_keeps_the_tasks_options(task_cli: tuple[Run, str, dict[str, str]]) -> None:
    run, task, _ = task_cli
    assert run("exec", "--task", task, "-o", f"image={DEBIAN}", "echo precious > /opt/state").returncode == 0
    forked = run("fork", task, f"{task}-fork")
    assert forked.returncode == 0, forked.stderr
    fork = run("exec", "--task", f"{task}-fork", "cat /opt/state")  # the fork records the task's options
    assert (fork.returncode, fork.stdout) == (0, "precious\n"), fork.stderr


def test_cp_and_exec_stdin_need_only_the_task(
    task_cli: tuple[Run, str, dict[str, str]], docker_api: Any, tmp_path: Any
) -> None:
    run, task, _ = task_cli
    assert run("exec", "--task", task, "-o", f"image={DEBIAN}", "echo precious > /opt/state").returncode == 0
    copied = run("cp", f"{task}:/opt/state", str(tmp_path / "state"))
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / "state").read_text() == "precious\n"
    piped = run("exec", "--task", task, "-i", "cat > /opt/piped; cat /opt/piped", stdin="from stdin\n")
    assert (piped.returncode, piped.stdout) == (0, "from stdin\n"), piped.stderr


def test_the_api_replaces_with_a_notice_and_a_warning(make_env: Any, caplog: pytest.LogCaptureFixture) -> None:
    task = f"api-{uuid.uuid4().hex[:6]}"
    first = make_env(task=task)
    first.exec("echo precious > /tmp/state").check()
    with caplog.at_level(logging.WARNING, logger="envlayer.docker"):
        second = make_env(task=task, pids_limit=512)
    assert second.container_id != first.container_id
    result = second.exec("test ! -e /tmp/state")
    assert result.ok
    assert "was replaced" in result.notice and "pids_limit: 1024 -> 512" in result.notice
    assert any("pids_limit: 1024 -> 512" in r.getMessage() for r in caplog.records if r.name == "envlayer.docker")
    assert second.exec("true").notice == ""  # only the first result after the replacement


def test_the_api_raises_under_error_and_keeps_the_container(make_env: Any) -> None:
    task = f"api-{uuid.uuid4().hex[:6]}"
    first = make_env(task=task)
    with pytest.raises(SandboxOptionsDiffer) as info:
        make_env(task=task, pids_limit=512, on_fingerprint_mismatch="error")
    assert info.value.changes == [OptionChange("pids_limit", 1024, 512)]
    assert info.value.recorded is not None and info.value.recorded["pids_limit"] == 1024
    assert first.exec("true").ok


def test_the_label_withholds_credential_values(make_env: Any, docker_api: Any) -> None:
    env = make_env(env={"API_TOKEN": "s3cret-value", "MODE": "fast"})
    labels = docker_api.inspect_container(env.container_id)["Config"]["Labels"]
    assert json.loads(labels["envlayer.options"])["env"] == {"API_TOKEN": None, "MODE": "fast"}
    assert not any("s3cret-value" in value for value in labels.values())
