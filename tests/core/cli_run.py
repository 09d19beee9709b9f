"""Run the installed `envlayer` script as a real subprocess (shared by the CLI tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
