"""Kill a command's process tree INSIDE the container, through a second exec.

Closing an exec's stream kills nothing, and docker-py has no exec timeout, so envlayer
kills by itself. Every command carries ``ENVLAYER_EXEC_ID=<id>`` in its environment (the
session exports it before the command; a one-shot exec is created with it), and every
process the command starts inherits it, including ones that ``setsid`` or double-fork
away. The kill exec SIGKILLs:

* every process whose environment holds this command's marker;
* for a session command, the session shell and the members of its process group that
  carry no marker at all (the shell's forked subshells). Background jobs that earlier
  commands of the session started carry *their own* marker and are spared.

Two passes catch processes forked while the first pass ran. Needs ``sh`` and ``grep``
in the image (both in busybox and every distribution image).
"""

from __future__ import annotations

from typing import Any

from envlayer.proctree import EXEC_ID_VAR

KILL_SCRIPT = (
    "id=$1; sp=$2; me=$$; n=0\n"
    "for pass in 1 2; do\n"
    "  for d in /proc/[0-9]*; do\n"
    "    p=${d#/proc/}\n"
    '    [ "$p" = "$me" ] || [ "$p" = 1 ] && continue\n'
    '    st=; read -r st < "$d/stat" 2>/dev/null || continue\n'
    "    set -- ${st##*) }\n"
    '    if grep -qa "' + EXEC_ID_VAR + '=$id" "$d/environ" 2>/dev/null; then\n'
    '      kill -9 "$p" 2>/dev/null && n=$((n+1))\n'
    '    elif [ -n "$sp" ] && [ "$3" = "$sp" ] && ! grep -qa "' + EXEC_ID_VAR + '=" "$d/environ" 2>/dev/null; then\n'
    '      kill -9 "$p" 2>/dev/null && n=$((n+1))\n'
    "    fi\n"
    "  done\n"
    "done\n"
    'echo "$n"\n'
)


def kill_command(
    api: Any, container_id: str, exec_id: str, *, session_pid: int | None, user: str | None, shell: str
) -> int:
    """Kill the tree of the command marked ``exec_id`` (see the module docstring).

    Returns how many signals were delivered. Best effort: a container that is gone or
    stopped has nothing left to kill, so API errors are swallowed (returns -1).
    """
    from docker.errors import DockerException

    argv = [shell, "-c", KILL_SCRIPT, "envlayer-kill", exec_id, str(session_pid or "")]
    try:
        eid = api.exec_create(container_id, argv, stdout=True, stderr=True, user=user or "")["Id"]
        out = api.exec_start(eid)
    except (DockerException, OSError):
        return -1
    try:
        return int(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return -1
