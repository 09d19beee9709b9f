"""Kill a command's process tree INSIDE the sandbox, through a second exec.

Ending the client's read of an exec kills nothing in the sandbox, and an exec ``timeout``
(Modal's own) reaches only the exec's process, so envlayer kills by itself: every command
carries ``ENVLAYER_EXEC_ID=<id>`` in its environment and the core's kill script
(:mod:`envlayer.execution.tree_kill`, which documents exactly what it kills) runs in another
``Sandbox.exec``.
"""

from __future__ import annotations

from typing import Any

from envlayer.execution.tree_kill import kill_script_argv, killed_pids

_GRACE_SECONDS = 1
_KILL_EXEC_TIMEOUT = 30


def kill_command(sandbox: Any, exec_id: str, *, shell: str) -> int:
    """Kill the tree of the command marked ``exec_id``. Returns how many processes were
    signalled; -1 when the sandbox could not be reached (nothing is left to kill when it is
    gone). Never raises for SDK errors."""
    argv = kill_script_argv(shell, exec_id, grace=_GRACE_SECONDS)
    try:
        proc = sandbox.exec(*argv, text=False, timeout=_KILL_EXEC_TIMEOUT)
        out = proc.stdout.read()
        proc.wait()
    except Exception:
        return -1
    return len(killed_pids(out))
