"""Kill one command's whole process tree: on this machine, or inside a sandbox.

Every command envlayer runs carries an ``ENVLAYER_EXEC_ID`` marker in its environment
(:data:`EXEC_ID_VAR`); both killers find the tree by it.

On this machine (the local backend): :func:`kill_tree`, :func:`tree_members`.

Each command the local backend starts gets its own session and process group. Killing the group catches ordinary
children; the marker catches those that called ``setsid`` or double-forked into a new
group (they inherit the environment). Both are read from ``/proc`` on Linux; elsewhere
only the group is signalled.

Inside a sandbox (Docker, SSH, Modal, Kubernetes): :data:`KILL_SCRIPT`, :func:`kill_script_argv`,
:func:`killed_pids`.

Backends that run commands in a remote or containerized shell (Docker, SSH) cannot
signal processes from here: they run this script in the sandbox through a second exec
or channel. It reads ``/proc`` only; no Python or ``procps`` is needed in the sandbox.

What it kills, for the command whose ``ENVLAYER_EXEC_ID`` is ``exec_id``:

* every process whose environment holds ``ENVLAYER_EXEC_ID=<id>`` (each command exports
  it, so every program it executes carries it, ``setsid`` escapees included), or whose
  command line does (the pattern is written ``I[D]`` so the ``grep`` doing the search
  never matches its own command line);
* every process in a process group or session *led* by such a process (forked subshells
  of a command, which never exec and so do not show the marker);
* with ``shell_pid`` (a persistent session shell running the command): the shell itself,
  SIGKILLed first so the rest of the command script cannot run on, and those of its
  descendants that carry no marker at all (forked subshells) and started at or after
  ``since_cs`` (the sandbox's clock in centiseconds since boot, when the command began;
  0 = any age). Programs that earlier commands left running carry their own marker and
  are spared.

Sequence: SIGSTOP the shell before the scan (a shell that forked during it, as when a
cancel comes while the command starts, left a child out of the victims that ran on once
the shell was gone); SIGKILL the shell; SIGSTOP the rest, SIGTERM them, SIGCONT them (``kill``
signals one pid after the other: without the stop, a script's shell whose child got the
SIGTERM first could run its next line before its own turn came); up to ``grace`` seconds
for them (and the shell) to go, then rescan and SIGKILL whatever is left; it prints ``killed <pids>``. A
SIGKILLed process is not gone at once (it exits when next scheduled, then stays a zombie
until its parent reaps it): the script returns only once the shell is a zombie or gone,
so a caller that sees it return never finds the shell still running. Without a readable
``/proc`` (BSD, macOS hosts) it falls back to ``pkill -f`` of the marker and, for a
session shell, ``pkill -P`` of the shell and the shell itself.
"""

from __future__ import annotations

import os
import signal
import time

EXEC_ID_VAR = "ENVLAYER_EXEC_ID"
_PROC = "/proc"


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` is the state,
    ``[2]`` the process group, ``[19]`` the start time), or None when ``pid`` is gone or
    there is no /proc."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as fh:
            return marker in fh.read().split(b"\0")
    except OSError:
        return False


def tree_members(pgid: int, exec_id: str | None) -> list[int]:
    """Live (non-zombie) pids in process group ``pgid`` or carrying ``exec_id``."""
    if not os.path.isdir(_PROC):
        return []
    marker = f"{EXEC_ID_VAR}={exec_id}".encode() if exec_id else None
    me = os.getpid()
    found = []
    for entry in os.listdir(_PROC):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        fields = proc_stat(pid)
        if fields is None or fields[0] in (b"Z", b"X"):
            continue
        if int(fields[2]) == pgid or (marker is not None and _has_marker(pid, marker)):
            found.append(pid)
    return found


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pgid: int, exec_id: str | None, seconds: float) -> list[int]:
    """Poll the tree until it is empty or ``seconds`` pass; the members still alive (empty when gone)."""
    deadline = time.monotonic() + seconds
    members = tree_members(pgid, exec_id)
    while members and time.monotonic() < deadline:
        time.sleep(0.02)
        members = tree_members(pgid, exec_id)
    return members


def kill_tree(pgid: int, exec_id: str | None, *, grace: float = 1.0) -> list[int]:
    """SIGTERM the tree, wait up to ``grace`` seconds, then SIGKILL what is left.

    Returns the pids still alive after SIGKILL and a final short wait (normally empty).
    """
    _signal_all(pgid, tree_members(pgid, exec_id), signal.SIGTERM)
    members = _wait_gone(pgid, exec_id, grace)
    if not members:
        return []
    _signal_all(pgid, members, signal.SIGKILL)
    return _wait_gone(pgid, exec_id, 2.0)


KILL_SCRIPT = r"""
M="ENVLAYER_EXEC_ID=$1"; R="ENVLAYER_EXEC_I[D]=$1"; S=$2; SINCE=$3; GRACE=$4
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
[ "$S" != 0 ] && kill -STOP "$S" 2>/dev/null  # no child of the shell starts during the scan
v=$(victims)
[ "$S" != 0 ] && kill -KILL "$S" 2>/dev/null
[ -n "$v" ] && { kill -STOP $v; kill -TERM $v; kill -CONT $v; } 2>/dev/null
[ "$S" != 0 ] && w="$v $S" || w="$v"
n=0
while [ -n "$(alive "$w")" ] && [ $n -lt $(( GRACE * 10 )) ]; do sleep 0.1; n=$((n + 1)); done
rest="$(alive "$w") $(marked "$R" cmdline)"
[ -n "${rest# }" ] && kill -KILL $rest 2>/dev/null
echo "killed $v"
"""


def kill_script_argv(shell: str, exec_id: str, *, shell_pid: int = 0, since_cs: int = 0, grace: int = 1) -> list[str]:
    """The argv that runs :data:`KILL_SCRIPT` with ``shell`` (a POSIX sh in the sandbox)."""
    return [shell, "-c", KILL_SCRIPT, "envlayer-kill", exec_id, str(shell_pid), str(since_cs), str(grace)]


def killed_pids(output: bytes) -> list[int]:
    """The pids the script reports it signalled (from its ``killed ...`` line)."""
    for line in reversed(output.decode(errors="replace").splitlines()):
        if line.startswith("killed"):
            return [int(p) for p in line.split()[1:] if p.isdigit()]
    return []
