"""Kill a local command's whole process tree, including processes that escaped its group.

Each command the local backend starts gets its own session and process group, and an
``ENVLAYER_EXEC_ID`` marker in its environment. Killing the group catches ordinary
children; the marker catches those that called ``setsid`` or double-forked into a new
group (they inherit the environment). Both are read from ``/proc`` on Linux; elsewhere
only the group is signalled.
"""

from __future__ import annotations

import os
import signal
import time

EXEC_ID_VAR = "ENVLAYER_EXEC_ID"
_PROC = "/proc"


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """(state, pgid) of ``pid`` from /proc, or None if it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[2])


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
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if fields[1] == pgid or (marker is not None and _has_marker(pid, marker)):
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


def kill_tree(pgid: int, exec_id: str | None, *, grace: float = 1.0) -> list[int]:
    """SIGTERM the tree, wait up to ``grace`` seconds, then SIGKILL what is left.

    Returns the pids still alive after SIGKILL and a final short wait (normally empty).
    """
    members = tree_members(pgid, exec_id)
    _signal_all(pgid, members, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        members = tree_members(pgid, exec_id)
        if not members:
            return []
        time.sleep(0.02)
    _signal_all(pgid, members, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        members = tree_members(pgid, exec_id)
        if not members:
            return []
        time.sleep(0.02)
    return members
