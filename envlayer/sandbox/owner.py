"""Who owns a private sandbox: the owner label value and the liveness check, for any
backend that labels its sandboxes (Docker's ``envlayer.owner``, Kubernetes' ``envlayer/owner``).

A sandbox made with ``persist_across_processes = false`` belongs to exactly one process.
Its owner label is ``<pid>-<start time>-<host>``: the pid and the kernel start time of
the owning process (from ``/proc``, so a recycled pid is not mistaken for the owner) and
the host (name and pid namespace). When the owner died without cleaning up (SIGKILL,
OOM), the sandbox keeps running: a backend's reaper removes it once :func:`owner_is_dead`
says so. Sandboxes owned on other hosts are never judged.

Linux only: elsewhere no owner label is written and this rule never applies.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket

from envlayer.execution.tree_kill import proc_stat


def _start_time(pid: int) -> str | None:
    """The kernel start time of ``pid``; None when it does not run: gone, or a zombie
    (it exited and its parent has not reaped it yet, as after a SIGKILL)."""
    fields = proc_stat(pid)
    return None if fields is None or fields[0] == b"Z" else fields[19].decode()


def _host() -> str:
    """This host and pid namespace: ``<hostname slug>.<8 hex>`` (two containers with the
    same host name still differ by their pid namespace)."""
    name = socket.gethostname()
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    digest = hashlib.sha256(f"{name}\0{ns}".encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_.]', '_', name)[:20]}.{digest}"


def owner_label() -> str | None:
    """The label value for the current process, or None where /proc is missing."""
    start = _start_time(os.getpid())
    return None if start is None else f"{os.getpid()}-{start}-{_host()}"


def owner_is_dead(value: str) -> bool:
    """True only when ``value`` names a process of THIS host that no longer runs.
    Malformed values and other hosts' owners are never "dead". Pure apart from /proc."""
    parts = value.split("-", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or parts[2] != _host():
        return False
    return _start_time(int(parts[0])) != parts[1]
