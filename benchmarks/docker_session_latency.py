"""Docker session exec latency: envlayer's overhead over the bare-shell floor, measured in
the same run, interleaved.

One container; an envlayer session call (`true`) and a bare shell over one attached exec
socket (the floor of a session call: write `true; echo M`, read until M) and, as extra
information, a bare shell that keeps stderr apart as a session must (a marker on each
stream, read until both came) and the session's own shell protocol driven by a minimal
client (envlayer's init and call scripts over one attached exec socket, read until the
call's three markers came: what the shell side of a session call costs, without
envlayer's Python) alternate in
blocks (:func:`bench_timing.interleaved_medians`), so load changes hit both alike. Prints
the median of each, envlayer's overhead per call (the difference) and the ratio, then the
client's CPU time per call (``time.process_time`` over a further block of each), which
other load on the machine inflates far less than wall time.

To compare code versions in one run, point ``PYTHONPATH`` at another checkout (its
``envlayer`` and ``plugins/docker``) and run this same script right after:

    .venv/bin/python benchmarks/docker_session_latency.py [--image envlayer-test:busybox] [--calls 1200]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench_timing import interleaved_medians
from session_protocol import protocol_call

from envlayer.bench.baselines import docker_bare_shell as bare_shell
from envlayer.bench.interrupts import run_script


def cpu_per_call_us(run: Callable[[], object], calls: int) -> float:
    """Client CPU microseconds per call over ``calls`` calls."""
    start = time.process_time()
    for _ in range(calls):
        run()
    return (time.process_time() - start) / calls * 1e6


def protocol_shell(api: Any, container_id: str) -> tuple[Callable[[], None], Any]:
    """:func:`session_protocol.protocol_call` over one attached exec socket. Returns the
    call and the socket (close it when done)."""
    eid = api.exec_create(container_id, ["sh"], stdin=True, stdout=True, stderr=True, tty=False)["Id"]
    sock = api.exec_start(eid, socket=True)._sock
    return protocol_call(sock.sendall, lambda: sock.recv(65536)), sock


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--calls", type=int, default=1200, help="timed calls per variant")
    args = parser.parse_args()

    import docker
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    import envlayer

    api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    profile = f"envlayer-bench-{uuid.uuid4().hex[:8]}"
    env = DockerEnvironment(DockerOptions(image=args.image, timeout=60), task_id="latency", profile=profile)
    try:
        bare, sock = bare_shell(api, env.container_id)
        split, split_sock = bare_shell(api, env.container_id, split=True)
        protocol, protocol_sock = protocol_shell(api, env.container_id)
        variants = {"session": lambda: env.exec("true"), "floor": bare, "split": split, "protocol": protocol}
        medians = interleaved_medians(variants, args.calls, rounds=6)
        cpu = {label: cpu_per_call_us(run, args.calls // 3) for label, run in variants.items()}
        sock.close()
        split_sock.close()
        protocol_sock.close()
    finally:
        env.cleanup(force_remove=True)
        env.wait_for_cleanup(30)
        for volume in (api.volumes(filters={"label": "envlayer.managed=1"}) or {}).get("Volumes") or []:
            if (volume.get("Labels") or {}).get("envlayer.profile", "") == profile:
                api.remove_volume(volume["Name"], force=True)
    session, floor, split, protocol = (medians[k] for k in ("session", "floor", "split", "protocol"))
    checkout = envlayer.__file__.rsplit("/envlayer/", 1)[0]
    print(f"envlayer from {checkout}; {args.calls} calls per variant")
    print(f"session `true` median  {session:.3f} ms")
    print(f"bare shell floor       {floor:.3f} ms")
    print(f"stderr apart (extra)   {split:.3f} ms ({split / floor:.2f}x the floor)")
    print(f"envlayer overhead      {session - floor:.3f} ms per call ({session / floor:.2f}x the floor)")
    print(f"  over stderr apart    {session - split:.3f} ms per call ({session / split:.2f}x)")
    print(f"protocol, bare client  {protocol:.3f} ms ({protocol / floor:.2f}x the floor; the shell side)")
    print(f"  envlayer's client    {session - protocol:.3f} ms per call (session minus protocol)")
    cpus = ", ".join(f"{label} {us:.0f} us" for label, us in cpu.items())
    print(f"client CPU per call    {cpus}")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
