"""Warm ``envlayer exec`` from a shell: through the session broker, against its baselines,
all in one run.

Every variant is one new process per call, as an agent framework or a script calling a
shell tool makes it; medians in ms of ``--calls`` calls per variant, in blocks that
alternate over 5 rounds so that a change in machine load affects every variant alike
(after 10 warm-up calls each, so the broker, the sandbox and the connections are warm):

* ``python -c pass``: the interpreter's own start, the floor of any Python command;
* local: ``envlayer exec --task bench -- true`` through the broker, and with ``--no-broker``;
* Docker: the same two, and ``docker exec CONTAINER true`` on the task's container;
* SSH (a loopback sshd, as in the SSH tests; needs root and openssh-server): the same two,
  and the ``ssh`` command with a ControlMaster (``benchmarks/ssh_exec.py``'s).

The ``envlayer`` script is the virtualenv's ``bin/envlayer``, run directly: ``uv run
envlayer`` adds uv's own start (tens of ms) to every call. The envlayer package is
byte-compiled first (``compileall``), as installing a wheel does: ``uv sync`` installs the
workspace editable without bytecode, and where ``PYTHONDONTWRITEBYTECODE`` is set (as on
the development machine) every call would otherwise compile the client's modules again. Each backend's broker runs in
its own directory (one broker per caller context); the run uses a private runtime
directory and profile, and stops its brokers and removes its containers at the end.

Run: ``uv run --no-sync python benchmarks/broker.py [--calls 30] [--image IMAGE]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "ssh", "tests"))

from bench_timing import interleaved_medians
from ssh_exec import ssh_cli
from ssh_testserver import SSHServer, requirements_missing

import envlayer
from envlayer.bench.interrupts import run_script

ENVLAYER = os.path.join(os.path.dirname(sys.executable), "envlayer")
TARGET_MS = 25.0


def run_quietly(argv: list[str], cwd: Path, env: dict[str, str]) -> Callable[[], None]:
    """One call of ``argv``; any failure stops the benchmark."""

    def run() -> None:
        subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)

    return run


class Context:
    """A directory and an environment from which ``envlayer`` is called (one broker each)."""

    def __init__(self, root: Path, name: str, base_env: dict[str, str], **extra: str) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.env = {**base_env, **extra}

    def exec(self, *flags: str) -> Callable[[], None]:
        return run_quietly([ENVLAYER, "exec", *flags, "--task", "bench", "--", "true"], self.dir, self.env)


def docker_container(profile: str) -> str | None:
    out = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=envlayer.profile={profile}"], capture_output=True, text=True
    )
    ids = out.stdout.split()
    return ids[0] if len(ids) == 1 else None


def remove_docker_leftovers(profile: str) -> None:
    for kind in ("container", "volume"):
        listing = ["docker", kind, "ls", "-q", "--filter", f"label=envlayer.profile={profile}"]
        if kind == "container":
            listing.insert(3, "-a")
        ids = subprocess.run(listing, capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", kind, "rm", "-f", *ids], capture_output=True)


def ssh_config(server: SSHServer) -> str:
    opts = server.options()
    return (
        'backend = "ssh"\n[backends.ssh]\n'
        f'host = "{opts["host"]}"\nport = {opts["port"]}\nuser = "{opts["user"]}"\n'
        f'key_files = ["{opts["key_files"][0]}"]\nuse_agent = false\nlook_for_keys = false\n'
        f'ssh_config = ""\nknown_hosts = "{opts["known_hosts"]}"\n'
    )


def report(results: dict[str, float]) -> None:
    print(f"\n{'variant':<44} {'median ms':>10}")
    for label, ms in results.items():
        print(f"{label:<44} {ms:>10.1f}")
    floor = results["python -c pass"]
    print()
    for backend, baseline in (("local", None), ("docker", "docker exec CONTAINER true"), ("ssh", "ssh, ControlMaster")):
        broker = results.get(f"{backend}: envlayer exec (broker)")
        if broker is None:
            continue
        direct = results[f"{backend}: envlayer exec --no-broker"]
        line = f"{backend}: broker {broker:.1f} ms = {direct / broker:.1f}x faster than --no-broker"
        if baseline:
            line += f"; `{baseline.split(',')[0]}` takes {results[baseline] / broker:.1f}x as long"
        line += f"; {broker - floor:+.1f} ms over python -c pass"
        line += f"; target < {TARGET_MS:.0f} ms {'met' if broker < TARGET_MS else 'NOT met'}"
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="timed calls per variant (after 10 warm-up calls)")
    parser.add_argument("--image", default=os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox"))
    parser.add_argument("--no-docker", action="store_true", help="skip the Docker variants")
    parser.add_argument("--no-ssh", action="store_true", help="skip the SSH variants")
    args = parser.parse_args()

    package = os.path.dirname(os.path.abspath(envlayer.__file__))
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True, stdout=subprocess.DEVNULL)
    profile = f"bench-broker-{uuid.uuid4().hex[:8]}"
    runtime = tempfile.mkdtemp(prefix="elbb-", dir="/tmp")
    root = Path(tempfile.mkdtemp(prefix="envlayer-bench-broker-"))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    base_env.update(ENVLAYER_RUNTIME_DIR=runtime, ENVLAYER_PROFILE=profile)
    variants: dict[str, Callable[[], None]] = {
        "python -c pass": run_quietly([sys.executable, "-c", "pass"], root, base_env)
    }
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        stack.callback(shutil.rmtree, runtime, True)
        stack.callback(subprocess.run, [ENVLAYER, "broker", "stop"], env=base_env, capture_output=True)

        local = Context(root, "local", base_env)
        variants["local: envlayer exec (broker)"] = local.exec()
        variants["local: envlayer exec --no-broker"] = local.exec("--no-broker")

        if not args.no_docker and shutil.which("docker"):
            stack.callback(remove_docker_leftovers, profile)
            docker = Context(root, "docker", base_env, ENVLAYER_BACKEND="docker", ENVLAYER_DOCKER_IMAGE=args.image)
            docker.exec()()  # creates the task's container
            container = docker_container(profile)
            if container is None:
                raise RuntimeError("the task's container was not found")
            variants["docker: envlayer exec (broker)"] = docker.exec()
            variants["docker: envlayer exec --no-broker"] = docker.exec("--no-broker")
            variants["docker exec CONTAINER true"] = run_quietly(["docker", "exec", container, "true"], root, base_env)

        missing = requirements_missing()
        if not args.no_ssh and not missing:
            server = SSHServer()
            stack.callback(server.close)
            server.start()
            ssh = Context(root, "ssh", base_env)
            (ssh.dir / "envlayer.toml").write_text(ssh_config(server))
            variants["ssh: envlayer exec (broker)"] = ssh.exec()
            variants["ssh: envlayer exec --no-broker"] = ssh.exec("--no-broker")
            master, variants["ssh, ControlMaster"] = ssh_cli(server, str(root))
            stack.callback(master.kill)
        elif missing:
            print(f"ssh variants skipped: {missing}")

        print(f"{args.calls} calls per variant; envlayer = {ENVLAYER}; {os.cpu_count()} CPUs")
        report(interleaved_medians(variants, args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
