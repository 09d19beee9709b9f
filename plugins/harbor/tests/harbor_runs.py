"""One ``harbor run`` of the oracle agent over ``tasks/`` through
``envlayer_harbor:Environment`` (the command a user types), and its results as Harbor
wrote them (``result.json`` per trial)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

TASKS = Path(__file__).parent / "tasks"
BASE_IMAGE = "envlayer-test:debian"
"""What the tasks' Dockerfiles start FROM (scripts/provision builds it)."""
HARBOR = Path(sys.executable).parent / "harbor"
QUIET = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "0"}
"""No network fetch of LiteLLM's price list at start, no telemetry."""


def harbor_run(jobs: Path, argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the oracle over every task (``argv``: more ``harbor run`` arguments, such as
    ``--ek backend=docker``) with a profile of its own; returns ``{"profile", "proc",
    "trials": {task name: result.json + "dir"}}``."""
    return finished(started(jobs, argv, env))


def started(jobs: Path, argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """:func:`harbor_run` started, not waited for (:func:`finished` waits): runs on
    different backends can go side by side."""
    profile = f"envlayer-test-harbor-{uuid.uuid4().hex[:8]}"
    command = [
        str(HARBOR), "run", "-p", str(TASKS), "-a", "oracle", "--env", "envlayer_harbor:Environment",
        "--ek", f"profile={profile}", *argv, "-o", str(jobs), "-y", "-q",
    ]  # fmt: skip
    popen = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**(env or os.environ), **QUIET}
    )
    return {"profile": profile, "popen": popen, "jobs": jobs, "command": command}


def finished(run: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Wait for a :func:`started` run (killed after ``timeout`` seconds) and read its results."""
    popen = run["popen"]
    try:
        stdout, stderr = popen.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        stdout, stderr = popen.communicate()
    proc = subprocess.CompletedProcess(run["command"], popen.returncode, stdout, stderr)
    trials = {}
    for path in run["jobs"].glob("*/*/result.json"):
        result = json.loads(path.read_text())
        trials[result["task_name"]] = {**result, "dir": path.parent}
    return {"profile": run["profile"], "proc": proc, "trials": trials}


def reward(run: dict[str, Any], task: str) -> float:
    """The reward Harbor recorded for ``task``; fails with the run's output when it has none."""
    trial = run["trials"].get(task)
    output = run["proc"].stdout[-3000:] + run["proc"].stderr[-3000:]
    assert trial is not None, f"no result for {task}: {output}"
    assert trial["verifier_result"], f"{task} has no verifier result: {trial['exception_info']}"
    return trial["verifier_result"]["rewards"]["reward"]
