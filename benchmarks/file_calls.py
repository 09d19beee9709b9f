"""File calls before and after, in the same run: ``read_file``/``write_file`` medians of
1 KiB, 256 KiB and 1 MiB, ``upload_dir``/``download_dir`` of 100 files of 1 KiB in 10
directories (on a backend that has them), and the agent loop (read a 20 KiB file, write it back changed,
run a command), per backend, through an older envlayer ("before") and this checkout
("after"), with the agent loop through the ``docker`` CLI (``docker exec`` + ``docker
cp``) as the baseline on Docker.

Each version runs in a child interpreter of its own (``PYTHONPATH`` at that version's
``envlayer`` and plugins) holding one environment per backend; the driver asks both
children for blocks of calls in turn, so a change in machine load hits both alike. The
loop itself is :mod:`envlayer.bench.file_calls` of this checkout, loaded by path in both
children: the very same code drives both versions.

    .venv/bin/python benchmarks/file_calls.py [--before DIR | --before-commit fc6c2ee]
        [--backend local --backend docker --backend ssh --backend kubernetes]
        [--calls 30] [--rounds 100] [--image envlayer-test:debian]

``--before-commit`` clones this repository at that commit into a temporary directory.
SSH needs ``sshd`` (the tests' server is started); Kubernetes runs against the tests'
fake API server (backed by Docker). Prints a table of medians and after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "plugins" / "ssh" / "tests"))
sys.path.insert(0, str(HERE))

from envlayer.bench.file_calls import FILE_SIZES, docker_cli_agent_loop
from envlayer.bench.interrupts import run_script
from envlayer.bench.measure import size_label

PLUGINS = ("docker", "ssh", "kubernetes")
BACKENDS = ("local", "docker", "ssh", "kubernetes")
"""Loaded by name in each child (``load_backend``), so each version finds its own class
wherever that version keeps it."""

CHILD_ENV = r"""
import json, sys
from envlayer.discovery.backend_registry import load_backend
Env = load_backend(sys.argv[2])
env = Env(Env.Options(**json.loads(sys.argv[3])), task_id=sys.argv[4], profile=sys.argv[5])

def removed(env):
    try:
        env.cleanup(force_remove=True, purge=True)  # the workspace volume too: a benchmark keeps nothing
    except TypeError:  # an older envlayer
        try:
            env.cleanup(force_remove=True)
        except TypeError:
            env.cleanup()
    wait = getattr(env, "wait_for_cleanup", None)
    if wait is not None:
        wait(60)
"""
"""How a child program (:data:`CHILD` and the other scripts' own) begins: the environment
``env`` of the backend named in ``sys.argv[2]``, with the options, task id and profile that
follow (see :class:`Child`), and ``removed(env)``, which cleans it up whole on either version."""

CHILD = (
    CHILD_ENV
    + r"""
import importlib, importlib.util, json, sys
import envlayer.dispatch
if not hasattr(envlayer.dispatch, "run"):  # an envlayer from before the one way in: exec is the way
    envlayer.dispatch.run = lambda env, command, **keywords: env.exec(command, **keywords)
spec = importlib.util.spec_from_file_location("bench_file_calls", sys.argv[1])
calls = importlib.util.module_from_spec(spec); spec.loader.exec_module(calls)
scratch = None
try:
    out = env.exec('d="$(pwd)/.envlayer-bench-$$" && mkdir -p "$d" && printf %s "$d"')
    scratch = out.stdout.decode()
    hello = {"container": getattr(env, "container_id", None), "scratch": scratch, "dirs": hasattr(env, "upload_dir")}
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        if ask["op"] == "files":
            answer = calls.file_call_samples(env, f"{scratch}/f-{ask['size']}.bin", ask["size"], ask["calls"])
        elif ask["op"] == "dirs":
            answer = calls.directory_samples(env, f"{scratch}/tree", ask["calls"])
        else:
            answer = {"loop": calls.envlayer_agent_loop(env, f"{scratch}/agent.txt", ask["rounds"])}
        print(json.dumps(answer), flush=True)
finally:
    if scratch:
        env.exec(f"rm -rf {scratch}")
    removed(env)
"""
)


class Child:
    """One version's interpreter holding one environment of one backend, running
    ``program`` (:data:`CHILD` unless given: the same arguments, answering each request line
    with one JSON line)."""

    def __init__(
        self, root: Path, backend: str, options: dict[str, Any], profile: str, label: str, program: str = CHILD
    ) -> None:
        paths = [str(root)] + [str(root / "plugins" / p) for p in PLUGINS]
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        argv = [sys.executable, "-c", program, str(ROOT / "envlayer" / "bench" / "file_calls.py"), backend]
        argv += [json.dumps(options), f"files-{label}-{uuid.uuid4().hex[:6]}", profile]
        # cwd is the version's root: `python -c` puts the current directory first on sys.path, and
        # from a checkout of the newer version that took its envlayer over PYTHONPATH's
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environ, cwd=root
        )
        self.hello = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the child ended (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(120)


def backend_options(backend: str, image: str, services: dict[str, Any], workdir: str) -> dict[str, Any]:
    if backend == "local":
        return {"cwd": workdir}
    if backend == "docker":
        return {"image": image}
    if backend == "ssh":
        return services["ssh"].options()
    return {"image": services["kubernetes_image"], "kubeconfig": services["kubeconfig"]}


def measure(children: dict[str, Child], args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Samples per measure per version, the versions alternating in blocks."""
    samples: dict[str, dict[str, list[float]]] = {}
    blocks = 3
    for size in FILE_SIZES:
        for _ in range(blocks):
            for label, child in children.items():
                answer = child.ask(op="files", size=size, calls=max(1, args.calls // blocks))
                for call, times in answer.items():
                    samples.setdefault(f"{call}_file {size_label(size)}", {}).setdefault(label, []).extend(times)
    for _ in range(blocks if all(child.hello["dirs"] for child in children.values()) else 0):
        for label, child in children.items():
            for call, times in child.ask(op="dirs", calls=max(1, args.calls // blocks)).items():
                samples.setdefault(f"{call} 100 x 1 KiB", {}).setdefault(label, []).extend(times)
    for _ in range(2):
        for label, child in children.items():
            answer = child.ask(op="loop", rounds=args.rounds // 2)
            samples.setdefault(f"agent loop ({args.rounds} rounds), per round", {}).setdefault(label, []).extend(
                answer["loop"]
            )
    return samples


def main() -> int:
    parser = before_after_parser(__doc__, before_commit="fc6c2ee", calls=30)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    backends = args.backend or ["local", "docker", "ssh", "kubernetes"]
    profile = f"bench-files-{uuid.uuid4().hex[:6]}"
    rows: list[tuple[str, str, float | None, float | None, str]] = []
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="envlayer-bench-files-"))
        before = Path(args.before) if args.before else clone(args.before_commit, tmp)
        services = start_services(backends, stack, tmp)
        for backend in backends:
            children: dict[str, Child] = {}
            try:
                for label, root in (("before", before), ("after", ROOT)):
                    workdir = os.path.join(tmp, f"{backend}-{label}")
                    os.makedirs(workdir, exist_ok=True)
                    opts = backend_options(backend, args.image, services, workdir)
                    children[label] = Child(root, backend, opts, profile, label)
                samples = measure(children, args)
                if backend == "docker":
                    container = children["after"].hello["container"]
                    path = f"/workspace/.envlayer-bench-cli-{uuid.uuid4().hex[:8]}.txt"
                    loop = next(m for m in samples if m.startswith("agent loop"))
                    samples[loop]["docker exec + docker cp (CLI)"] = docker_cli_agent_loop(container, path, args.rounds)
            finally:
                for child in children.values():
                    child.close()
            for name, by_version in samples.items():
                b, a = before_after_ms(by_version)
                rows.append((backend, name, b, a, f"{a / b:.2f}x ({len(by_version['after'])} calls each)"))
                cli = by_version.get("docker exec + docker cp (CLI)")
                if cli:
                    c = statistics.median(cli) * 1000
                    rows.append((backend, f"{name}, docker CLI", None, c, f"after is {a / c:.3f}x the CLI loop"))
    print(f"{'backend':<11} {'measure':<44} {'before ms':>10} {'after ms':>10}  after/before")
    for backend, name, b, a, note in rows:
        shown_b = f"{b:10.2f}" if b is not None else f"{'':>10}"
        print(f"{backend:<11} {name:<44} {shown_b} {a:10.2f}  {note}")
    return 0


def before_after_ms(by_version: dict[str, list[float]]) -> tuple[float, float]:
    """The medians, in milliseconds, of one measure's ``before`` and ``after`` samples (seconds)."""
    return statistics.median(by_version["before"]) * 1000, statistics.median(by_version["after"]) * 1000


def before_after_parser(doc: str | None, *, before_commit: str, calls: int) -> argparse.ArgumentParser:
    """The options every before-and-after script here takes: ``--before`` (a checkout) or
    ``--before-commit`` (cloned), ``--backend`` (repeatable), ``--calls``, ``--image``."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--before", help="a checkout of the older envlayer")
    parser.add_argument("--before-commit", default=before_commit, help="cloned when --before is not given")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--calls", type=int, default=calls, help="timed calls of each variant")
    parser.add_argument("--image", default="envlayer-test:debian")
    return parser


def clone(commit: str, tmp: str) -> Path:
    """This repository at ``commit``, cloned into ``tmp``."""
    target = Path(tmp) / f"before-{commit}"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", commit], check=True)
    return target


def start_services(backends: list[str], stack: ExitStack, tmp: str) -> dict[str, Any]:
    """The test sshd and the fake Kubernetes API server, as the backends need them."""
    services: dict[str, Any] = {}
    if "ssh" in backends:
        from ssh_testserver import SSHServer, requirements_missing

        missing = requirements_missing()
        if missing:
            raise SystemExit(f"cannot measure ssh: {missing}")
        server = SSHServer()
        stack.callback(server.close)
        server.start()
        services["ssh"] = server
    if "kubernetes" in backends:
        from kubernetes_scale import load_control

        control = load_control()
        fake = control.start_fake(tmp)
        stack.callback(fake.stop)
        services["kubeconfig"] = fake.kubeconfig
        services["kubernetes_image"] = control.IMAGE
    return services


if __name__ == "__main__":
    sys.exit(run_script(main))
