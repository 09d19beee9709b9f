"""Kill a command's process tree on the remote host, from a separate channel.

What is killed (read from /proc by one POSIX ``sh`` script; no remote Python needed):

* every process whose environment holds ``ENVLAYER_EXEC_ID=<id>`` (each command exports
  it, so every program it executes carries it, including ``setsid`` escapees), or whose
  command line does (the one-shot top shell; the pattern is written ``I[D]`` so the
  ``grep`` doing the search never matches its own command line);
* every process in a process group or session led by such a process (catches forked
  subshells of a one-shot command, which never exec and so do not show the marker);
* for a session shell: the shell itself (SIGKILL first, so the rest of the command
  script cannot run on) and those of its descendants that carry no other command's
  marker (forked subshells) and started at or after the command began (``since_cs``,
  the remote clock in centiseconds). Background jobs of earlier commands are spared:
  programs by their own marker, subshells by their start time.

Sequence: SIGKILL the shell, SIGTERM the rest, up to ``grace`` seconds for them to go,
then rescan and SIGKILL whatever is left. Without a readable /proc (BSD, macOS) it falls
back to ``pkill -f`` of the marker (the one-shot shell's command line holds it) and, for a
session shell, ``pkill -P`` of the shell and the shell itself.
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer_ssh.channel_io import run_simple

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")

KILL_SCRIPT = r"""
M="ENVLAYER_EXEC_ID=$1"; R="ENVLAYER_EXEC_I[D]=$1"; S=$2; SINCE=$3; GRACE=$4
rm -f "/tmp/.envlayer-in-$1"
if [ ! -r /proc/self/stat ]; then
  if [ "$S" != 0 ]; then pkill -KILL -P "$S" 2>/dev/null; kill -KILL "$S" 2>/dev/null; fi
  pkill -TERM -f "$M" 2>/dev/null; sleep "$GRACE" 2>/dev/null
  pkill -KILL -f "$M" 2>/dev/null
  echo "noproc"; exit 0
fi
tck=$(getconf CLK_TCK 2>/dev/null); [ -n "$tck" ] || tck=100
thr=$(( SINCE * tck / 100 ))
marked() {  # pids whose environment (or, with a 2nd arg, command line) matches regex $1
  for f in $(grep -l -a -e "$1" /proc/[0-9]*/environ ${2:+/proc/[0-9]*/cmdline} 2>/dev/null); do
    p=${f#/proc/}; printf '%s ' "${p%/*}"
  done
}
table() {
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    p=${f#/proc/}; p=${p%/stat}
    set -- ${line##*) }
    [ "$1" = Z ] && continue
    pp=$2; pg=$3; sid=$4; shift 19
    printf '%s %s %s %s %s\n' "$p" "$pp" "$pg" "$sid" "$1"
  done
}
victims() {
  mk=" $(marked "$R" cmdline)"; any=" $(marked "ENVLAYER_EXEC_I[D]=")"; tb=$(table); desc=" $S "
  if [ "$S" != 0 ]; then
    changed=1
    while [ $changed = 1 ]; do
      changed=0
      while read -r p pp pg sid start; do
        case "$desc" in *" $p "*) continue;; esac
        case "$desc" in *" $pp "*) desc="$desc$p "; changed=1;; esac
      done <<TABLE
$tb
TABLE
    done
  fi
  while read -r p pp pg sid start; do
    [ -z "$p" ] && continue
    [ "$p" = "$$" ] && continue
    [ "$p" = "$S" ] && continue
    case "$mk" in *" $p "*|*" $pg "*|*" $sid "*) printf '%s ' "$p"; continue;; esac
    case "$any" in *" $p "*) continue;; esac
    if [ "$S" != 0 ] && [ "$start" -ge "$thr" ]; then
      case "$desc" in *" $p "*) printf '%s ' "$p";; esac
    fi
  done <<TABLE
$tb
TABLE
}
alive() {
  for p in $1; do
    { read -r line < /proc/$p/stat; } 2>/dev/null || continue
    set -- ${line##*) }
    [ "$1" = Z ] || printf '%s ' "$p"
  done
}
v=$(victims)
[ "$S" != 0 ] && kill -KILL "$S" 2>/dev/null
[ -n "$v" ] && kill -TERM $v 2>/dev/null
n=0
while [ -n "$(alive "$v")" ] && [ $n -lt $(( GRACE * 10 )) ]; do sleep 0.1; n=$((n + 1)); done
rest="$(alive "$v") $(marked "$R" cmdline)"
[ -n "${rest# }" ] && kill -KILL $rest 2>/dev/null
echo "killed $v"
"""

_GRACE_SECONDS = 1
_KILL_TIMEOUT = 15.0


def kill_remote(pool: TargetPool, shell: str, exec_id: str, *, shell_pid: int = 0, since_cs: int = 0) -> None:
    """Kill the tree of command ``exec_id`` on ``pool``'s host (see the module docstring).

    ``shell_pid`` and ``since_cs`` are given for a session shell. Best effort and bounded
    (about ``_KILL_TIMEOUT`` seconds): a failure is logged at WARNING, never raised, so the
    caller can still report the timeout.
    """
    args = " ".join(shlex.quote(str(a)) for a in (exec_id, shell_pid, since_cs, _GRACE_SECONDS))
    line = f"exec {shlex.quote(shell)} -c {shlex.quote(KILL_SCRIPT)} envlayer-kill {args}"
    try:
        code, out, err = run_simple(pool, line, timeout=_KILL_TIMEOUT)
    except BackendUnavailable as exc:
        log.warning("ssh: could not kill command %s on %s: %s", exec_id, pool.target.describe(), exc)
        return
    if code != 0:
        log.warning("ssh: the kill script for %s exited %s: %s", exec_id, code, err.decode(errors="replace").strip())
    else:
        log.debug("ssh: %s", out.decode(errors="replace").strip())
