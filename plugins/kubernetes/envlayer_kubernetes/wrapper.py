"""The ``sh`` program a one-shot command runs under, and the environment line it reads.

The exec API has no environment parameter, and an exec's argv is visible in the API
server's audit log and in ``/proc/*/cmdline``: environment values must not go there. So
every command's exec reads ONE line from its stdin first, an ``export`` script for the
environment (:func:`env_line`), evaluates it, and only then runs the command, whose stdin
is what follows on the stream. Argv: ``$1`` the kill script's marker
``ENVLAYER_EXEC_ID=<exec id>`` (exported, so every program the command starts carries it
in its environment), ``$2`` working directory, ``$3`` mode, ``$4`` stdin length, ``$5...``
the command (a string, or the argv words).

The marker stands in the wrapper's own command line as well, because the wrapper is the
shell that runs the command's script (``eval``): the kill script finds it there (an
``export`` reaches only the children's environments, never the exporting shell's own),
and kills it with the command, so nothing after the timed-out part of the script runs.
The subshells it forks (which exec nothing) share that command line, and the group and
session it leads (an exec's process is a session leader) are killed with it. The exec id
is a random token, not a secret. Modes:

* ``s``/``a``: no stdin (the command reads ``/dev/null``);
* ``S``/``A``: stdin follows and the client closes it (v5);
* ``H``/``B``: stdin follows but cannot be closed (v4): ``head -c LENGTH`` bounds it, so
  the command still sees EOF after exactly the data.

``read`` takes the line byte by byte on a pipe (POSIX), so it never eats the command's
stdin. The wrapper's exit status is the command's; 126 for a missing working directory.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from urllib.parse import quote

from envlayer.execution.tree_kill import EXEC_ID_VAR

ONESHOT = (
    'export "$1"; __el_d=$2; __el_m=$3; __el_n=$4; shift 4\n'
    "IFS= read -r __el_env || exit 125\n"
    'eval "$__el_env"; unset __el_env\n'
    'cd -- "$__el_d" 2>/dev/null || { printf \'envlayer: working directory does not exist: %s\\n\' "$__el_d" >&2; '
    "exit 126; }\n"
    "case $__el_m in\n"
    '  s) eval "$1" </dev/null;;\n'
    '  S) eval "$1";;\n'
    '  H) head -c "$__el_n" | eval "$1";;\n'
    '  a) "$@" </dev/null;;\n'
    '  A) "$@";;\n'
    '  B) head -c "$__el_n" | "$@";;\n'
    "esac\n"
)


URL_COMMAND_LIMIT = 8192
"""Encoded bytes of command words above which a one-shot command goes over stdin: the
exec's argv is in its URL, which proxies and load balancers in front of an API server cap
(nginx 8 KiB by default; the API server itself, Go's 1 MiB of request headers), and one
argv word in the pod is capped at 128 KiB by the kernel (``MAX_ARG_STRLEN``)."""
COMMAND_VAR = "__el_cmd"
RUN_COMMAND_VAR = 'eval "$__el_cmd"'
"""The one-shot command word that runs the script :func:`command_over_stdin` sent."""

SESSION_START = 'IFS= read -r __el_env || exit 125; eval "$__el_env"; unset __el_env; exec "$0"'
"""``sh -c`` program of a session shell's exec (``$0`` the shell): reads the environment
line, then replaces itself with a fresh shell that reads the session protocol from the
rest of stdin and inherits the exported variables."""


def _assignment(name: str, value: str) -> str:
    """``sh`` that sets shell variable ``name`` to ``value`` on one line: values with
    newlines are rebuilt by ``printf %b`` from escapes. Raises ``ValueError`` for a NUL
    byte (no shell variable can hold one)."""
    if "\0" in value:
        raise ValueError(f"{name} contains a NUL byte")
    if "\n" in value or "\r" in value:
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        return f"{name}=$(printf '%bx' {shlex.quote(escaped)}); {name}=${{{name}%x}};"
    return f"{name}={shlex.quote(value)};"


def env_line(env: Mapping[str, str], *, command: str | None = None) -> bytes:
    """One line of ``sh`` that exports ``env`` (and, with ``command``, sets the unexported
    ``__el_cmd`` to it: see :func:`command_over_stdin`); the line never contains a raw
    newline. Raises ``ValueError`` for a NUL byte in a value."""
    parts = [f"{_assignment(name, env[name])} export {name};" for name in sorted(env)]
    if command is not None:
        parts.append(_assignment(COMMAND_VAR, command))
    return (" ".join(parts) + "\n").encode("utf-8", "surrogateescape")


def command_over_stdin(command: str | Sequence[str]) -> str | None:
    """The command as one ``sh`` script when its argv would make the exec URL longer than
    :data:`URL_COMMAND_LIMIT` (the argv is in the query string), else None. The script
    then travels in the environment line (``__el_cmd``) and the argv holds only
    :data:`RUN_COMMAND_VAR`; an argv command is quoted word by word, so it runs unchanged."""
    words = [command] if isinstance(command, str) else [str(a) for a in command]
    if sum(len(quote(w, safe="")) + len("&command=") for w in words) <= URL_COMMAND_LIMIT:
        return None
    return command if isinstance(command, str) else shlex.join(words)


def oneshot_argv(
    shell: str, command: str | Sequence[str], *, exec_id: str, cwd: str, stdin: int | None, closable: bool
) -> list[str]:
    """The exec argv of a one-shot command. ``stdin`` is the byte count that follows the
    environment line (None: no stdin); ``closable`` says the client can close stdin (v5)."""
    shell_string = isinstance(command, str)
    if stdin is None:
        mode = "s" if shell_string else "a"
    elif closable:
        mode = "S" if shell_string else "A"
    else:
        mode = "H" if shell_string else "B"
    words = [command] if isinstance(command, str) else [str(a) for a in command]
    marker = f"{EXEC_ID_VAR}={exec_id}"
    return [shell, "-c", ONESHOT, "envlayer", marker, cwd, mode, str(stdin or 0), *words]


def bounded_stdin_argv(shell: str, argv: list[str], length: int) -> list[str]:
    """``argv`` made to read exactly ``length`` bytes of stdin and then see EOF, for a
    stream whose stdin cannot be closed (v4, or a protocol not known yet)."""
    return [shell, "-c", 'n=$1; shift; head -c "$n" | "$@"', "envlayer-bounded", str(length), *argv]
