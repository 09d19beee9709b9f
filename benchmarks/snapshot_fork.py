"""Fork against fresh preparation: 8 sandboxes ready for their first command, on Docker and local.

The preparation (in the sandbox's working directory): upload a small wheel built here and
pip's own wheel (from this Python's ensurepip), `pip install --no-index` the small wheel
into `.deps`, and write a workspace of `--files` files totalling `--megabytes` MB (default
10,000 files, 200 MB). No network is used. "Ready" means the sandbox answered its first
command, `PYTHONPATH=.deps python3 -c 'import benchpkg'` (the install is there).

Per round, on each backend, two ways to get `--forks` ready sandboxes:

* fork: what `env.fork(task_ids)` does, step by step: a snapshot of a prepared sandbox
  taken (`env.snapshot()`), the forks created from it concurrently
  (`env.fork(task_ids, snapshot=...)`), the snapshot removed; then the first command in
  each, concurrently;
* fresh: `--forks` new sandboxes created concurrently (8 threads), each running the
  preparation, then the first command.

The two alternate which goes first from round to round. After each timed step ``sync``
writes back what it left dirty, so the next step does not pay for it; the sandboxes it made
stay until the end of the run (removed then, with the source). Removing them between steps
made the next step measure that removal: on ext4 without a journal (this project's test
machine), creating files after tens of thousands were deleted makes the kernel look up each
recently deleted inode (``fs/ext4/ialloc.c``: ``find_inode_bit`` calls ``recently_deleted``
when the filesystem has no journal). `perf record` of a plain ``cp -a`` of the 200 MB
workspace after deleting eight copies of it: 8.9 s, almost all in ``recently_deleted`` under
``ext4_create``, against 2.2 s before the deletion, and still as slow 45 seconds later (so
waiting does not help); in this script, the snapshot's copy took 3.1 to 4.7 s in every round
after the first, 0.7 to 0.9 s when nothing had been deleted. Printed: the median over the
rounds of the wall time until all have answered their first command (for forks, also the
part of it spent taking the snapshot), the median time one sandbox took to be ready, and the
ratio fresh / fork, in the same run; each round's line carries the load average before it
(the figures mean little on a busy machine). The time to prepare the source sandbox once is
printed too (the fork path needs it once, however many forks follow). Docker runs on
`--image` (it needs python3 and GNU cp; the envlayer-test:debian image has both), in persist
mode with a workspace volume.

Everything made is removed at the end, also on Ctrl-C, SIGTERM or SIGHUP
(:mod:`envlayer.bench.interrupts`): the containers, volumes and snapshot images of the run's
profile (printed first), and the temporary directory holding the local working
directories, snapshot store and wheels; also when its parent process dies (unless started
with nohup). After a SIGKILL, all that is left carries the profile's label; remove it with
`envlayer reap --backend docker --profile PROFILE --max-age 0 -o idle_reclaim_after=1
-o workspace_retention=1 -o snapshot_max_age=1`, run twice a few seconds apart (the first
removes the running containers, the second their workspace volumes and snapshot images).

    .venv/bin/python benchmarks/snapshot_fork.py [--backends docker,local] [--image envlayer-test:debian]
        [--rounds 3] [--forks 8] [--files 10000] [--megabytes 200]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envlayer.bench.interrupts import run_script, signals_ignored

PROFILE = f"envlayer-bench-{uuid.uuid4().hex[:8]}"
READY = "PYTHONPATH=.deps python3 -c 'import benchpkg'"


def small_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel ``benchpkg-1.0`` (one module), built in memory: name and bytes."""
    files = {
        "benchpkg/__init__.py": b"VALUE = 42\n",
        "benchpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: benchpkg\nVersion: 1.0\n",
        "benchpkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("benchpkg-1.0.dist-info/RECORD,,")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("benchpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return "benchpkg-1.0-py3-none-any.whl", buffer.getvalue()


def pip_wheel() -> tuple[str, bytes]:
    """pip's wheel as bundled with this Python (ensurepip): name and bytes."""
    import ensurepip

    (path,) = (Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl")
    return path.name, path.read_bytes()


def preparation(files: int, megabytes: int) -> str:
    """The shell command that installs the wheel and writes the workspace."""
    size = megabytes * 1024 * 1024 // files
    writer = (
        f"import os\nfor i in range({files}):\n"
        f"    d = 'data/%03d' % (i // 100)\n    os.makedirs(d, exist_ok=True)\n"
        f"    open('%s/f%05d' % (d, i), 'wb').write(os.urandom({size}))\n"
    )
    return (
        "export PIP_ROOT_USER_ACTION=ignore && "
        "python3 .bench/$PIP_WHEEL/pip install -q --no-index --no-deps --disable-pip-version-check "
        "--target .deps .bench/$SMALL_WHEEL && "
        f"python3 -c {shlex.quote(writer)}"
    )


def prepare(env: Any, wheels: list[tuple[str, bytes]], command: str) -> None:
    """Run the preparation in ``env``; raise with its output if it fails."""
    for name, data in wheels:
        env.write_file(f".bench/{name}", data)
    names = {"PIP_WHEEL": wheels[0][0], "SMALL_WHEEL": wheels[1][0]}
    result = env.exec(command, env=names, timeout=1800)
    if result.exit_code != 0:
        raise RuntimeError(f"preparation failed ({result.exit_code}): {result.stderr_text[-2000:]}")


def first_command(env: Any) -> None:
    result = env.exec(READY, timeout=600)
    if result.exit_code != 0:
        raise RuntimeError(f"first command failed in {env.task_id}: {result.stderr_text[-2000:]}")


def timed_ready(make: Callable[[], Any], start: float, made: list[Any]) -> float:
    """``make()`` then the first command; seconds from ``start`` until ready."""
    env = make()
    made.append(env)
    first_command(env)
    return time.perf_counter() - start


def fork_round(source: Any, tasks: list[str], made: list[Any]) -> tuple[float, list[float], float]:
    """Fork ``source`` into ``tasks`` as ``source.fork(tasks)`` does (snapshot, forks,
    snapshot removed), then the first command in each (concurrently): wall time,
    per-sandbox ready times, seconds spent taking the snapshot."""
    from envlayer import dispatch as lifecycle

    start = time.perf_counter()
    snapshot = source.snapshot()
    snapped = time.perf_counter() - start
    try:
        forks = source.fork(tasks, snapshot=snapshot)
    finally:
        lifecycle.remove_snapshot([(type(source), source.options)], snapshot.id)
    made.extend(forks)
    with ThreadPoolExecutor(len(forks)) as pool:
        readies = list(pool.map(lambda env: timed_ready(lambda: env, start, []), forks))
    return time.perf_counter() - start, readies, snapped


def fresh_round(open_env: Callable[[str], Any], tasks: list[str], prep: Callable[[Any], None], made: list[Any]):
    """``len(tasks)`` new sandboxes, concurrently, each prepared then asked its first
    command: wall time, per-sandbox ready times."""
    start = time.perf_counter()

    def one(task: str) -> float:
        def make() -> Any:
            env = open_env(task)
            made.append(env)
            prep(env)
            return env

        return timed_ready(make, start, [])

    with ThreadPoolExecutor(len(tasks)) as pool:
        readies = list(pool.map(one, tasks))
    return time.perf_counter() - start, readies


def remove_all(made: list[Any]) -> None:
    """Remove every environment in ``made`` (with its workspace), waiting for teardowns;
    then ``sync``."""
    from envlayer import dispatch as lifecycle

    for env in made:
        try:
            lifecycle.cleanup(env, purge=True)
        except Exception as exc:  # keep removing the others
            print(f"  cleanup of {env.task_id} failed: {exc}", file=sys.stderr)
    for env in made:
        lifecycle.wait_for_cleanup(env, 120)
        shutil.rmtree(getattr(env, "bench_directory", ""), ignore_errors=True)  # a local working directory
    made.clear()
    os.sync()


def run_backend(name: str, open_env: Callable[[str], Any], args: argparse.Namespace, prep_cmd: str) -> list[str]:
    """All rounds on one backend; the printed rows."""
    wheels = [pip_wheel(), small_wheel()]
    made: list[Any] = []
    source = None
    try:
        source = open_env("source")
        start = time.perf_counter()
        prepare(source, wheels, prep_cmd)
        first_command(source)
        os.sync()  # the source's workspace on disk before the first timed step, as after each
        rows = [f"{name}: prepare the source sandbox once: {time.perf_counter() - start:.1f} s"]
        print(f"  {name}: source sandbox prepared", flush=True)
        walls: dict[str, list[float]] = {"fork": [], "fresh": []}
        each: dict[str, list[float]] = {"fork": [], "fresh": []}
        snapshots: list[float] = []
        for r in range(args.rounds):
            load = os.getloadavg()[0]
            for way in ("fork", "fresh") if r % 2 == 0 else ("fresh", "fork"):
                tasks = [f"r{r}-{way}{i}" for i in range(args.forks)]
                if way == "fork":
                    wall, ready, snapped = fork_round(source, tasks, made)
                    snapshots.append(snapped)
                else:
                    wall, ready = fresh_round(open_env, tasks, lambda env: prepare(env, wheels, prep_cmd), made)
                os.sync()  # what the step left dirty, written back before the next one
                walls[way].append(wall)
                each[way] += ready
            print(
                f"  {name} round {r + 1} (load {load:.1f}): fork {walls['fork'][-1]:.1f} s "
                f"(snapshot {snapshots[-1]:.1f} s), fresh {walls['fresh'][-1]:.1f} s",
                flush=True,
            )
        rows.append(
            f"{name}: {args.forks} forks answered their first command (wall, median of {args.rounds}): "
            f"{statistics.median(walls['fork']):.1f} s, of which the snapshot {statistics.median(snapshots):.1f} s; "
            f"one fork median {statistics.median(each['fork']):.1f} s"
        )
        rows.append(
            f"{name}: {args.forks} ready fresh (wall, median of {args.rounds}): "
            f"{statistics.median(walls['fresh']):.1f} s; one sandbox median {statistics.median(each['fresh']):.1f} s"
        )
        ratio = statistics.median(walls["fresh"]) / statistics.median(walls["fork"])
        rows.append(f"{name}: fresh / fork = {ratio:.2f}x (wall medians)")
        return rows
    finally:
        with signals_ignored():
            remove_all(made + ([source] if source is not None else []))


def docker_opener(image: str) -> Callable[[str], Any]:
    from envlayer_docker.backend import DockerEnvironment
    from envlayer_docker.options import DockerOptions

    options = DockerOptions(image=image, timeout=1800, max_file_bytes=50_000_000)
    return lambda task: DockerEnvironment(options, task_id=task, profile=PROFILE)


def local_opener(root: str) -> Callable[[str], Any]:
    from envlayer.local.backend import LocalEnvironment, LocalOptions

    def make(task: str) -> Any:
        work = os.path.join(root, "work", task)
        os.makedirs(work)
        options = LocalOptions(cwd=work, snapshot_dir=os.path.join(root, "store"), timeout=1800)
        env = LocalEnvironment(options, task_id=task, profile=PROFILE)
        env.bench_directory = work  # type: ignore[attr-defined]
        return env

    return make


def sweep_docker_profile() -> None:
    """Remove whatever of the run's profile is still on the daemon (after a Ctrl-C)."""
    label = f"label=envlayer.profile={PROFILE}"
    for listing, remove in (
        (["ps", "-aq"], ["rm", "-f"]),
        (["volume", "ls", "-q"], ["volume", "rm", "-f"]),
        (["images", "-aq"], ["rmi", "-f"]),
    ):
        found = subprocess.run(["docker", *listing, "--filter", label], capture_output=True, text=True).stdout.split()
        if found:
            subprocess.run(["docker", *remove, *sorted(set(found))], capture_output=True)


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, load average {load}, Python {sys.version.split()[0]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="docker,local")
    parser.add_argument("--image", default="envlayer-test:debian")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forks", type=int, default=8)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=200)
    args = parser.parse_args()
    prep_cmd = preparation(args.files, args.megabytes)
    print(f"profile {PROFILE}; machine: {machine()}", flush=True)
    print(f"workspace {args.files} files, {args.megabytes} MB; {args.forks} sandboxes", flush=True)
    rows: list[str] = []
    root = tempfile.mkdtemp(prefix="envlayer-bench-snap-")
    try:
        for backend in args.backends.split(","):
            opener = docker_opener(args.image) if backend == "docker" else local_opener(root)
            rows += run_backend(backend, opener, args, prep_cmd)
    finally:
        with signals_ignored():
            if "docker" in args.backends:
                sweep_docker_profile()
            shutil.rmtree(root, ignore_errors=True)
    print(f"machine after: {machine()}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
