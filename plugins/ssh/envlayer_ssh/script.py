"""Shell text sent to the remote side. Pure functions, no I/O.

Everything user-supplied is quoted with :func:`shlex.quote`; variable names were checked
(:func:`envlayer.request.check_env`) before they get here. The session shell's text is the
core's (:mod:`envlayer.shell_script`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from envlayer.proctree import EXEC_ID_VAR
from envlayer.shell_script import export_lines, quote_path


def cd_line(path: str) -> str:
    """``cd`` to ``path`` or exit 126 with a message on stderr (as the local backend does)."""
    quoted = quote_path(path)
    return (
        f"cd -- {quoted} 2>/dev/null || {{ printf 'working directory does not exist: %s\\n' {quoted} >&2; exit 126; }}"
    )


def oneshot_command(
    shell: str | None,
    exec_id: str,
    body: str,
    *,
    cwd: str | None,
    env: Mapping[str, str],
) -> str:
    """The line sshd gives the login shell for a one-shot command.

    With ``shell`` None (the login shell is the configured shell) the login shell runs
    the script itself: ``ENVLAYER_EXEC_ID=<id>`` stands in its command line and is
    exported to everything it starts. Otherwise the login shell runs
    ``ENVLAYER_EXEC_ID=<id> exec <shell> -c <script>`` (POSIX: the prefix assignment is
    exported to the exec'd program), one exec more. Either way the top process, leader
    of the session sshd created, carries the marker in its command line (found by the
    kill script, and by ``pkill -f`` where there is no /proc).
    """
    script = f"{EXEC_ID_VAR}={exec_id}; export {EXEC_ID_VAR}\n"
    if cwd:
        script += cd_line(cwd) + "\n"
    script += export_lines(env) + body
    if shell is None:
        return script
    return f"{EXEC_ID_VAR}={exec_id} exec {shlex.quote(shell)} -c {shlex.quote(script)}"
