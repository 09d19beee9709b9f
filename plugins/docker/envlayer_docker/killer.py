"""Kill a command's process tree INSIDE the container, through a second exec.

Closing an exec's stream kills nothing, and docker-py has no exec timeout, so envlayer
kills by itself: every command carries ``ENVLAYER_EXEC_ID=<id>`` in its environment (the
session exports it before the command; a one-shot exec is created with it), and the
core's in-sandbox kill script (:mod:`envlayer.sandbox_kill`, which documents exactly
what it kills) runs in a second exec. For a session command it also gets the session
shell's pid and no start-time threshold: the shell and its unmarked subshells go,
programs that earlier commands left running (they carry their own marker) are spared.
Needs ``sh`` and ``grep`` in the image (busybox has both).
"""

from __future__ import annotations

from typing import Any

from envlayer.sandbox_kill import kill_script_argv, killed_pids

_GRACE_SECONDS = 1


def kill_command(
    api: Any, container_id: str, exec_id: str, *, session_pid: int | None, user: str | None, shell: str
) -> int:
    """Kill the tree of the command marked ``exec_id`` (see the module docstring).

    Returns how many processes were signalled. Best effort: a container that is gone or
    stopped has nothing left to kill, so API errors are swallowed (returns -1).
    """
    from docker.errors import DockerException

    argv = kill_script_argv(shell, exec_id, shell_pid=session_pid or 0, grace=_GRACE_SECONDS)
    try:
        eid = api.exec_create(container_id, argv, stdout=True, stderr=True, user=user or "")["Id"]
        out = api.exec_start(eid)
    except (DockerException, OSError):
        return -1
    return len(killed_pids(out))
