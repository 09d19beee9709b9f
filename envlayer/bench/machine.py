"""The machine a run measured, and the versions it measured: recorded with every run."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any


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


def machine_info(backends: list[str]) -> dict[str, Any]:
    """Cores, memory, kernel, Python, load, and the versions of what was measured."""
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
        "versions": distribution_versions(backends),
    }
    if "docker" in backends:
        info["versions"]["dockerd"] = docker_server_version()
    info["executable"] = sys.executable
    return info
