"""A third-party-style backend written the way an outside author would: it subclasses
``envlayer.Environment``, implements only the required methods, and declares nothing.

Commands run as plain local subprocesses inside a private scratch directory; file paths
are confined to that directory. It has no ``force_remove``, no ``wait_for_cleanup``,
no ``reap_orphans``: envlayer's dispatcher must cope.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence

from envlayer import Environment, ExecResult, FileTooLarge, SandboxFileNotFound, SandboxIsADirectory
from envlayer.execution.output import CappedBuffer


class ToyEnvironment(Environment):
    name = "toy"

    def __init__(self, options=None, *, task_id: str = "default", profile: str = "default") -> None:
        super().__init__(options, task_id=task_id, profile=profile)
        self.root = tempfile.mkdtemp(prefix="envlayer-toy-")
        if self.options.file_root is None:
            self.options.file_root = self.root

    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        request = self.make_request(command, cwd=cwd, env=env, timeout=timeout, stdin=stdin)
        command, cwd, env = request.command, request.cwd, request.env
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        limit, data, start = request.timeout, request.stdin, request.start
        run_cwd = os.path.join(self.root, cwd) if cwd else self.root
        if not os.path.isdir(run_cwd):
            message = f"working directory does not exist: {cwd}\n".encode()
            return ExecResult(126, b"", message, time.monotonic() - start, timeout=limit)
        proc = subprocess.Popen(
            argv,
            cwd=run_cwd,
            env={**os.environ, **self.options.env, **(env or {})},
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(data, timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            return ExecResult(124, out, err, time.monotonic() - start, timed_out=True, timeout=limit)
        return self._finished(proc.returncode, out, err, time.monotonic() - start, timeout=limit)

    def _finished(self, exit_code: int, out: bytes, err: bytes, duration: float, timeout: float | None) -> ExecResult:
        """The result of a finished command, each stream capped by the options."""
        streams = []
        for raw in (out, err):
            buf = CappedBuffer(self.options.max_output_bytes, self.options.output_policy)
            buf.write(raw)
            streams.append(buf)
        return ExecResult(
            exit_code,
            streams[0].getvalue(),
            streams[1].getvalue(),
            duration,
            timeout=timeout,
            stdout_truncation=streams[0].truncation,
            stderr_truncation=streams[1].truncation,
        )

    def read_file(self, path: str) -> bytes:
        self._ensure_open()
        full = self.resolve_path(path, self.root)
        if os.path.isdir(full):
            raise SandboxIsADirectory(path)
        if not os.path.exists(full):
            raise SandboxFileNotFound(path)
        size = os.path.getsize(full)
        if size > self.options.max_file_bytes:
            raise FileTooLarge(path, size, self.options.max_file_bytes)
        with open(full, "rb") as fh:
            return fh.read()

    def write_file(self, path: str, data: bytes | str) -> None:
        self._ensure_open()
        payload = data.encode() if isinstance(data, str) else data
        if len(payload) > self.options.max_file_bytes:
            raise FileTooLarge(path, len(payload), self.options.max_file_bytes)
        full = self.resolve_path(path, self.root)
        if os.path.isdir(full):
            raise SandboxIsADirectory(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(payload)

    def cleanup(self) -> None:
        self._closed = True
        shutil.rmtree(self.root, ignore_errors=True)
