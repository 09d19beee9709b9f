"""How soon a timed-out or interrupted command returns, per backend: the figures the
tests do not assert (a bound on them fails whenever the machine is loaded).

For each backend and exec mode, ``--rounds`` times (cases interleaved), with a 1 s timeout:

* ``quiet``: ``sleep 30`` (nothing to drain: the floor of timeout + kill);
* ``flood``: ``yes`` (the reader must keep draining while the kill runs);
* ``flood-stderr``: ``cat /dev/zero >&2`` (no newlines, on stderr).

It prints the median *overshoot* (seconds from the deadline to the return) and the
flood's overshoot as a ratio of the quiet one measured in the same run: a flood that held
up its own timeout would show as a large ratio. Then the median time from a real SIGINT
to the exit of ``envlayer exec`` during a flood (local). Needs the test image for Docker
and what the SSH tests need (root, openssh-server) for SSH::

    uv run --no-sync python benchmarks/timeouts.py [--rounds 5] [--image envlayer-test:busybox] [--skip-ssh]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_sshd import start_optional_sshd

from envlayer.bench.interrupts import run_script

TIMEOUT = 1.0
COMMANDS = {"quiet": "sleep 30", "flood": "exec yes", "flood-stderr": "exec cat /dev/zero >&2"}


def _environments(image: str, profile: str, ssh: dict[str, Any] | None) -> dict[str, Any]:
    from envlayer.local.backend import LocalEnvironment, LocalOptions

    envs: dict[str, Any] = {}
    for mode in ("session", "oneshot"):
        envs[f"local-{mode}"] = LocalEnvironment(LocalOptions(exec_mode=mode, cwd=tempfile.gettempdir()))
    try:
        from envlayer_docker.backend import DockerEnvironment
        from envlayer_docker.options import DockerOptions

        for mode in ("session", "oneshot"):
            opts = DockerOptions(image=image, exec_mode=mode)
            envs[f"docker-{mode}"] = DockerEnvironment(opts, task_id=f"timeouts-{mode}", profile=profile)
    except Exception as exc:  # no daemon or no image: report and go on
        print(f"docker cases skipped: {exc}")
    if ssh is not None:
        from envlayer_ssh.backend import SSHEnvironment
        from envlayer_ssh.options import SSHOptions

        for mode in ("session", "oneshot"):
            envs[f"ssh-{mode}"] = SSHEnvironment(SSHOptions(**ssh, mode=mode))
    return envs


def _sigint_seconds(rounds: int) -> list[float]:
    from envlayer.testing.hostile import cli_interrupt_flood

    seconds = []
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(rounds):
            run = cli_interrupt_flood(["--backend", "local"], flood="yes", cwd=cwd)
            assert run.returncode == 130, run
            seconds.append(run.seconds)
    return seconds


def _remove_profile(profile: str) -> None:
    try:
        import docker

        api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        for s in api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}):
            api.remove_container(s["Id"], force=True, v=True)
        for volume in (api.volumes(filters={"label": f"envlayer.profile={profile}"}) or {}).get("Volumes") or []:
            api.remove_volume(volume["Name"], force=True)
    except Exception as exc:
        print(f"could not remove the containers of {profile}: {exc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", default="envlayer-test:busybox")
    parser.add_argument("--skip-ssh", action="store_true")
    args = parser.parse_args()
    profile = f"envlayer-bench-timeouts-{uuid.uuid4().hex[:8]}"
    server, ssh_options = start_optional_sshd(args.skip_ssh)
    ssh = ssh_options or None
    overshoot: dict[tuple[str, str], list[float]] = {}
    envs: dict[str, Any] = {}
    try:
        envs = _environments(args.image, profile, ssh)
        for env in envs.values():
            env.exec("true")
        for _ in range(args.rounds):
            for name, env in envs.items():
                for case, command in COMMANDS.items():
                    result = env.exec(command, timeout=TIMEOUT)
                    assert result.timed_out, (name, case, result)
                    overshoot.setdefault((name, case), []).append(result.duration - TIMEOUT)
        sigint = _sigint_seconds(args.rounds)
    finally:
        for env in envs.values():
            env.cleanup()
        if server is not None:
            server.close()
        _remove_profile(profile)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"seconds from a {TIMEOUT:.0f} s deadline to the return, medians of {args.rounds} rounds; load {load}")
    print(f"{'backend':<16} {'quiet':>7} {'flood':>7} {'flood-stderr':>13}   flood vs quiet")
    for name in envs:
        med = {case: statistics.median(overshoot[(name, case)]) for case in COMMANDS}
        worst = max(med["flood"], med["flood-stderr"])
        ratio = f"{worst / med['quiet']:.2f}x" if med["quiet"] > 0 else "n/a"
        print(f"{name:<16} {med['quiet']:7.3f} {med['flood']:7.3f} {med['flood-stderr']:13.3f}   {ratio}")
    print(f"SIGINT to exit of `envlayer exec` during a flood (local): median {statistics.median(sigint):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
