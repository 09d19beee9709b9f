"""File calls as an agent makes them: single ``read_file``/``write_file`` calls of a few
sizes, directory transfers of many small files, and the agent loop (read a file, write it
back changed, run a command).

The functions use only the :class:`~envlayer.environment.Environment` interface (and the
standard library), so a benchmark can load this file by path and run the very same loop
against an older envlayer (``benchmarks/file_calls.py`` does, for before/after figures).
"""

from __future__ import annotations

import filecmp
import os
import shlex
import tempfile
import time
from collections.abc import Callable
from typing import Any

from envlayer.dispatch import run

FILE_SIZES = (1024, 256 * 1024, 1 << 20)
"""The sizes of the single file calls: 1 KiB, 256 KiB, 1 MiB."""

AGENT_FILE_BYTES = 20 * 1024
"""The size of the file the agent loop edits."""

AGENT_COMMAND = "wc -c < {path}"
"""The command of each round of the agent loop (``{path}``: the file's path)."""


def file_call_samples(env: Any, path: str, size: int, calls: int) -> dict[str, list[float]]:
    """Seconds of ``calls`` writes and ``calls`` reads of ``size`` random bytes at
    ``path``, alternating (one warm-up pair first). Raises ``RuntimeError`` when a read
    does not return what was written."""
    data = os.urandom(size)
    env.write_file(path, data)
    env.read_file(path)
    samples: dict[str, list[float]] = {"write": [], "read": []}
    for _ in range(calls):
        began = time.perf_counter()
        env.write_file(path, data)
        samples["write"].append(time.perf_counter() - began)
        began = time.perf_counter()
        back = env.read_file(path)
        samples["read"].append(time.perf_counter() - began)
        if back != data:
            raise RuntimeError(f"read_file returned {len(back)} bytes that differ from the {size} written")
    return samples


def directory_samples(env: Any, remote: str, calls: int, files: int = 100, size: int = 1024) -> dict[str, list[float]]:
    """Seconds of ``calls`` ``upload_dir`` of a host tree of ``files`` files of ``size``
    random bytes in 10 directories into ``remote``, each followed by ``download_dir`` of it
    into a new host directory (one warm-up pair first). Raises ``RuntimeError`` when what
    came back differs from what went up."""
    samples: dict[str, list[float]] = {"upload_dir": [], "download_dir": []}
    with tempfile.TemporaryDirectory() as scratch:
        tree = os.path.join(scratch, "tree")
        for i in range(files):
            os.makedirs(os.path.join(tree, f"d{i % 10}"), exist_ok=True)
            with open(os.path.join(tree, f"d{i % 10}", f"f{i}"), "wb") as out:
                out.write(os.urandom(size))
        for call in range(calls + 1):
            began = time.perf_counter()
            env.upload_dir(tree, remote)
            went = time.perf_counter() - began
            back = os.path.join(scratch, f"back{call}")
            began = time.perf_counter()
            env.download_dir(remote, back)
            came = time.perf_counter() - began
            if filecmp.dircmp(tree, back).diff_files or not all(
                filecmp.cmp(os.path.join(tree, d, n), os.path.join(back, d, n), shallow=False)
                for d in os.listdir(tree)
                for n in os.listdir(os.path.join(tree, d))
            ):
                raise RuntimeError(f"download_dir of {remote} returned other files than went up")
            if call:  # the first pair warms up
                samples["upload_dir"].append(went)
                samples["download_dir"].append(came)
    return samples


def edited(text: bytes, round_: int) -> bytes:
    """``text`` with one line changed, as an editor's change would be (the size stays)."""
    line = f"round {round_:06d}\n".encode()
    return line + text[len(line) :]


def agent_loop_samples(
    read: Callable[[], bytes], write: Callable[[bytes], None], run: Callable[[], object], rounds: int
) -> list[float]:
    """Seconds of each of ``rounds`` rounds of: ``read()`` the file, ``write()`` it back
    changed, ``run()`` a command. The same loop serves envlayer and a baseline."""
    samples = []
    for round_ in range(rounds):
        began = time.perf_counter()
        text = read()
        write(edited(text, round_))
        run()
        samples.append(time.perf_counter() - began)
    return samples


def envlayer_agent_loop(env: Any, path: str, rounds: int) -> list[float]:
    """:func:`agent_loop_samples` through ``env``, editing the file ``path`` (absolute)."""
    env.write_file(path, os.urandom(AGENT_FILE_BYTES // 2).hex().encode())
    command = AGENT_COMMAND.format(path=shlex.quote(path))

    def command_call() -> None:
        result = run(env, command)
        if result.exit_code != 0:
            raise RuntimeError(f"the agent loop's command failed: {result.stderr!r}")

    return agent_loop_samples(
        lambda: env.read_file(path), lambda data: env.write_file(path, data), command_call, rounds
    )


def docker_cli_agent_loop(container_id: str, path: str, rounds: int, docker: str = "docker") -> list[float]:
    """:func:`agent_loop_samples` through the ``docker`` CLI, as a harness without envlayer
    does it: ``docker exec cat`` to read, ``docker cp`` of a local file to write, ``docker
    exec`` for the command. ``path`` (absolute, on the container's own filesystem: ``docker
    cp`` does not see tmpfs mounts) is removed afterwards."""
    import subprocess
    import tempfile

    def run(*argv: str) -> bytes:
        return subprocess.run([docker, *argv], capture_output=True, check=True).stdout

    command = AGENT_COMMAND.format(path=shlex.quote(path))
    with tempfile.TemporaryDirectory(prefix="envlayer-bench-cp-") as local:
        staged = os.path.join(local, os.path.basename(path))

        def write(data: bytes) -> None:
            with open(staged, "wb") as fh:
                fh.write(data)
            run("cp", staged, f"{container_id}:{path}")

        try:
            write(os.urandom(AGENT_FILE_BYTES // 2).hex().encode())
            return agent_loop_samples(
                lambda: run("exec", container_id, "cat", path),
                write,
                lambda: run("exec", container_id, "sh", "-c", command),
                rounds,
            )
        finally:
            subprocess.run([docker, "exec", container_id, "rm", "-f", path], capture_output=True)
