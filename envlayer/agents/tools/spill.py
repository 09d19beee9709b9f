"""Keeping the whole output of a command whose tool result had to be cut.

When the ``terminal`` tool cuts a command's output to its text budget, the full merged
output (up to ``ToolConfig.spill_bytes``; beyond that its first 40 % and last 60 %) is
written to a file **in the sandbox** (on this machine for the local backend), so the model
can read the middle with ``read_file`` instead of running the command again.

The file is ``<output dir>/<12 hex>.log``; the output dir defaults to a per-user one
resolved by the sandbox's shell, ``${XDG_CACHE_HOME:-$HOME/.cache}/envlayer/output``. The
directory is created 0700 and the file 0600. Files are not removed by envlayer: they live
as long as the sandbox (or until the user cleans the cache directory).
"""

from __future__ import annotations

import shlex
import uuid

from envlayer.dispatch import run
from envlayer.environment import Environment
from envlayer.errors import EnvlayerError

DEFAULT_OUTPUT_DIR = '"${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/envlayer/output"'
"""The default spill directory, as a shell expression the sandbox resolves."""


class SpillError(EnvlayerError):
    """The sandbox refused the spill file (its message says why)."""


def save(env: Environment, data: bytes, *, output_dir: str | None) -> str:
    """Write ``data`` to a new private file in the sandbox; return its absolute path.

    Raises :class:`SpillError` when the sandbox could not write it.
    """
    base = shlex.quote(output_dir.rstrip("/") or "/") if output_dir else DEFAULT_OUTPUT_DIR
    name = f"{uuid.uuid4().hex[:12]}.log"
    script = f'( umask 077; B={base}; mkdir -p "$B" && cat > "$B/{name}" && echo "$B/{name}" )'
    result = run(env, script, stdin=data, timeout=60)
    lines = result.stdout_text.strip().splitlines()
    if not result.ok or not lines:
        raise SpillError(
            f"exit {result.exit_code}: {result.stderr_text.strip()[:200]}",
            hint="check that the output directory is writable in the sandbox (ToolConfig.output_dir)",
        )
    return lines[-1]
