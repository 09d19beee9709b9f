"""Local session exec latency, taken apart: where a session call's time goes beyond the
bare-shell floor, measured in the same run, interleaved.

Four variants alternate in blocks (:func:`bench_timing.interleaved_medians`), each running
``true`` in a persistent ``/bin/sh`` over pipes:

* ``session``: ``LocalEnvironment.exec("true")`` in session mode;
* ``floor``: a bare shell sent ``true; echo M``, read until M (``envlayer bench``'s floor);
* ``split``: a bare shell that keeps stderr apart (a marker on each stream);
* ``protocol``: the session's own shell protocol (envlayer's init and call scripts) driven
  by a minimal client that reads until the call's three markers came: the shell side of
  a session call without envlayer's Python.

Then, over a further block of each, the client's CPU per call (``time.process_time``) and
the shell's (``/proc/<pid>/schedstat``, on-CPU time): figures that other load on the
machine inflates far less than wall time.

Run: ``uv run --no-sync python benchmarks/local_session_latency.py [--calls 1200]``
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from bench_timing import interleaved_medians
from session_protocol import protocol_call

from envlayer.bench.baselines import shell_call, split_shell_call
from envlayer.bench.interrupts import run_script
from envlayer.local.backend import LocalEnvironment, LocalOptions


class PipedShell:
    """``/bin/sh`` over three pipes; :meth:`recv` returns what the ready pipes hold."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["/bin/sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self.stdin = self.proc.stdin.fileno()
        self.outputs = (self.proc.stdout.fileno(), self.proc.stderr.fileno())
        self._poller = select.poll()
        for fd in self.outputs:
            self._poller.register(fd, select.POLLIN)

    def send(self, data: bytes) -> None:
        os.write(self.stdin, data)

    def recv_stdout(self) -> bytes:
        return os.read(self.outputs[0], 65536)

    def recv(self) -> bytes:
        return b"".join(os.read(fd, 65536) for fd, _ in self._poller.poll())

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            assert pipe is not None
            pipe.close()
        self.proc.wait()


def on_cpu_seconds(pid: int) -> float:
    """The time process ``pid`` has spent on a CPU so far."""
    with open(f"/proc/{pid}/schedstat") as fh:
        return int(fh.read().split()[0]) / 1e9


def per_call_us(run: Callable[[], object], calls: int, clock: Callable[[], float]) -> float:
    """Microseconds of ``clock`` per call over ``calls`` calls."""
    start = clock()
    for _ in range(calls):
        run()
    return (clock() - start) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1200, help="timed calls per variant")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="envlayer-bench-local-")
    env = LocalEnvironment(LocalOptions(cwd=workdir, exec_mode="session"), task_id=f"latency-{uuid.uuid4().hex[:8]}")
    shells = {name: PipedShell() for name in ("floor", "split", "protocol")}
    try:
        variants: dict[str, Callable[[], object]] = {
            "session": lambda: env.exec("true"),
            "floor": shell_call(shells["floor"].send, shells["floor"].recv_stdout),
            "split": split_shell_call(shells["split"].send, shells["split"].recv),
            "protocol": protocol_call(shells["protocol"].send, shells["protocol"].recv),
        }
        medians = interleaved_medians(variants, args.calls, rounds=6)
        block = args.calls // 3
        client = {label: per_call_us(run, block, time.process_time) for label, run in variants.items()}
        pids = {"session": int(env.exec("echo $$").stdout), **{k: shell.proc.pid for k, shell in shells.items()}}
        shell_cpu = {
            label: per_call_us(variants[label], block, lambda pid=pid: on_cpu_seconds(pid))
            for label, pid in pids.items()
        }
    finally:
        env.cleanup()
        for shell in shells.values():
            shell.close()
        os.rmdir(workdir)
    session, floor, split, protocol = (medians[k] for k in ("session", "floor", "split", "protocol"))
    print(f"{args.calls} calls per variant; medians of 6 interleaved blocks")
    print(f"session `true` median  {session:.4f} ms ({session / floor:.2f}x the floor)")
    print(f"bare shell floor       {floor:.4f} ms")
    print(f"stderr apart (extra)   {split:.4f} ms ({split / floor:.2f}x the floor)")
    print(f"protocol, bare client  {protocol:.4f} ms ({protocol / floor:.2f}x the floor; the shell side)")
    print(f"  envlayer's client    {session - protocol:.4f} ms per call (session minus protocol)")
    print("client CPU per call    " + ", ".join(f"{k} {v:.1f} us" for k, v in client.items()))
    print("shell CPU per call     " + ", ".join(f"{k} {v:.1f} us" for k, v in shell_cpu.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
