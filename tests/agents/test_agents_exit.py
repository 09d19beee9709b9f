"""The at-exit path, in real subprocesses: everything is cleaned up without close(),
nothing destructive runs from garbage collection, and the final wait is bounded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from envlayer.capabilities import Capability
from envlayer.local.backend import LocalEnvironment

CHILD = """
import gc, sys
from envlayer.config import load_settings
from envlayer.agents.manager import EnvironmentManager
config, profile, mode = sys.argv[1:4]
manager = EnvironmentManager(load_settings(config_path=config, env={}, backend="toy", profile=profile))
env = manager.get("t")
assert env.exec("echo hi").stdout_text == "hi\\n"
print(env.environment.root, flush=True)
if mode == "dropped":
    del env, manager
    gc.collect()
# no close(): the interpreter exits here
"""


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}


def run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_atexit_cleans_up_a_live_manager(tmp_path: Path, profile: str) -> None:
    config = tmp_path / "empty.toml"
    config.write_text("")
    root = Path(run_child(CHILD, str(config), profile, "live").stdout.strip())
    assert root.name.startswith("envlayer-toy-")
    assert not root.exists()  # the toy plugin's cleanup ran at exit


def test_garbage_collection_never_cleans_up(tmp_path: Path, profile: str) -> None:
    config = tmp_path / "empty.toml"
    config.write_text("")
    root = Path(run_child(CHILD, str(config), profile, "dropped").stdout.strip())
    try:
        assert root.exists()  # no __del__ teardown: a dropped manager releases nothing
    finally:
        shutil.rmtree(root, ignore_errors=True)


class SlowTeardown(LocalEnvironment):
    """Local, plus a background teardown that never finishes in time."""

    name = "slow-teardown"
    capabilities = frozenset({*LocalEnvironment.capabilities, Capability.WAIT_FOR_CLEANUP})
    waits: list[float] = []
    never = threading.Event()

    def wait_for_cleanup(self, timeout: float) -> bool:
        type(self).waits.append(timeout)
        return self.never.wait(timeout)


def test_close_waits_within_one_total_budget(make_manager, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    SlowTeardown.waits = []
    manager = make_manager(
        backend="slow-teardown", backend_options={"cwd": str(tmp_path)}, backends={"slow-teardown": SlowTeardown}
    )
    for task in ("a", "b", "c"):
        manager.get(task)
    assert manager.close(timeout=0.5) is False  # reported, not hung
    assert len(SlowTeardown.waits) == 3
    assert all(w <= 0.5 for w in SlowTeardown.waits)
    assert SlowTeardown.waits == sorted(SlowTeardown.waits, reverse=True)  # one shrinking budget
