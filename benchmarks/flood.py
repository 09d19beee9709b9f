"""Flood throughput and peak memory of ``exec`` per backend, against the raw stream floor.

Each case reads ``head -c SIZE /dev/zero`` (1 GiB by default) to its end, with the
default output caps on (1 MiB kept per stream), in a fresh child interpreter, and reports
the wall time, the throughput and the child's peak RSS (``ru_maxrss``). The floors read
the same bytes from the same transport with nothing on top, discarding them:

* local: a pipe from ``head`` (``os.read`` of 1 MiB);
* Docker: one attached ``docker exec`` socket (``recv`` of 1 MiB, frames not parsed);
* SSH: one paramiko channel (``recv`` of 1 MiB), on a private sshd on 127.0.0.1.

Medians of ``--rounds`` rounds (cases interleaved). Needs the test image and, for SSH,
what the SSH tests need (root, openssh-server)::

    uv run --no-sync python benchmarks/flood.py [--size-mb 1024] [--rounds 3] [--image envlayer-test:busybox]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_sshd import start_optional_sshd

from envlayer.bench.interrupts import run_script

CHILD = r"""
import json, os, resource, sys, time
case, size, image, profile, ssh = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
cmd = f"head -c {size} /dev/zero"

def envlayer_run(env):
    env.exec("true")
    t = time.perf_counter()
    r = env.exec(cmd, timeout=600)
    took = time.perf_counter() - t
    assert r.exit_code == 0 and r.stdout_truncation is not None and r.stdout_truncation.total == size, r
    env.cleanup()
    return took

if case == "local":
    from envlayer.local.backend import LocalEnvironment
    took = envlayer_run(LocalEnvironment())
elif case == "local-floor":
    import subprocess
    t = time.perf_counter()
    p = subprocess.Popen(["head", "-c", str(size), "/dev/zero"], stdout=subprocess.PIPE)
    n = 0
    while chunk := os.read(p.stdout.fileno(), 1 << 20):
        n += len(chunk)
    p.wait()
    took = time.perf_counter() - t
    assert n == size
elif case in ("docker-session", "docker-oneshot"):
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions
    mode = case.split("-")[1]
    took = envlayer_run(DockerEnvironment(DockerOptions(image=image, exec_mode=mode), task_id="flood", profile=profile))
elif case == "docker-floor":
    import docker
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions
    env = DockerEnvironment(DockerOptions(image=image), task_id="flood", profile=profile)
    api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    t = time.perf_counter()
    eid = api.exec_create(env.container_id, ["head", "-c", str(size), "/dev/zero"])["Id"]
    sock = api.exec_start(eid, socket=True)._sock
    n = 0
    while chunk := sock.recv(1 << 20):
        n += len(chunk)
    took = time.perf_counter() - t
    assert n >= size
    env.cleanup()
elif case in ("ssh-session", "ssh-oneshot"):
    from envlayer_ssh.backend import SSHEnvironment
    from envlayer_ssh.options import SSHOptions
    took = envlayer_run(SSHEnvironment(SSHOptions(**ssh, mode=case.split("-")[1])))
elif case == "ssh-floor":
    import paramiko
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(ssh["host"], port=ssh["port"], username=ssh["user"], key_filename=ssh["key_files"][0],
                   allow_agent=False, look_for_keys=False)
    t = time.perf_counter()
    channel = client.get_transport().open_session()
    channel.exec_command(cmd)
    n = 0
    while chunk := channel.recv(1 << 20):
        n += len(chunk)
    took = time.perf_counter() - t
    assert n == size
    client.close()
print(json.dumps({"seconds": took, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--skip-ssh", action="store_true")
    args = parser.parse_args()
    size = args.size_mb << 20
    profile = f"envlayer-bench-flood-{uuid.uuid4().hex[:8]}"
    cases = ["local-floor", "local", "docker-floor", "docker-session", "docker-oneshot"]
    server, ssh = start_optional_sshd(args.skip_ssh)
    if server is not None:
        cases += ["ssh-floor", "ssh-session", "ssh-oneshot"]
    results: dict[str, list[dict[str, float]]] = {c: [] for c in cases}
    try:
        for _ in range(args.rounds):
            for case in cases:
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, case, str(size), args.image, profile, json.dumps(ssh)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results[case].append(json.loads(out.strip().splitlines()[-1]))
    finally:
        if server is not None:
            server.close()
        import docker

        api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        for s in api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}):
            api.remove_container(s["Id"], force=True)
        for volume in (api.volumes(filters={"label": f"envlayer.profile={profile}"}) or {}).get("Volumes") or []:
            api.remove_volume(volume["Name"], force=True)
    print(f"flood of {args.size_mb} MiB, medians of {args.rounds} rounds, output caps on (1 MiB kept per stream)")
    print(f"{'case':<16} {'seconds':>8} {'MB/s':>8} {'peak RSS MB':>12}   vs floor")
    for case in cases:
        secs = statistics.median(r["seconds"] for r in results[case])
        peak = statistics.median(r["peak_mb"] for r in results[case])
        floor = statistics.median(r["seconds"] for r in results[case.split("-")[0] + "-floor"])
        ratio = "floor" if case.endswith("floor") else f"{secs / floor:.2f}x the floor's time"
        print(f"{case:<16} {secs:8.2f} {size / secs / 1e6:8.0f} {peak:12.1f}   {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
