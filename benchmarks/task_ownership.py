"""A task owns its Docker container: 100 mixed CLI calls on one task never replace it
unless ``--replace`` is given (issue 39).

Run (Docker daemon up, image ``envlayer-test:debian`` present; ``scripts/test`` builds it)::

    .venv/bin/python benchmarks/task_ownership.py [--calls 100] [--seed 39]

The task is created with ``-o image=envlayer-test:debian`` and a file ``/opt/state`` (in the
container's own layer, lost if the container is replaced). Then ``--calls`` calls, drawn
with a fixed seed from: ``exec`` through the broker and in-process (``--no-broker``), with
the task's options repeated or with ``--task`` only; ``exec -i`` with stdin; ``cp`` in
and out; ``shell`` fed keys through a pseudo-terminal; ``snapshot``; and calls with a
differing option (another image, another ``pids_limit``) and no ``--replace``, which must
fail with exit 125 and change nothing. Two calls (at 1/2 and 3/4 of the run) pass
``--replace`` with a differing ``pids_limit``: only they may replace the container.

Printed: the number of containers on the daemon before and after (and of this run's
profile), every call's kind and exit status where it is not the expected one, and the
container id over time (each id with the calls it served). Exits 1 when a call had an
unexpected exit status, the container changed without ``--replace`` (or did not change
with it), ``/opt/state`` was lost without ``--replace``, or something was left behind.
Everything it makes (containers, workspace volumes, snapshot images, its broker) is
removed at the end, also on failure; it runs under a profile of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

IMAGE = "envlayer-test:debian"
OTHER_IMAGE = "envlayer-test:busybox"
TASK = "owned"
ENVLAYER = shutil.which("envlayer", path=os.path.dirname(sys.executable)) or "envlayer"


@dataclass
class Run:
    """The state of one run: its environment, and what it saw."""

    environ: dict[str, str]
    workdir: str
    pids_limit: int = 1024
    """The task's recorded ``pids_limit`` (changed only by a ``--replace`` call)."""
    timeline: list[tuple[str, list[int]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def envlayer(run: Run, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``envlayer ARGS --backend docker`` in this run's environment."""
    argv = [ENVLAYER, args[0], "--backend", "docker", *args[1:]]
    return subprocess.run(argv, capture_output=True, text=True, input=stdin, env=run.environ, timeout=180)


def container_ids(label: str) -> list[str]:
    """Ids of the containers (any state) carrying ``label`` (every container when empty)."""
    argv = ["docker", "ps", "-aq", "--no-trunc"] + (["--filter", f"label={label}"] if label else [])
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()


def shell_with_keys(run: Run, keys: bytes) -> tuple[int, str]:
    """``envlayer shell --task TASK`` on a pseudo-terminal, fed ``keys`` once its prompt
    (``# ``) shows (keys typed earlier may be lost, see docs/cli.md); (status, output)."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [ENVLAYER, "shell", "--backend", "docker", "--task", TASK],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=run.environ,
        start_new_session=True,
    )
    os.close(slave)
    output, sent = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if not sent and output.rstrip().endswith(b"#"):
            os.write(master, keys)
            sent = True
        if select.select([master], [], [], 0.2)[0]:
            try:
                output += os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
    while select.select([master], [], [], 0.2)[0]:  # what it wrote just before it ended
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    if proc.poll() is None:
        proc.kill()
    return proc.wait(), output.decode(errors="replace")


def repeated(run: Run) -> list[str]:
    """The task's own options, repeated."""
    return ["-o", f"image={IMAGE}", "-o", f"pids_limit={run.pids_limit}"]


Call = Callable[[Run], tuple[str, int, int, bool]]
"""One kind of call: ``(label, exit status, expected status, passes --replace)``."""


def exec_plain(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "exec", "--task", TASK, "cat /opt/state")
    return "exec --task only", out.returncode, 0, False


def exec_repeated(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "exec", "--task", TASK, *repeated(run), "cat /opt/state")
    return "exec, options repeated", out.returncode, 0, False


def exec_in_process(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "exec", "--no-broker", "--task", TASK, "cat /opt/state")
    return "exec --no-broker", out.returncode, 0, False


def exec_stdin(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "exec", "--task", TASK, "-i", "cat > /tmp/in && cat /opt/state", stdin="payload\n")
    return "exec -i (stdin)", out.returncode, 0, False


def copy_in_and_out(run: Run) -> tuple[str, int, int, bool]:
    local = os.path.join(run.workdir, "copied")
    out = envlayer(run, "cp", f"{TASK}:/opt/state", local)
    back = envlayer(run, "cp", local, f"{TASK}:/tmp/copied-back") if out.returncode == 0 else out
    return "cp out and in", back.returncode, 0, False


def shell(run: Run) -> tuple[str, int, int, bool]:
    status, output = shell_with_keys(run, b"cat /opt/state; exit 0\n")
    if "precious" not in output:
        run.problems.append(f"shell did not show /opt/state: {output[-200:]!r}")
    return "shell (keys on a pty)", status, 0, False


def snapshot(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "snapshot", TASK)
    return "snapshot", out.returncode, 0, False


def differing_image(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "exec", "--task", TASK, "-o", f"image={OTHER_IMAGE}", "true")
    return "exec, differing image, no --replace", out.returncode, 125, False


def differing_limit(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "exec", "--task", TASK, "-o", f"pids_limit={run.pids_limit + 1}", "true")
    return "exec, differing pids_limit, no --replace", out.returncode, 125, False


def differing_snapshot(run: Run) -> tuple[str, int, int, bool]:
    out = envlayer(run, "snapshot", "-o", f"image={OTHER_IMAGE}", TASK)
    return "snapshot, differing image", out.returncode, 125, False


def replace(run: Run) -> tuple[str, int, int, bool]:
    run.pids_limit += 100
    out = envlayer(
        run, "exec", "--task", TASK, "-o", f"pids_limit={run.pids_limit}", "--replace", "echo precious > /opt/state"
    )
    return "exec --replace, differing pids_limit", out.returncode, 0, True


KINDS: list[Call] = [
    exec_plain,
    exec_repeated,
    exec_in_process,
    exec_stdin,
    copy_in_and_out,
    shell,
    snapshot,
    differing_image,
    differing_limit,
    differing_snapshot,
]


def the_container(run: Run) -> str:
    """The one container of the task (a problem is noted when there is not exactly one)."""
    ids = container_ids(f"envlayer.profile={run.environ['ENVLAYER_PROFILE']}")
    if len(ids) != 1:
        run.problems.append(f"expected one container of the task, found {len(ids)}")
    return ids[0][:12] if ids else "-"


def make_calls(run: Run, calls: int, seed: int) -> dict[str, int]:
    """Make ``calls`` calls; returns how many of each kind ran."""
    rng = random.Random(seed)
    replace_at = {calls // 2, (3 * calls) // 4}
    counts: dict[str, int] = {}
    for number in range(1, calls + 1):
        before = the_container(run)
        kind = replace if number in replace_at else rng.choice(KINDS)
        label, status, expected, replacing = kind(run)
        counts[label] = counts.get(label, 0) + 1
        after = the_container(run)
        if status != expected:
            run.problems.append(f"call {number} ({label}): exit {status}, expected {expected}")
        if (after != before) != replacing:
            run.problems.append(f"call {number} ({label}): container {before} -> {after}")
        if not run.timeline or run.timeline[-1][0] != after:
            run.timeline.append((after, []))
        run.timeline[-1][1].append(number)
        if kind is not replace and envlayer(run, "exec", "--task", TASK, "cat /opt/state").stdout != "precious\n":
            run.problems.append(f"call {number} ({label}): /opt/state is gone")
    return counts


def clean_up(run: Run) -> None:
    """Remove the task's container and workspace, the run's snapshots and its broker."""
    envlayer(run, "rm", TASK, "--force", "--purge")
    listed = json.loads(envlayer(run, "snapshots", "ls", "--json").stdout or "[]")
    for outcome in listed:
        for snap in outcome["sandboxes"]:
            envlayer(run, "snapshots", "rm", snap["id"])
    subprocess.run([ENVLAYER, "broker", "stop"], env=run.environ, capture_output=True, timeout=60)
    label = f"label=envlayer.profile={run.environ['ENVLAYER_PROFILE']}"
    images = subprocess.run(["docker", "images", "-q", "--filter", label], capture_output=True, text=True).stdout
    left = container_ids(label.removeprefix("label=")) + images.split()
    if left:
        run.problems.append(f"left behind: {left}")


def spans(numbers: list[int]) -> str:
    """``1-3,7`` for ``[1, 2, 3, 7]``."""
    out, start = [], numbers[0]
    for previous, current in zip(numbers, [*numbers[1:], None], strict=False):
        if current != previous + 1:
            out.append(f"{start}-{previous}" if previous != start else str(start))
            start = current
    return ",".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="envlayer-ownership-")
    runtime = os.path.join(workdir, "rt")
    os.mkdir(runtime, 0o700)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    environ.update(ENVLAYER_PROFILE=f"ownership-{uuid.uuid4().hex[:8]}", ENVLAYER_RUNTIME_DIR=runtime)
    run = Run(environ, workdir)
    mine = f"envlayer.profile={environ['ENVLAYER_PROFILE']}"
    total_before = len(container_ids(""))
    try:
        made = envlayer(run, "exec", "--task", TASK, "-o", f"image={IMAGE}", "echo precious > /opt/state")
        if made.returncode != 0:
            print(f"could not create the task: {made.stderr}", file=sys.stderr)
            return 1
        print(f"containers of the task before the calls: {len(container_ids(mine))} ({the_container(run)})")
        counts = make_calls(run, args.calls, args.seed)
        print(f"containers of the task after the calls:  {len(container_ids(mine))} ({the_container(run)})")
    finally:
        clean_up(run)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"containers of the task after clean-up:   {len(container_ids(mine))}")
    total = len(container_ids(""))
    print(f"containers on the daemon: {total_before} before, {total} after (other users of the daemon count too)")
    print(f"calls ({args.calls}, seed {args.seed}):")
    for label, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {count:3d}  {label}")
    print("container id over time (calls it served):")
    for cid, numbers in run.timeline:
        print(f"  {cid}  calls {spans(numbers)}")
    for problem in run.problems:
        print(f"PROBLEM: {problem}")
    print("OK: replaced only by --replace" if not run.problems else f"FAILED: {len(run.problems)} problem(s)")
    return 1 if run.problems else 0


if __name__ == "__main__":
    sys.exit(main())
