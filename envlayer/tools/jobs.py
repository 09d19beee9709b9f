"""Background jobs inside a sandbox, driven only through ``exec`` with POSIX sh.

A job lives in ``<jobs_dir>/<job_id>/``: ``cmd.sh`` (the command, fed through stdin so
no quoting is involved and ``file_root`` does not apply), ``pid``, ``output.log``
(stdout and stderr), ``exit`` (written when the command ends) and ``killed`` (written by
:func:`kill`). The job runs under ``setsid`` where available, so it has its own process
group and survives the call that started it. State is in the sandbox only: any process
attached to the same sandbox can check a job.
"""

from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass

from envlayer.environment import Environment
from envlayer.errors import JobError
from envlayer.tools.truncate import HEAD_SHARE

JOB_ID = re.compile(r"^[0-9a-f]{12}$")


@dataclass(frozen=True)
class JobStatus:
    """``state`` is running, exited, killed, lost (gone without an exit status) or
    unknown (no such job). ``output`` is at most the byte budget, head and tail kept."""

    state: str
    exit_code: int | None
    output: str
    output_bytes: int
    truncated: bool


def job_dir(jobs_dir: str, job_id: str) -> str:
    """The directory of ``job_id``. Raises JobError for a malformed id."""
    if not JOB_ID.match(job_id):
        raise JobError(f"malformed job_id {job_id!r}: expected 12 hexadecimal characters")
    return f"{jobs_dir.rstrip('/')}/{job_id}"


def start(env: Environment, command: str, *, jobs_dir: str, workdir: str | None) -> tuple[str, str]:
    """Start ``command`` detached; return ``(job_id, log_path)``.

    Raises: JobError when the sandbox could not start it (its stderr is included).
    """
    job_id = uuid.uuid4().hex[:12]
    d = shlex.quote(job_dir(jobs_dir, job_id))
    cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
    script = (
        f"mkdir -p {d} && cat > {d}/cmd.sh && {cd}"
        "if command -v setsid >/dev/null 2>&1; then S=setsid; else S=; fi; "
        f'$S sh -c \'sh "$1/cmd.sh" > "$1/output.log" 2>&1; echo $? > "$1/exit"\' sh {d} '
        f"</dev/null >/dev/null 2>&1 & echo $! > {d}/pid"
    )
    result = env.exec(script, stdin=command, timeout=30)
    if not result.ok:
        raise JobError(f"could not start the job (exit {result.exit_code}): {result.stderr_text.strip()}")
    return job_id, f"{job_dir(jobs_dir, job_id)}/output.log"


def status(env: Environment, *, jobs_dir: str, job_id: str, budget: int) -> JobStatus:
    """The job's state and up to ``budget`` bytes of its log (head and tail kept)."""
    d = shlex.quote(job_dir(jobs_dir, job_id))
    head = int(budget * HEAD_SHARE)
    script = (
        f'D={d}; if [ ! -d "$D" ]; then echo unknown; echo 0; exit 0; fi; '
        # liveness first: the exit file is written before the job's shell ends, so a
        # dead job without it really was lost (checking the file first would race)
        'if kill -0 "$(cat "$D/pid" 2>/dev/null)" 2>/dev/null; then A=1; else A=0; fi; '
        'if [ -f "$D/exit" ]; then echo "exited $(cat "$D/exit")"; '
        'elif [ -f "$D/killed" ]; then echo killed; '
        "elif [ $A = 1 ]; then echo running; "
        "else echo lost; fi; "
        'N=$(wc -c < "$D/output.log" 2>/dev/null || echo 0); echo $N; '
        f'if [ "$N" -le {budget} ]; then cat "$D/output.log" 2>/dev/null; '
        f'else head -c {head} "$D/output.log"; printf \'\\n[... %s bytes omitted: the log has %s; '
        f"showing the first {head} and the last {budget - head} ...]\\n' $((N - {budget})) $N; "
        f'tail -c {budget - head} "$D/output.log"; fi'
    )
    result = env.exec(script, timeout=30)
    first, _, rest = result.stdout_text.partition("\n")
    size_line, _, output = rest.partition("\n")
    words = first.split()
    state = words[0] if words else "unknown"
    exit_code = int(words[1]) if state == "exited" and len(words) > 1 and words[1].lstrip("-").isdigit() else None
    size = int(size_line.strip() or 0) if size_line.strip().isdigit() else 0
    return JobStatus(state, exit_code, output, size, size > budget)


def running(env: Environment, *, jobs_dir: str, job_ids: list[str]) -> set[str]:
    """The subset of ``job_ids`` still running (alive, no exit status yet)."""
    if not job_ids:
        return set()
    dirs = " ".join(shlex.quote(job_dir(jobs_dir, j)) for j in job_ids)
    script = (
        f"for D in {dirs}; do "
        'if [ ! -f "$D/exit" ] && kill -0 "$(cat "$D/pid" 2>/dev/null)" 2>/dev/null; '
        'then echo "${D##*/}"; fi; done'
    )
    result = env.exec(script, timeout=30)
    return set(result.stdout_text.split()) & set(job_ids)


def kill(env: Environment, *, jobs_dir: str, job_id: str) -> None:
    """Stop the job's process group (TERM, then KILL after a second) and mark it killed."""
    d = shlex.quote(job_dir(jobs_dir, job_id))
    script = (
        f'D={d}; P=$(cat "$D/pid" 2>/dev/null) || exit 0; [ -f "$D/exit" ] && exit 0; : > "$D/killed"; '
        'kill -TERM -"$P" 2>/dev/null || kill -TERM "$P" 2>/dev/null; '
        'if kill -0 "$P" 2>/dev/null; then sleep 1; kill -KILL -"$P" 2>/dev/null || kill -KILL "$P" 2>/dev/null; fi; '
        "exit 0"
    )
    env.exec(script, timeout=30)
