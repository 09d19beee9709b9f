"""Check that a secret passed to a command never shows where other users or logs see it.

A per-command variable (``exec(env={NAME: secret})``, ``envlayer exec -e NAME``) must reach
the command and nothing else: not any process's command line on this host (``ps`` shows
those to every user; container and SSH-on-localhost processes are host processes too),
not envlayer's logs or error messages. Helpers here run a command that holds the secret
while polling every command line on the host, for the API and for the CLI.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from envlayer.environment import Environment
from envlayer.result import ExecResult

ENVLAYER_SCRIPT = shutil.which("envlayer", path=os.path.dirname(sys.executable)) or "envlayer"
"""The ``envlayer`` script installed next to this interpreter."""

VAR = "EL_TEST_SECRET"
PROBE = f'sleep 1.5; printf %s "${VAR}"'
"""Runs long enough to be seen, then prints the secret (so the test knows it arrived)."""


def make_marker() -> str:
    """A secret no process would hold by chance."""
    return f"envlayer-secret-{secrets.token_hex(12)}"


def command_lines_holding(marker: str) -> list[str]:
    """Command lines of this host's processes that contain ``marker``."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        if needle in raw:
            found.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return found


def _while_scanning(marker: str, work: Callable[[], object]) -> tuple[object, list[str]]:
    leaks: list[str] = []
    done = threading.Event()

    def scan() -> None:
        while not done.is_set():
            leaks.extend(line for line in command_lines_holding(marker) if line not in leaks)
            time.sleep(0.05)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        return work(), leaks
    finally:
        done.set()
        scanner.join()


def exec_while_scanning(env: Environment, marker: str) -> tuple[ExecResult, list[str]]:
    """Run :data:`PROBE` on ``env`` with the secret in its per-call ``env``; returns the
    result and every host command line seen holding the secret meanwhile."""
    result, leaks = _while_scanning(marker, lambda: env.exec(PROBE, env={VAR: marker}, timeout=60))
    assert isinstance(result, ExecResult)
    return result, leaks


def cli_exec_while_scanning(
    args: Sequence[str], marker: str, environ: Mapping[str, str], *, envlayer: str = ENVLAYER_SCRIPT
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``envlayer exec ARGS -e VAR PROBE`` with the secret in the caller's environment only;
    returns the finished process and the host command lines seen holding the secret."""
    argv = [envlayer, "exec", *args, "-e", VAR, PROBE]
    full = {**environ, VAR: marker}
    done, leaks = _while_scanning(
        marker, lambda: subprocess.run(argv, capture_output=True, text=True, timeout=120, env=full)
    )
    assert isinstance(done, subprocess.CompletedProcess)
    return done, leaks
