"""Docker backend speed, against baselines measured in the same run.

Cases (medians; a fresh container per group; containers and workspace volumes all removed at the end):

* warm exec of `true`: envlayer session, a bare shell over one attached exec socket (the
  floor of a session call: write `true; echo M`, read until M), envlayer one-shot,
  `docker exec` via the CLI per call, plain docker-py `exec_run` per call;
* cold: constructing a DockerEnvironment for a new task (create + start) to the first
  exec result;
* attach from a new process: a child interpreter (docker SDK already imported) times
  constructing the environment of an existing running container plus its first exec;
* reaper sweep over N exited containers: `reap_orphans` vs a per-container CLI sweep
  (one `docker ps`, then `docker inspect` + `docker rm` for each), on two identical sets.

Targets: session median < 1 ms, within 1.5x of the bare shell and >= 40x faster than the
CLI; attach < 50 ms; sweep >= 10x faster than the CLI sweep.

    .venv/bin/python benchmarks/docker_exec.py [--image envlayer-test:busybox] [--runs 200] [--sweep 100]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid

from bench_timing import median_ms

from envlayer.bench.baselines import docker_bare_shell as bare_shell
from envlayer.bench.interrupts import run_script

PROFILE = f"envlayer-bench-{uuid.uuid4().hex[:8]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cli-runs", type=int, default=30)
    parser.add_argument("--sweep", type=int, default=100)
    args = parser.parse_args()

    import docker
    from envlayer_docker import labels
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    opts = DockerOptions(image=args.image, timeout=60)
    rows: list[tuple[str, float, str]] = []
    try:
        env = DockerEnvironment(opts, task_id="warm", profile=PROFILE)
        cid = env.container_id
        bare, bare_sock = bare_shell(api, cid)
        session = median_ms(lambda: env.exec("true"), args.runs)
        floor = median_ms(bare, args.runs)
        bare_sock.close()
        oneshot_env = DockerEnvironment(
            DockerOptions(image=args.image, timeout=60, exec_mode="oneshot"), task_id="warm", profile=PROFILE
        )
        oneshot = median_ms(lambda: oneshot_env.exec("true"), args.cli_runs)
        cli = median_ms(
            lambda: subprocess.run(["docker", "exec", cid, "true"], check=True, capture_output=True), args.cli_runs
        )
        client = docker.DockerClient(version="auto")
        container = client.containers.get(cid)
        sdk = median_ms(lambda: container.exec_run(["true"]), args.cli_runs)
        rows += [
            (
                "warm exec: envlayer session",
                session,
                f"{session / floor:.2f}x the bare shell; {cli / session:.0f}x faster than CLI, "
                f"{sdk / session:.0f}x than docker-py",
            ),
            ("warm exec: bare shell over one attached socket", floor, "floor"),
            ("warm exec: envlayer one-shot", oneshot, f"{cli / oneshot:.1f}x faster than CLI"),
            ("warm exec: `docker exec` CLI per call", cli, "baseline"),
            ("warm exec: docker-py exec_run per call", sdk, "baseline"),
        ]

        cold = []
        for i in range(5):
            start = time.perf_counter()
            e = DockerEnvironment(opts, task_id=f"cold-{i}", profile=PROFILE)
            e.exec("true")
            cold.append((time.perf_counter() - start) * 1000)
            e.cleanup(force_remove=True)
        rows.append(("cold: create + start + first exec", statistics.median(cold), "5 runs"))

        child = (
            "import time, docker\n"
            "from envlayer_docker.backend import DockerEnvironment\n"
            "from envlayer_docker.options import DockerOptions\n"
            "t = time.perf_counter()\n"
            f"e = DockerEnvironment(DockerOptions(image={args.image!r}), task_id='warm', profile={PROFILE!r})\n"
            "a = time.perf_counter()\n"
            "e.exec('true')\n"
            "print((a - t) * 1000, (time.perf_counter() - t) * 1000)\n"
        )
        attach, attach_exec = [], []
        for _ in range(7):
            out = subprocess.run([sys.executable, "-c", child], check=True, capture_output=True, text=True).stdout
            a, b = out.split()
            attach.append(float(a))
            attach_exec.append(float(b))
        rows.append(
            ("attach from a new process (constructor)", statistics.median(attach), "7 runs; SDK import excluded")
        )
        rows.append(
            (
                "attach from a new process + first exec",
                statistics.median(attach_exec),
                "first exec starts the session shell",
            )
        )

        def make_exited(tag: str) -> list[str]:
            ids = []
            lab = labels.managed_labels(
                profile=PROFILE + tag, task="sweep", fingerprint_value="v1-bench", persist=True, extra={}
            )
            for _ in range(args.sweep):
                c = api.create_container(args.image, command=["true"], labels=lab)["Id"]
                api.start(c)
                ids.append(c)
            for c in ids:
                api.wait(c)
            return ids

        ours = make_exited("-a")
        theirs = make_exited("-b")
        time.sleep(1.2)
        start = time.perf_counter()
        removed = DockerEnvironment.reap_orphans(profile=PROFILE + "-a", max_age=1.0, dry_run=False, options=opts)
        sweep = (time.perf_counter() - start) * 1000
        assert len(removed) == len(ours), (len(removed), len(ours))
        start = time.perf_counter()
        subprocess.run(
            [
                "docker",
                "ps",
                "-a",
                "-q",
                "--filter",
                "label=envlayer.managed=1",
                "--filter",
                f"label=envlayer.profile={PROFILE}-b",
                "--filter",
                "status=exited",
            ],
            check=True,
            capture_output=True,
        )
        for c in theirs:
            subprocess.run(
                ["docker", "inspect", "--format", "{{.State.FinishedAt}}", c], check=True, capture_output=True
            )
            subprocess.run(["docker", "rm", "-f", c], check=True, capture_output=True)
        cli_sweep = (time.perf_counter() - start) * 1000
        rows += [
            (
                f"reaper sweep, {args.sweep} exited: reap_orphans",
                sweep,
                f"{cli_sweep / sweep:.1f}x faster than CLI sweep",
            ),
            (f"reaper sweep, {args.sweep} exited: CLI ps, inspect+rm each", cli_sweep, "baseline"),
        ]
        env.cleanup(force_remove=True)
        oneshot_env.cleanup()
        env.wait_for_cleanup(30)
    finally:
        for s in api.containers(all=True, filters={"label": "envlayer.managed=1"}):
            if (s.get("Labels") or {}).get("envlayer.profile", "").startswith(PROFILE):
                api.remove_container(s["Id"], force=True)
        for volume in (api.volumes(filters={"label": "envlayer.managed=1"}) or {}).get("Volumes") or []:
            if (volume.get("Labels") or {}).get("envlayer.profile", "").startswith(PROFILE):
                api.remove_volume(volume["Name"], force=True)

    width = max(len(r[0]) for r in rows)
    print(
        f"docker server {api.version()['Version']}, image {args.image}, "
        f"session runs {args.runs}, CLI runs {args.cli_runs}"
    )
    for name, ms, note in rows:
        print(f"{name:<{width}}  {ms:10.2f} ms   {note}")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
