"""How a local one-shot command's end is found: on a process descriptor where the kernel
gives one (``os.pidfd_open``), else by polling the process; both must give the same results
for a command that ends, one that closes its output and runs on, and one that leaves a
background child holding its output. (The conformance kit runs on the first:
``tests/conformance/test_local_conformance.py``.)"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlayer.dispatch import run
from envlayer.local import backend as local_backend
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.testing.fixtures import cleaned_up


@pytest.fixture(params=["process descriptor", "polled"])
def env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalEnvironment]:
    if request.param == "polled":
        monkeypatch.setattr(local_backend, "_process_fd", lambda pid: None)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("this platform has no process descriptors")
    with tempfile.TemporaryDirectory(prefix="envlayer-test-oneshot-", ignore_cleanup_errors=True) as workdir:
        yield from cleaned_up(LocalEnvironment(LocalOptions(cwd=workdir, timeout=60, exec_mode="oneshot")))


def test_a_command_that_ends_gives_its_output_and_status(env: LocalEnvironment) -> None:
    result = run(env, "sleep 0.2; echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, b"out\n", b"err\n", False)


def test_a_command_that_closes_its_output_and_runs_on_times_out(env: LocalEnvironment) -> None:
    result = run(env, "echo before; exec >&- 2>&-; sleep 30", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert result.stdout == b"before\n"
    assert result.duration < 20, "the command was not killed at its deadline"


def test_a_background_child_holding_the_output_does_not_hold_the_call(env: LocalEnvironment) -> None:
    """The command ends; a child it left in the background keeps its output open: the call
    returns once the command ended (plus a short drain), with what was written."""
    result = run(env, "sleep 30 & echo $! > child.pid; echo done", timeout=20)
    try:
        assert (result.exit_code, result.stdout, result.timed_out) == (0, b"done\n", False)
        assert result.duration < 10, "the call waited for the background child"
    finally:
        os.kill(int(Path(env.cwd, "child.pid").read_text()), 9)
