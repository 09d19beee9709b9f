"""Run the installed `envlayer` script as a real subprocess (shared by the CLI tests)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ENVLAYER = shutil.which("envlayer", path=os.path.dirname(sys.executable)) or "envlayer"


def run(
    *args: str, stdin: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``envlayer *args`` with no ``ENVLAYER_*`` variable of the caller's, plus ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    full_env.update(env or {})
    return subprocess.run(
        [ENVLAYER, *args], input=stdin, capture_output=True, text=True, timeout=60, cwd=cwd, env=full_env
    )


@contextmanager
def own_brokers(workdir: Path, **env: str) -> Iterator[dict[str, str]]:
    """``env`` plus a private broker runtime directory inside ``workdir``, for
    :func:`run`'s ``env``: the calls' brokers are their own, and all are stopped at the end."""
    runtime = workdir / "rt"
    runtime.mkdir(mode=0o700, exist_ok=True)
    full = {**env, "ENVLAYER_RUNTIME_DIR": str(runtime)}
    try:
        yield full
    finally:
        run("broker", "stop", cwd=workdir, env=full)


def interrupt_when(
    argv: list[str], ready: Callable[[], bool], *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ``envlayer *argv`` (environment ``env``, default this process's), send it SIGINT
    once ``ready()`` is true (polled while it runs; failing if it ends first), and return
    how it ended. The process is killed if it outlives the test."""
    proc = subprocess.Popen([ENVLAYER, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert proc.poll() is None, f"it ended before it could be interrupted: {proc.communicate()}"
            assert time.monotonic() < deadline, "never ready to be interrupted"
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
