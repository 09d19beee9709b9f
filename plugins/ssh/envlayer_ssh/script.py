"""Shell text sent to the remote side. Pure functions, no I/O.

Everything user-supplied is quoted with :func:`shlex.quote`; variable names are checked
by :func:`envlayer_ssh.options.check_env_names` before they get here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from envlayer.proctree import EXEC_ID_VAR

_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("\\"), ord("%"), ord("'")} | {ord("\n")}


def command_text(command: str | Sequence[str]) -> str:
    """A string command unchanged; an argv list as one line with every word quoted."""
    if isinstance(command, str):
        return command
    if not command:
        raise ValueError("empty argv")
    return " ".join(shlex.quote(str(arg)) for arg in command)


def quote_path(path: str) -> str:
    """Quote a path for the shell, keeping a leading ``~`` or ``~/`` as ``$HOME``."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def cd_line(path: str) -> str:
    """``cd`` to ``path`` or exit 126 with a message on stderr (as the local backend does)."""
    quoted = quote_path(path)
    return (
        f"cd -- {quoted} 2>/dev/null || {{ printf 'working directory does not exist: %s\\n' {quoted} >&2; exit 126; }}"
    )


def export_lines(env: Mapping[str, str]) -> str:
    """``export NAME='value'`` for each variable, one per line ('' for none)."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


def printf_format(data: bytes) -> str:
    """A single-quoted ``printf`` format that prints exactly ``data`` (any bytes, NUL too)."""
    out = []
    for byte in data:
        out.append(chr(byte) if byte in _PLAIN else f"\\{byte:03o}")
    return "'" + "".join(out) + "'"


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
