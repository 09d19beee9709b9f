"""The machine a run measured, and the versions it measured: recorded with every run."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

LOCAL_PROCESSES = frozenset({"local"})
"""Backends whose shells are processes the bench itself starts on this machine: their
session measures run on one CPU (:func:`one_cpu`) unless the run is told ``--no-pin``."""


def pinnable_cpu() -> int | None:
    """The CPU a run pins local measures to: the lowest this process may run on, or None
    where the system cannot pin (no ``sched_setaffinity``) or there is only one."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    return min(allowed) if len(allowed) > 1 else None


@contextmanager
def one_cpu(cpu: int | None) -> Iterator[None]:
    """Run the block on ``cpu`` alone (nothing for None): the calling thread, and so every
    process it starts meanwhile (a session shell, a bare baseline shell), is pinned to it;
    the thread's former set is restored after. A client and the shell it talks to then
    share one CPU whoever is measured: on a machine with more than one, the CPU a shell
    first lands on decides whether each call pays two cross-CPU wake-ups (about 20 us each
    on a 2-vCPU VM), which would otherwise decide the ratio of two shells' figures."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def memory_bytes() -> int | None:
    """Physical memory of this machine, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where there are none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def docker_server_version() -> str | None:
    """The Docker daemon's version from the ``docker`` CLI, or None without one."""
    if shutil.which("docker") is None:
        return None
    try:
        proc = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def distribution_versions(backends: list[str]) -> dict[str, str]:
    """Installed versions of envlayer and of the distribution of each backend."""
    from envlayer.discovery.backend_registry import list_backends

    versions = {"envlayer": metadata.version("envlayer")}
    versions.update({info.distribution: info.version for info in list_backends() if info.name in backends})
    return versions


def machine_info(backends: list[str], *, pinned_cpu: int | None = None) -> dict[str, Any]:
    """Cores, memory, kernel, Python, load, the CPU local measures were pinned to (None:
    not pinned), and the versions of what was measured."""
    uname = platform.uname()
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "system": uname.system,
        "kernel": uname.release,
        "machine": uname.machine,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "load_average": load_average(),
        "pinned_cpu": pinned_cpu,
        "versions": distribution_versions(backends),
    }
    if "docker" in backends:
        info["versions"]["dockerd"] = docker_server_version()
    info["executable"] = sys.executable
    return info
