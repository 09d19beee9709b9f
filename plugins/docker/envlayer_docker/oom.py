"""Whether a command that ended with exit 137 (SIGKILL) was killed by the container's
memory limit: the kernel counts OOM kills per cgroup (``oom_kill`` in ``memory.events``
on cgroup v2, in ``memory/memory.oom_control`` on v1; Linux ``Documentation/admin-guide/
cgroup-v2.rst`` and ``cgroup-v1/memory.rst``). The count last seen is kept in the
container (:data:`SEEN_FILE`), so a later ``kill -9`` is not blamed on an old OOM kill,
also when another process looked last."""

from __future__ import annotations

import logging
from collections.abc import Callable

from envlayer.errors import EnvlayerError

log = logging.getLogger("envlayer.docker")

KILLED_EXIT_CODE = 137
"""128 + SIGKILL: what a shell reports for a process the OOM killer ended."""

SEEN_FILE = "/tmp/.envlayer-oom-kills"

COUNT_SCRIPT = (
    "n=$(cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"
    " | sed -n 's/^oom_kill //p' | head -n 1); "
    f"seen=$(cat {SEEN_FILE} 2>/dev/null); "
    f'echo "${{n:-0}}" > {SEEN_FILE} 2>/dev/null; '
    'echo "${n:-0} ${seen:-0}"'
)
"""Prints ``NOW SEEN`` (the container's OOM kill count now, and when last looked) and
records NOW."""

Helper = Callable[[list[str]], tuple[int, bytes, bytes]]
"""Runs one of envlayer's own commands in the container: ``(exit code, stdout, stderr)``."""


def oom_notice(exit_code: int, memory_mb: int, run: Helper) -> str:
    """``killed: out of memory (memory_mb=N)`` when a command that exited 137 in a
    container limited to ``memory_mb`` MiB was killed by that limit (the container's OOM
    kill count went up since last looked); "" otherwise, and when the count cannot be read
    (then logged)."""
    if exit_code != KILLED_EXIT_CODE or not memory_mb:
        return ""
    try:
        code, out, _ = run(["sh", "-c", COUNT_SCRIPT])
        now, seen = (int(word) for word in out.split()[:2])
    except (EnvlayerError, ValueError) as exc:
        log.warning("could not read the container's OOM kill count: %s", exc)
        return ""
    if code != 0 or now <= seen:
        return ""
    return f"killed: out of memory (memory_mb={memory_mb}): the command exceeded the container's memory limit"
