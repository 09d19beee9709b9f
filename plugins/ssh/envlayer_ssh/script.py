"""Shell text sent to the remote side. Pure functions, no I/O.

Everything user-supplied is quoted with :func:`shlex.quote`; variable names were checked
(:func:`envlayer.request.check_env`) before they get here. The session shell's text is the
core's (:mod:`envlayer.execution.shell_script`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from envlayer.execution.shell_script import printf_format, quote_path
from envlayer.execution.tree_kill import EXEC_ID_VAR


def cd_line(path: str) -> str:
    """``cd`` to ``path`` or exit 126 with a message on stderr (as the local backend does)."""
    quoted = quote_path(path)
    return (
        f"cd -- {quoted} 2>/dev/null || {{ printf 'working directory does not exist: %s\\n' {quoted} >&2; exit 126; }}"
    )


ENV_FROM_STDIN = 'IFS= read -r __el_env || exit 125; eval "$__el_env"; unset __el_env\n'
"""Script line that reads the one-line :func:`env_stdin` preamble from stdin and runs it
(``read`` takes exactly one line from a pipe, leaving the rest for the command)."""


def env_stdin(env: Mapping[str, str]) -> bytes:
    """One line of shell that exports ``env``, sent on a one-shot command's stdin ahead of
    the caller's bytes, so values never stand in a command line (``ps`` on the host shows
    command lines to every user). Values are exact, trailing newlines included."""
    parts = []
    for name, value in env.items():
        fmt = printf_format(value.encode("utf-8", "surrogateescape") + b"x").replace("\n", "\\012")
        parts.append(f"{name}=$(printf {fmt}); {name}=${{{name}%x}}; export {name};")
    return (" ".join(parts) + "\n").encode()


def oneshot_command(
    shell: str | None,
    exec_id: str,
    body: str,
    *,
    cwd: str | None,
    env_from_stdin: bool,
) -> str:
    """The line sshd gives the login shell for a one-shot command. With
    ``env_from_stdin`` the script first reads its variables from the :func:`env_stdin`
    line the caller sends ahead of the command's stdin (never from its command line).

    With ``shell`` None (the login shell is the configured shell) the login shell runs
    the script itself: ``ENVLAYER_EXEC_ID=<id>`` stands in its command line and is
    exported to everything it starts. Otherwise the login shell runs
    ``ENVLAYER_EXEC_ID=<id> exec <shell> -c <script>`` (POSIX: the prefix assignment is
    exported to the exec'd program), one exec more. Either way the top process, leader
    of the session sshd created, carries the marker in its command line (found by the
    kill script, and by ``pkill -f`` where there is no /proc).
    """
    script = f"{EXEC_ID_VAR}={exec_id}; export {EXEC_ID_VAR}\n"
    if env_from_stdin:
        script += ENV_FROM_STDIN
    if cwd:
        script += cd_line(cwd) + "\n"
    script += body
    if shell is None:
        return script
    return f"{EXEC_ID_VAR}={exec_id} exec {shlex.quote(shell)} -c {shlex.quote(script)}"
