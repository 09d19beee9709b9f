"""A command's stdin before and after, in the same run: medians of ``cat >/dev/null``
(and ``wc -c``, checking the count) fed 1 KiB, 64 KiB and 1 MiB of random bytes, per
backend, through an older envlayer ("before") and this checkout ("after").

Each version runs in a child interpreter of its own holding one environment per backend
(:class:`file_calls.Child`); the driver asks both children for blocks of calls in turn,
so a change in machine load hits both alike.

    .venv/bin/python benchmarks/stdin_calls.py [--before DIR | --before-commit 114a480]
        [--backend local --backend docker --backend ssh --backend kubernetes]
        [--calls 30] [--image envlayer-test:debian] [--ssh-rtt-ms 0]

SSH needs ``sshd`` (the tests' server is started; with ``--ssh-rtt-ms`` it is reached
through a local proxy that holds each chunk half that long in each direction, as a network
would: loopback has no round trip to speak of); Kubernetes runs against the tests' fake API
server (backed by Docker). Prints a table of medians and after/before ratios.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from file_calls import (
    CHILD_ENV,
    ROOT,
    Child,
    backend_options,
    before_after_ms,
    before_after_parser,
    clone,
    start_services,
)

from envlayer.bench.interrupts import run_script
from envlayer.bench.measure import size_label

SIZES = (1024, 64 * 1024, 1 << 20)
COMMANDS = ("cat >/dev/null", "wc -c")

CHILD = (
    CHILD_ENV
    + r"""
import os, time
import envlayer
run = getattr(envlayer, "run", None) or (lambda env, command, **keywords: env.exec(command, **keywords))
try:
    run(env, "true")
    print(json.dumps({}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        data = os.urandom(ask["size"])
        times = []
        for _ in range(ask["calls"]):
            start = time.perf_counter()
            result = run(env, ask["command"], stdin=data)
            times.append(time.perf_counter() - start)
            if result.exit_code != 0 or (ask["command"] == "wc -c" and int(result.stdout) != len(data)):
                raise SystemExit(f"wrong result: {result}")
        print(json.dumps({"times": times}), flush=True)
finally:
    removed(env)
"""
)


class DelayProxy:
    """A TCP proxy on a loopback port to ``target``'s that delivers each chunk ``delay``
    seconds after it came, in each direction (a round trip of twice that; chunks keep
    flowing meanwhile, so throughput is not cut). Daemon threads; :meth:`close` stops it."""

    def __init__(self, target: int, delay: float) -> None:
        self.target, self.delay = target, delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for end in (client, server):  # no Nagle: a small write behind an unacknowledged one waits 40 ms
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for source, sink in ((client, server), (server, client)):
                held: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._take, args=(source, held), daemon=True).start()
                threading.Thread(target=self._give, args=(sink, held), daemon=True).start()

    def _take(self, source: socket.socket, held: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = source.recv(1 << 16)
            except OSError:
                data = b""
            held.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _give(self, sink: socket.socket, held: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, data = held.get()
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


def main() -> int:
    parser = before_after_parser(__doc__, before_commit="114a480", calls=30)
    parser.add_argument("--ssh-rtt-ms", type=float, default=0.0, help="a round trip to sshd of this many ms")
    args = parser.parse_args()
    backends = args.backend or ["local", "docker"]
    profile = f"bench-stdin-{uuid.uuid4().hex[:6]}"
    blocks = 3
    print(f"{'backend':<11} {'measure':<28} {'before ms':>10} {'after ms':>10}  after/before", flush=True)
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="envlayer-bench-stdin-"))
        before = Path(args.before) if args.before else clone(args.before_commit, tmp)
        services = start_services(backends, stack, tmp)
        proxy = None
        if "ssh" in backends and args.ssh_rtt_ms > 0:
            proxy = DelayProxy(services["ssh"].port, args.ssh_rtt_ms / 2000)
            stack.callback(proxy.close)
        for backend in backends:
            children: dict[str, Child] = {}
            samples: dict[str, dict[str, list[float]]] = {}
            try:
                for label, root in (("before", before), ("after", ROOT)):
                    workdir = os.path.join(tmp, f"{backend}-{label}")
                    os.makedirs(workdir, exist_ok=True)
                    opts = backend_options(backend, args.image, services, workdir)
                    if backend == "ssh" and proxy is not None:
                        opts.update(port=proxy.port, host_key_policy="insecure")
                    children[label] = Child(root, backend, opts, profile, label, program=CHILD)
                for size in SIZES:
                    for command in COMMANDS:
                        for _ in range(blocks):
                            for label, child in children.items():
                                answer = child.ask(size=size, command=command, calls=max(1, args.calls // blocks))
                                measure = f"{command} {size_label(size)}"
                                samples.setdefault(measure, {}).setdefault(label, []).extend(answer["times"])
            finally:
                for child in children.values():
                    child.close()
            for name, by_version in samples.items():
                b, a = before_after_ms(by_version)
                calls = len(by_version["after"])
                print(f"{backend:<11} {name:<28} {b:10.2f} {a:10.2f}  {a / b:.2f}x ({calls} calls each)")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
