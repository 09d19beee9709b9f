"""Docker session exec latency: envlayer's overhead over the bare-shell floor, measured in
the same run, interleaved.

One container; an envlayer session and a bare shell over one attached exec socket (the
floor of a session call: write `true; echo M`, read until M) take turns in blocks of
``--block`` calls for ``--rounds`` rounds, so load changes hit both alike. Prints the
median of each, envlayer's overhead per call (median difference) and the ratio, and the
client's CPU time per call (``time.process_time``), which other load on the machine
inflates far less than wall time.

To compare code versions in one run, point ``PYTHONPATH`` at another checkout (its
``envlayer`` and ``plugins/docker``) and run this same script again right after:

    .venv/bin/python benchmarks/docker_session_latency.py [--image envlayer-test:busybox] [--rounds 10] [--block 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from docker_exec import bare_shell


def timed(fn, count: int, cpu: list[float] | None = None) -> list[float]:
    """Wall time of each of ``count`` calls; appends the block's CPU time per call to ``cpu``."""
    samples = []
    started_cpu = time.process_time()
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    if cpu is not None:
        cpu.append((time.process_time() - started_cpu) / count)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=100)
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
        session_call = lambda: env.exec("true")  # noqa: E731
        timed(session_call, 20)
        timed(bare, 20)
        session: list[float] = []
        floor: list[float] = []
        session_cpu: list[float] = []
        floor_cpu: list[float] = []
        for _ in range(args.rounds):
            session += timed(session_call, args.block, session_cpu)
            floor += timed(bare, args.block, floor_cpu)
        sock.close()
    finally:
        env.cleanup(force_remove=True)
        env.wait_for_cleanup(30)
        for volume in (api.volumes(filters={"label": "envlayer.managed=1"}) or {}).get("Volumes") or []:
            if (volume.get("Labels") or {}).get("envlayer.profile", "") == profile:
                api.remove_volume(volume["Name"], force=True)
    s_ms, f_ms = statistics.median(session) * 1000, statistics.median(floor) * 1000
    checkout = envlayer.__file__.rsplit("/envlayer/", 1)[0]
    print(f"envlayer from {checkout}; {args.rounds} rounds x {args.block} calls each")
    print(f"session `true` median  {s_ms:.3f} ms")
    print(f"bare shell floor       {f_ms:.3f} ms")
    print(f"envlayer overhead      {s_ms - f_ms:.3f} ms per call ({s_ms / f_ms:.2f}x the floor)")
    s_cpu, f_cpu = statistics.median(session_cpu) * 1e6, statistics.median(floor_cpu) * 1e6
    print(f"client CPU per call    session {s_cpu:.0f} us, floor {f_cpu:.0f} us (median of the blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
