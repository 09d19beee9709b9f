"""Run the installed `envlayer` script as a real subprocess (shared by the CLI tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
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
