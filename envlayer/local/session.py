"""The local backend's persistent shell: one ``sh`` process per environment, driven by
the core's persistent-shell protocol (:mod:`envlayer.execution.shell_session`) over its pipes.

``cd``, ``export``, shell options and functions persist from one call to the next, with
exactly the semantics of the Docker and SSH sessions (see that module). Locally the
sandbox is this machine, so :func:`nearest_existing` can check the shell's directory
before each call: when it was deleted, the call runs in its nearest existing ancestor
and the result's ``notice`` says so (a shell left in a deleted directory would fail
every later command that touches a file). A start directory the shell never reached
(the ``cwd`` option naming a directory that does not exist) is exit 126, as a per-call
``cwd`` is.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping

from envlayer.execution.collector import OutputCollector
from envlayer.execution.session_dirs import claim_script
from envlayer.execution.shell_script import OWNER_BOUND, SESSION_VAR, quote_path
from envlayer.execution.shell_session import PersistentShell, shell_missing
from envlayer.execution.streams import ProcessStream
from envlayer.request import ExecRequest
from envlayer.result import ExecResult

_ASIDE_TIMEOUT = 30.0
_CLOSE_WAIT = 2.0


def is_directory(path: str) -> bool:
    """Whether ``path`` names a directory now (following links): ``access`` of ``path/.``,
    which a file or a missing path fails; half the cost of ``os.path.isdir``, which builds a
    whole ``stat`` result (this runs before every session call)."""
    return os.access(f"{path}/.", os.F_OK)


def nearest_existing(path: str) -> str:
    """``path`` itself when it is a directory, else its nearest ancestor that is (``/``
    at worst). Pure apart from ``stat`` calls."""
    current = os.path.abspath(path)
    while not os.path.isdir(current) and current != os.path.dirname(current):
        current = os.path.dirname(current)
    return current


def moved_notice(gone: str, now: str) -> str:
    """The notice of a call that ran elsewhere because its directory was deleted."""
    return f"working directory {gone} no longer exists; the command ran in {now}, its nearest existing parent"


def _aside(argv: list[str]) -> None:
    subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_ASIDE_TIMEOUT, check=False)


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


class LocalSession:
    """One environment's shell. Callers hold the environment's session lock while
    running a command; a busy session is the caller's cue to run the command one-shot
    instead."""

    def __init__(self, shell: str, start_dir: str, environment: Callable[[], Mapping[str, str]]) -> None:
        self._environment = environment
        self._stream: ProcessStream | None = None
        self.shell = PersistentShell(
            self._open, run_aside=_aside, shell=shell, start_dir=start_dir, upload=_write_private
        )

    def _open(self) -> ProcessStream:
        """Start the shell; it first claims its private directory and removes the ones dead
        sessions left (:mod:`envlayer.execution.session_dirs`: a shell killed by a signal
        cannot remove its own), and removes it when its input ends between calls (its owner
        is gone: :data:`~envlayer.execution.shell_script.OWNER_BOUND`)."""
        env = {**self._environment(), SESSION_VAR: self.shell.session_id}
        start = nearest_existing(self.shell.cwd or self.shell.start_dir or "/")
        try:
            self._stream = ProcessStream.spawn([self.shell.shell], env=env, cwd=start)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise shell_missing(self.shell.shell) from exc
        try:
            self._stream.write(claim_script(self.shell.session_id) + OWNER_BOUND.encode())
        except OSError:
            pass  # the shell closed its input at once: PersistentShell.start reports it
        return self._stream

    @property
    def cwd(self) -> str | None:
        """The shell's working directory after its last command (None before the first)."""
        return self.shell.cwd

    def run(self, request: ExecRequest, collector: OutputCollector) -> ExecResult:
        """Run ``request`` in the shell (the caller holds the session lock); see the module
        docstring for a deleted working directory."""
        notice = ""
        prelude = ""
        current = self.shell.cwd
        if current and not is_directory(current):
            fallback = nearest_existing(current)
            notice = moved_notice(current, fallback)
            if self.shell.alive:
                prelude = f"cd -- {quote_path(fallback)}"
            else:
                self.shell.cwd = fallback
        outcome = self.shell.run(request, collector, prelude=prelude)
        result = collector.result(request, outcome.exit_code, timed_out=outcome.timed_out, recovered=outcome.recovered)
        return result.with_notice(notice) if notice else result

    def close(self) -> None:
        """End the shell and reap its process, waiting up to :data:`_CLOSE_WAIT` seconds
        (best effort; never raises)."""
        try:
            self.shell.close()
            if self._stream is not None:
                self._stream.proc.wait(_CLOSE_WAIT)
        except Exception:
            pass
