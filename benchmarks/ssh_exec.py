"""Warm ``exec`` latency of the ssh backend against its baselines, all in one run.

Starts a private sshd on a loopback port (same helper as the tests: needs root and
openssh-server), once run by root and once run by the login user, and against each
measures the median wall time of running ``true`` on a warm,
reused connection with (each variant in blocks of back-to-back calls; the blocks of all
variants alternate over 5 rounds):

* envlayer ssh, session mode (persistent shell, sentinel framing);
* envlayer ssh, one-shot mode (a fresh channel and shell per call);
* paramiko with its defaults (``exec_command`` on one reused ``SSHClient``: no TCP_NODELAY);
* paramiko on a TCP_NODELAY socket (the transport floor for one channel per call);
* the ``ssh`` command with a ControlMaster, one ``ssh -S`` process per call.

Run: ``uv run --no-sync python benchmarks/ssh_exec.py [--calls 200]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugins", "ssh", "tests"))

from bench_timing import WARMUP, interleaved_medians
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions
from ssh_testserver import SSHServer, requirements_missing

from envlayer.bench.interrupts import run_script


def paramiko_client(server: SSHServer, nodelay: bool):
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(server.files.known_hosts)
    sock = None
    if nodelay:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.connect(
        "127.0.0.1",
        port=server.port,
        username=server.user,
        key_filename=server.files.client_key,
        allow_agent=False,
        look_for_keys=False,
        sock=sock,
    )

    def run() -> None:
        _, stdout, stderr = client.exec_command("true")
        stdout.read()
        stderr.read()
        stdout.channel.recv_exit_status()

    return client, run


def ssh_cli(server: SSHServer, workdir: str):
    sock = os.path.join(workdir, "cm.sock")
    base = [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        server.files.client_key,
        "-p",
        str(server.port),
        "-o",
        f"UserKnownHostsFile={server.files.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ControlPath={sock}",
        f"{server.user}@127.0.0.1",
    ]
    master = subprocess.Popen(
        ["ssh", "-M", "-N", "-o", "ControlMaster=yes", *base[1:]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if time.monotonic() > deadline or master.poll() is not None:
            master.kill()
            raise RuntimeError("ssh ControlMaster did not start")
        time.sleep(0.02)
    client = ["ssh", "-o", "ControlMaster=no", *base[1:], "true"]

    def run() -> None:
        subprocess.run(client, stdin=subprocess.DEVNULL, check=True)

    return master, run


def measure(server: SSHServer, calls: int, workdir: str) -> dict[str, float]:
    """Median ms per variant against one running server."""
    session = SSHEnvironment(SSHOptions(**server.options(exec_mode="session")))
    oneshot = SSHEnvironment(SSHOptions(**server.options(exec_mode="oneshot")))
    default_client, default_run = paramiko_client(server, nodelay=False)
    nodelay_client, nodelay_run = paramiko_client(server, nodelay=True)
    master = None
    try:
        variants: dict[str, Callable[[], object]] = {
            "envlayer session": lambda: session.exec("true"),
            "envlayer one-shot": lambda: oneshot.exec("true"),
            "paramiko defaults": default_run,
            "paramiko + TCP_NODELAY": nodelay_run,
        }
        if shutil.which("ssh"):
            master, variants["ssh CLI, ControlMaster"] = ssh_cli(server, workdir)
        return interleaved_medians(variants, calls)
    finally:
        session.cleanup()
        oneshot.cleanup()
        default_client.close()
        nodelay_client.close()
        if master is not None:
            master.kill()
            master.wait()


def report(title: str, results: dict[str, float]) -> None:
    print(title)
    baselines = [b for b in ("paramiko defaults", "ssh CLI, ControlMaster") if b in results]
    print(f"  {'variant':<26} {'median ms':>10}" + "".join(f" {'vs ' + b:>28}" for b in baselines))
    for label, ms in results.items():
        ratios = "".join(f" {results[b] / ms:>27.1f}x" for b in baselines)
        print(f"  {label:<26} {ms:>10.3f}{ratios}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per variant (after 10 warm-up calls)")
    args = parser.parse_args()
    missing = requirements_missing()
    if missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    print(
        f"warm exec of `true`, median of {args.calls} calls (5 alternating blocks) "
        f"after {WARMUP} warm-up, sshd on 127.0.0.1"
    )
    for title, rootless in (
        ("sshd run by root (privilege separation)", False),
        ("sshd run by the login user (rootless)", True),
    ):
        server = SSHServer(rootless=rootless)
        workdir = tempfile.mkdtemp(prefix="envlayer-bench-ssh-")
        try:
            server.start()
            results = measure(server, args.calls, workdir)
        finally:
            server.close()
            shutil.rmtree(workdir, ignore_errors=True)
        report(title, results)
    print("targets: envlayer one-shot < 3 ms, envlayer session < 1 ms")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
