"""``envlayer rm``: remove the sandboxes of tasks, and say which were not removed and why.

The tasks are named as ``envlayer ls`` shows them: by task id, or by a sandbox's ID or
NAME (which stand for their task). ``--all`` takes every task of the current profile
(asking first on a terminal). One listing per backend says what each task has; the
removals then run concurrently, one backend call per task and backend; a second listing
says what is still there. What a backend removes without ``--force`` is its own rule
(Docker: stopped containers; Modal: sandboxes running no command). A named task that is
not (wholly) removed is an error (exit 1) with its reason: a sandbox left (running,
without ``--force``; else in use or refused), only durable data without ``--purge``, or
no such task. With ``--all`` what is left is a note.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.cli.console import settings_of
from envlayer.cli.report import note, report, sweep_targets
from envlayer.discovery.plugin_calls import backend_name
from envlayer.environment import SandboxInfo
from envlayer.errors import InvalidArgument

WORKERS = 8
"""Tasks removed at the same time."""

Release = Callable[[str, str, str | None], list[lifecycle.SweepOutcome]]
"""``release(task, profile, backend)``: the session brokers let go of the task (see
:func:`envlayer.cli.app._release_from_brokers`)."""

Removed = list[tuple[str, lifecycle.SweepOutcome]]
"""Outcomes of the removal calls, each with its task."""


def resolve_tasks(words: Sequence[str], known: list[SandboxInfo]) -> list[str]:
    """The task each word names: a task id, else the task of the sandbox whose ID or
    NAME it is (as ``ls`` shows them), else the word itself (an unknown task)."""
    tasks = {s.task for s in known}
    by_handle = {handle: s.task for s in known for handle in (s.id, s.detail.get("name", "")) if handle}
    return list(dict.fromkeys(word if word in tasks else by_handle.get(word, word) for word in words))


def confirm_all(tasks: list[str], known: list[SandboxInfo], args: argparse.Namespace, profile: str) -> bool:
    """``--all``: ask on a terminal, counting what ``rm`` is to remove (durable data only
    with ``--purge``; ``-y``: do not ask). Without a terminal and ``-y``, raise
    :class:`InvalidArgument`. True to go on."""
    if args.yes or not tasks:
        return True
    count = sum(1 for s in known if s.task in set(tasks) and (args.purge or s.status != "data"))
    question = f"remove {count} sandbox(es) of {len(tasks)} task(s) in profile {profile!r}"
    if not sys.stdin.isatty():
        raise InvalidArgument(
            "--all", f"will not {question} without confirmation: no terminal to ask on", hint="add -y to confirm"
        )
    print(f"envlayer: {question}? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        return sys.stdin.readline().strip().lower() in ("y", "yes")
    except KeyboardInterrupt:  # Ctrl-C at the question: a no
        print(file=sys.stderr)
        return False


@dataclasses.dataclass(frozen=True)
class Asked:
    """What ``rm`` was asked for, as the reasons need it."""

    force: bool
    purge: bool
    profile: str
    can_remove: bool
    """Some backend here can remove sandboxes."""


def why_not_removed(
    task: str, before: list[SandboxInfo], left: list[SandboxInfo], anything_removed: bool, asked: Asked
) -> str:
    """Why ``task`` is not (wholly) removed, given what was listed of it ``before`` and is
    ``left`` after the calls; "" when it is gone as asked."""
    sandboxes = [s for s in left if s.status != "data"]
    if sandboxes:
        first = sandboxes[0]
        why = "--force removes it anyway" if not asked.force else "in use, or the backend refused; --debug says why"
        return f"task {task!r}: {first.backend} {first.id} ({first.status}) is still there; {why}"
    if anything_removed:
        return ""
    if before and not asked.purge:
        return f"task {task!r} has only durable data ({before[0].id}); --purge removes it"
    if before:
        return f"task {task!r}: {before[0].backend} {before[0].id} is still there (--debug says why)"
    if not asked.can_remove:
        return f"task {task!r}: no backend here can remove sandboxes"
    return f"no sandbox of task {task!r} in profile {asked.profile!r}"


def _merged(done: Removed) -> list[lifecycle.SweepOutcome]:
    """Per-task outcomes as one per backend (errors prefixed with their task)."""
    merged: dict[str, lifecycle.SweepOutcome] = {}
    for task, o in done:
        error = f"task {task!r}: {o.error}" if o.error else None
        before = merged.get(o.backend)
        if before is None:
            merged[o.backend] = dataclasses.replace(o, error=error, sandboxes=list(o.sandboxes))
            continue
        before.sandboxes.extend(o.sandboxes)
        if error:
            joined = "\n".join(e for e in (before.error, error) if e)
            merged[o.backend] = dataclasses.replace(before, error=joined, hint=o.hint or before.hint)
    return list(merged.values())


def _gone(done: Removed) -> set[tuple[str, str]]:
    """(backend, id) of what the calls removed: a listing may still show it a while
    (a Kubernetes pod ``Terminating``), and that is not a sandbox left."""
    return {(s.backend, s.id) for _, o in done for s in o.sandboxes}


def _verdicts(
    args: argparse.Namespace,
    asked: Asked,
    tasks: list[str],
    known: list[SandboxInfo],
    after: list[SandboxInfo],
    done: Removed,
) -> list[lifecycle.SweepOutcome]:
    """An error outcome for each named task not removed (``--all``: a note instead)."""
    out = []
    gone = _gone(done)
    for task in tasks:
        removed = any(o.sandboxes for t, o in done if t == task)
        before = [s for s in known if s.task == task]
        left = [s for s in after if s.task == task and (s.backend, s.id) not in gone]
        reason = why_not_removed(task, before, left, removed, asked)
        if not reason:
            continue
        if args.all:
            note(f"kept: {reason}")
            continue
        backend = before[0].backend if before else args.backend or "envlayer"
        hint = "" if before else "`envlayer ls` lists the tasks, and the ids and names rm takes"
        out.append(lifecycle.SweepOutcome(backend, supported=True, error=f"not removed: {reason}", hint=hint))
    return out


def cmd_rm(args: argparse.Namespace, release: Release) -> int:
    """Run ``envlayer rm`` (``release``: see :data:`Release`); the exit code."""
    if bool(args.tasks) == bool(args.all):
        raise InvalidArgument("TASK", "name the tasks to remove, or --all (not both)", hint="envlayer rm TASK...")
    settings = settings_of(args)
    specs, failures = sweep_targets(args, settings)
    able = [spec for spec in specs if supports(spec[0], Capability.REMOVE_SANDBOX)]
    unable = lifecycle.remove_sandbox([s for s in specs if s not in able], "", profile="")  # notes: nothing is called
    listable = [spec for spec in able if supports(spec[0], Capability.LIST_SANDBOXES)]
    listing = lifecycle.list_sandboxes(listable, profile=settings.profile)
    broken = {o.backend for o in listing if o.error}  # said once, by the listing's error
    able = [spec for spec in able if backend_name(spec[0]) not in broken]
    known = [s for o in listing for s in o.sandboxes]
    tasks = sorted({s.task for s in known}) if args.all else resolve_tasks(args.tasks, known)
    if args.all and not confirm_all(tasks, known, args, settings.profile):
        print("envlayer: nothing removed", file=sys.stderr)
        return 1

    def remove(task: str) -> Removed:
        released = release(task, settings.profile, args.backend) if args.force else []
        outcomes = lifecycle.remove_sandbox(able, task, profile=settings.profile, force=args.force, purge=args.purge)
        return [(task, o) for o in released + outcomes]

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(tasks)))) as pool:
        done = [pair for pairs in pool.map(remove, tasks) for pair in pairs]
    after = [s for o in lifecycle.list_sandboxes(listable, profile=settings.profile) for s in o.sandboxes]
    if not args.force:  # a task wholly gone (or held only by a broker) is let go of now
        gone = _gone(done)
        left = {s.task for s in after if s.status != "data" and (s.backend, s.id) not in gone}
        done += [(task, o) for task in tasks if task not in left for o in release(task, settings.profile, args.backend)]
    asked = Asked(args.force, args.purge, settings.profile, bool(able))
    errors = [o for o in listing if o.error] + _verdicts(args, asked, tasks, known, after, done)
    return report(failures + _merged(done) + unable + errors, args, "removed")
