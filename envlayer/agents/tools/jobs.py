"""Background jobs inside a sandbox, driven only through ``exec`` with POSIX sh.

A job lives in ``<jobs dir>/<job_id>/``: ``cmd.sh`` (the command, fed through stdin so
no quoting is involved and ``file_root`` does not apply), ``pid``, ``output.log``
(stdout and stderr), ``exit`` (written when the command ends) and ``killed`` (written by
:func:`kill`). The jobs dir is, by default, per user inside the sandbox:
``${XDG_CACHE_HOME:-$HOME/.cache}/envlayer/jobs`` (``/tmp/.cache/...`` without a HOME),
resolved by the sandbox's shell. Every directory envlayer creates there is 0700 and every
file it writes 0600; the job's own command runs with the caller's umask. The job runs
under ``setsid`` where available, so it has its own process group and survives the call
that started it. State is in the sandbox only: any process attached to the same sandbox
(as the same user) can check a job. Every script runs in a subshell, so neither its
``umask`` nor its ``cd`` leaks into a persistent session.
"""

from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass

from envlayer.agents.tools.truncate import HEAD_SHARE
from envlayer.dispatch import run
from envlayer.environment import Environment
from envlayer.errors import JobError

JOB_ID = re.compile(r"^[0-9a-f]{12}$")
DEFAULT_JOBS_DIR = '"${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/envlayer/jobs"'
"""The default jobs dir, as a shell expression the sandbox resolves."""


@dataclass(frozen=True)
class JobStatus:
    """``state`` is running, exited, killed, lost (gone without an exit status) or
    unknown (no such job). ``output`` is at most the byte budget, head and tail kept.
    ``log_file`` is the job's log as the sandbox resolved it."""

    state: str
    exit_code: int | None
    output: str
    output_bytes: int
    truncated: bool
    log_file: str = ""


def check_job_id(job_id: str) -> None:
    """Raise JobError for a malformed job id."""
    if not JOB_ID.match(job_id):
        raise JobError(f"malformed job_id {job_id!r}: expected 12 hexadecimal characters")


def _base(jobs_dir: str | None) -> str:
    return shlex.quote(jobs_dir.rstrip("/") or "/") if jobs_dir else DEFAULT_JOBS_DIR


def _dir_line(jobs_dir: str | None, job_id: str) -> str:
    """Shell that sets ``B`` (jobs dir) and ``D`` (this job's dir)."""
    check_job_id(job_id)
    return f'B={_base(jobs_dir)}; D="$B/{job_id}"; '


def start(env: Environment, command: str, *, jobs_dir: str | None, workdir: str | None) -> tuple[str, str]:
    """Start ``command`` detached; return ``(job_id, log_path)``.

    Raises: JobError when the sandbox could not start it (its stderr is included).
    """
    job_id = uuid.uuid4().hex[:12]
    cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
    job = 'umask 077; exec >"$1/output.log" 2>&1; umask "$2"; sh "$1/cmd.sh"; c=$?; umask 077; echo $c >"$1/exit"'
    script = (
        "( U=$(umask); umask 077; "
        + _dir_line(jobs_dir, job_id)
        + 'mkdir -p "$B" && mkdir -m 700 "$D" && cat > "$D/cmd.sh" && '
        + cd
        + "if command -v setsid >/dev/null 2>&1; then S=setsid; else S=; fi; "
        + f'$S sh -c {shlex.quote(job)} sh "$D" "$U" </dev/null >/dev/null 2>&1 & '
        + 'echo $! > "$D/pid" && echo "$D/output.log" )'
    )
    result = run(env, script, stdin=command, timeout=30)
    if not result.ok:
        raise JobError(f"could not start the job (exit {result.exit_code}): {result.stderr_text.strip()}")
    return job_id, result.stdout_text.strip().splitlines()[-1]


def status(env: Environment, *, jobs_dir: str | None, job_id: str, budget: int) -> JobStatus:
    """The job's state and up to ``budget`` bytes of its log (head and tail kept)."""
    head = int(budget * HEAD_SHARE)
    script = (
        "( " + _dir_line(jobs_dir, job_id) + 'if [ ! -d "$D" ]; then echo unknown; echo 0; echo; exit 0; fi; '
        # liveness first: the exit file is written before the job's shell ends, so a
        # dead job without it really was lost (checking the file first would race)
        'if kill -0 "$(cat "$D/pid" 2>/dev/null)" 2>/dev/null; then A=1; else A=0; fi; '
        'if [ -f "$D/exit" ]; then echo "exited $(cat "$D/exit")"; '
        'elif [ -f "$D/killed" ]; then echo killed; '
        "elif [ $A = 1 ]; then echo running; "
        "else echo lost; fi; "
        'N=$(wc -c < "$D/output.log" 2>/dev/null || echo 0); echo $N; echo "$D/output.log"; '
        f'if [ "$N" -le {budget} ]; then cat "$D/output.log" 2>/dev/null; '
        f'else head -c {head} "$D/output.log"; printf \'\\n[... %s bytes omitted: the log has %s; '
        f"showing the first {head} and the last {budget - head} ...]\\n' $((N - {budget})) $N; "
        f'tail -c {budget - head} "$D/output.log"; fi )'
    )
    result = run(env, script, timeout=30)
    first, _, rest = result.stdout_text.partition("\n")
    size_line, _, rest = rest.partition("\n")
    log_file, _, output = rest.partition("\n")
    words = first.split()
    state = words[0] if words else "unknown"
    exit_code = int(words[1]) if state == "exited" and len(words) > 1 and words[1].lstrip("-").isdigit() else None
    size = int(size_line.strip() or 0) if size_line.strip().isdigit() else 0
    return JobStatus(state, exit_code, output, size, size > budget, log_file)


def running(env: Environment, *, jobs_dir: str | None, job_ids: list[str]) -> set[str]:
    """The subset of ``job_ids`` still running (alive, no exit status yet)."""
    if not job_ids:
        return set()
    for job_id in job_ids:
        check_job_id(job_id)
    script = (
        f'( B={_base(jobs_dir)}; for J in {" ".join(job_ids)}; do D="$B/$J"; '
        'if [ ! -f "$D/exit" ] && kill -0 "$(cat "$D/pid" 2>/dev/null)" 2>/dev/null; '
        'then echo "$J"; fi; done )'
    )
    result = run(env, script, timeout=30)
    return set(result.stdout_text.split()) & set(job_ids)


def kill(env: Environment, *, jobs_dir: str | None, job_id: str) -> None:
    """Stop the job's process group (TERM, then KILL after a second) and mark it killed."""
    script = (
        "( umask 077; "
        + _dir_line(jobs_dir, job_id)
        + 'P=$(cat "$D/pid" 2>/dev/null) || exit 0; [ -f "$D/exit" ] && exit 0; : > "$D/killed"; '
        'kill -TERM -"$P" 2>/dev/null || kill -TERM "$P" 2>/dev/null; '
        'if kill -0 "$P" 2>/dev/null; then sleep 1; kill -KILL -"$P" 2>/dev/null || kill -KILL "$P" 2>/dev/null; fi; '
        "exit 0 )"
    )
    run(env, script, timeout=30)


def remove(env: Environment, *, jobs_dir: str | None, job_id: str) -> None:
    """Delete the job's directory (command, pid, log); the job must have ended
    (:func:`kill` it first). Raises JobError when the sandbox could not delete it."""
    result = run(env, "( " + _dir_line(jobs_dir, job_id) + 'rm -rf -- "$D" )', timeout=30)
    if not result.ok:
        raise JobError(f"could not delete job {job_id}'s files (exit {result.exit_code}): {result.stderr_text.strip()}")
