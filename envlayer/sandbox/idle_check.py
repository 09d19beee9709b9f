"""Is a sandbox idle? One POSIX ``sh`` check run inside it, and the decision from its output.

Used by reapers that must never end a sandbox in use: the check prints ``<now> <lease
mtime or -> <busy>``, where the lease is a file commands touch now and then, and ``busy``
is 1 when a process started by a command is alive (it carries ``ENVLAYER_EXEC_ID``) or a
session shell is running code (it carries the session variable and is in state R).
"""

from __future__ import annotations

import re

from envlayer.execution.tree_kill import EXEC_ID_VAR


def idle_check_script(lease_path: str, session_var: str) -> str:
    """The check's ``sh`` program (needs ``date``, ``stat``, ``grep`` and ``/proc``). It
    prints one line on stdout and nothing on stderr, also when processes exit while it
    scans (such a process counts as not busy)."""
    return (
        "now=$(date +%s); m=$(stat -c %Y " + lease_path + " 2>/dev/null || echo -); busy=0\n"
        "for d in /proc/[0-9]*; do\n"
        '  [ "${d#/proc/}" = "$$" ] && continue\n'
        '  if grep -qa "' + EXEC_ID_VAR + '=" "$d/environ" 2>/dev/null; then busy=1; break; fi\n'
        '  if grep -qa "' + session_var + '=" "$d/environ" 2>/dev/null; then\n'
        # braces: a redirection's own failure (the process exited since the grep) is
        # reported before a trailing 2>/dev/null applies; silenced it is just "not busy"
        '    st=; { read -r st < "$d/stat"; } 2>/dev/null; set -- ${st##*) }\n'
        '    [ "$1" = R ] && { busy=1; break; }\n'
        "  fi\n"
        "done\n"
        'echo "$now $m $busy"\n'
    )


_VERDICT = re.compile(rb"\d+ (?:\d+|-) [01]\n")


def is_whole_verdict(output: bytes) -> bool:
    """Whether ``output`` is exactly the line the check prints. Anything else (empty, cut
    short, other text mixed in) is a reply lost or damaged on its way, not a verdict. Pure."""
    return _VERDICT.fullmatch(output) is not None


def parse_idle_check(output: bytes, fallback: float | None, idle_after: float) -> bool:
    """Whether the check's output says the sandbox is reclaimable: nothing busy, and the
    lease (or ``fallback``, e.g. the sandbox's start time, when there is no lease) at least
    ``idle_after`` seconds old. Anything unexpected means "keep it". Pure."""
    try:
        now_s, mtime_s, busy_s = output.decode().split()
        now = float(now_s)
        ref = float(mtime_s) if mtime_s != "-" else fallback
    except (ValueError, UnicodeDecodeError):
        return False
    if busy_s != "0" or ref is None:
        return False
    return now - ref >= idle_after
