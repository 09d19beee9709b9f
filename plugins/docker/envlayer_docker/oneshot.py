"""The argv of a one-shot command: one ``docker exec`` per command, under a small
``sh`` wrapper that ends the output with the core's trailer (:mod:`envlayer.execution.shell_script`).
envlayer's own helper commands run under it too.

The wrapper saves the exec's stdout/stderr on fds 7 and 8, goes to the working directory
(exit 126 with a message when it is missing), runs the command in a subshell (a string
by ``eval``, as ``sh -c`` would; an argv as is, without shell interpretation), then prints
``M<rc> <pid> - <pwd>M`` on fd 7 and ``M`` on fd 8. The subshell means ``exit`` or
``exec`` in the command cannot skip the trailer: the wrapper always ends by printing it
and exits 0, so an exec that exits 0 without the trailer reaching the reader lost output
on the way (the daemon closes an exec's streams a few seconds after its process exited,
whether or not it delivered everything; under heavy load it does not). The marker ``M`` is computed in the
shell from a random seed, so its text is never in any process's argv. The reader
therefore knows the command is over without waiting for EOF (background children that
keep the pipe open never block a call).
"""

from __future__ import annotations

from collections.abc import Sequence

from envlayer.execution.shell_script import marker_of, new_seed

LEASE_PATH = "/tmp/.envlayer-lease"
"""Touched by commands at most every ``lease_interval`` seconds: the idle reclaimer reads
its age (see :mod:`envlayer_docker.reaper`)."""

LEASE_PRELUDE = f": > {LEASE_PATH} 2>/dev/null"
"""Shell text that refreshes the lease (run before a session command)."""

_WRAPPER = (
    'exec 7>&1 8>&2; m=__EL$(($1*7919+13))__; d=$2; t=$3; shift 3; [ -n "$t" ] && ' + LEASE_PRELUDE + "; "
    'if cd -- "$d" 2>/dev/null; then ( eval "$1" ) 7>&- 8>&-; __el_rc=$?; '
    "else printf 'envlayer: working directory does not exist: %s\\n' \"$d\" >&8; __el_rc=126; fi; "
    'printf \'%s%s %s - %s%s\' "$m" "$__el_rc" "$$" "$PWD" "$m" >&7; printf \'%s\' "$m" >&8'
)
_WRAPPER_ARGV = _WRAPPER.replace('eval "$1"', '"$@"')


def oneshot_argv(shell: str, command: str | Sequence[str], *, cwd: str, touch_lease: bool) -> tuple[list[str], bytes]:
    """``(argv, marker)`` for a one-shot command: ``$1`` marker seed, ``$2`` cwd, ``$3``
    non-empty to refresh the lease, then the command. Per-call environment values are
    not in argv: they go in the exec's environment."""
    seed = new_seed()
    lease = "1" if touch_lease else ""
    if isinstance(command, str):
        argv = [shell, "-c", _WRAPPER, "envlayer", str(seed), cwd, lease, command]
    else:
        argv = [shell, "-c", _WRAPPER_ARGV, "envlayer", str(seed), cwd, lease, *command]
    return argv, marker_of(seed)
