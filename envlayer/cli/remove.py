"""``envlayer rm``: remove the sandboxes of tasks, and say which were not removed and why.

The tasks are named as ``envlayer ls`` shows them: by task id, or by a sandbox's ID or
NAME (which stand for their task). ``--all`` takes every task of the current profile
(asking first on a terminal). One listing per backend says what each task has; the
removals then run concurrently, one call per task; a second listing says what is
still there. A named task that is not removed is an error (exit 1) with its reason:
running without ``--force``, only durable data without ``--purge``, unknown, or still
there after the call (in use, or the backend refused).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.cli.exec_plan import settings_of
from envlayer.cli.report import report, sweep_targets
from envlayer.discovery.plugin_calls import backend_name
from envlayer.environment import SandboxInfo
from envlayer.errors import InvalidArgument

WORKERS = 8
"""Tasks removed at the same time."""

Release = Callable[[str, str, str | None], list[lifecycle.SweepOutcome]]
"""``release(task, profile, backend)``: the session brokers let go of the task (see
:func:`envlayer.cli.app._release_from_brokers`)."""


@dataclass
class Plan:
    """What ``rm`` will do: the tasks to remove, and a reason for each it will not."""

    tasks: list[str] = field(default_factory=list)
    refused: list[lifecycle.SweepOutcome] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    """``--all``: what it leaves, in words (running without --force, data without --purge)."""


def _resolve(words: Sequence[str], known: list[SandboxInfo]) -> list[str]:
    """The task each word names: a task id, else the task of the sandbox whose ID or
    NAME it is (as ``ls`` shows them), else the word itself (an unknown task)."""
    tasks = {s.task for s in known}
    by_handle = {handle: s.task for s in known for handle in (s.id, s.detail.get("name", "")) if handle}
    resolved = [word if word in tasks else by_handle.get(word, word) for word in words]
    return list(dict.fromkeys(resolved))


def _refusal(task: str, sandboxes: list[SandboxInfo], args: argparse.Namespace) -> str:
    """Why ``task`` (with these listed ``sandboxes``) will not be removed; "" if it will."""
    running = [s for s in sandboxes if s.status == "running"]
    if running and not args.force:
        return f"task {task!r} is running ({running[0].backend} {running[0].id}); --force removes it anyway"
    if sandboxes and all(s.status == "data" for s in sandboxes) and not args.purge:
        return f"task {task!r} has only durable data ({sandboxes[0].id}); --purge removes it"
    return ""


def plan_removal(args: argparse.Namespace, known: list[SandboxInfo]) -> Plan:
    """The tasks of ``args`` (or every task with ``--all``) checked against ``known``."""
    plan = Plan()
    words = sorted({s.task for s in known}) if args.all else _resolve(args.tasks, known)
    for task in words:
        reason = _refusal(task, [s for s in known if s.task == task], args)
        if not reason:
            plan.tasks.append(task)
        elif args.all:
            plan.kept.append(reason)
        else:
            backend = next((s.backend for s in known if s.task == task), args.backend or "envlayer")
            plan.refused.append(lifecycle.SweepOutcome(backend, supported=True, error=f"not removed: {reason}"))
    return plan


def confirm_all(plan: Plan, known: list[SandboxInfo], profile: str, yes: bool) -> bool:
    """``--all``: ask on a terminal (``-y``: do not ask). Without a terminal and ``-y``,
    raise :class:`InvalidArgument`. True to go on."""
    count = sum(1 for s in known if s.task in set(plan.tasks))
    question = f"remove {count} sandbox(es) of {len(plan.tasks)} task(s) in profile {profile!r}?"
    if yes or not plan.tasks:
        return True
    if not sys.stdin.isatty():
        raise InvalidArgument(
            "--all", f"will not {question[:-1]} without confirmation: no terminal to ask on", hint="add -y to confirm"
        )
    print(f"envlayer: {question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _merged(outcomes: list[tuple[str, lifecycle.SweepOutcome]]) -> list[lifecycle.SweepOutcome]:
    """Per-task outcomes as one per backend (errors prefixed with their task)."""
    merged: dict[str, lifecycle.SweepOutcome] = {}
    for task, o in outcomes:
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


def _unremoved(
    plan: Plan, known: list[SandboxInfo], after: list[SandboxInfo], removed: list[SandboxInfo], profile: str, able: bool
) -> list[lifecycle.SweepOutcome]:
    """An error for each task of ``plan`` that nothing was removed of, or that still has
    a sandbox ``rm`` meant to remove (``able``: some backend can remove sandboxes)."""
    out = []
    for task in plan.tasks:
        before = {s.id for s in known if s.task == task}
        left = [s for s in after if s.task == task and s.id in before and s.status != "data"]
        if left:
            reason = f"{left[0].backend} {left[0].id} is still there (in use, or the backend refused; --debug says)"
        elif not before and not any(s.task == task for s in removed):
            reason = f"no sandbox of task {task!r} in profile {profile!r}" if able else "no backend here can remove it"
        else:
            continue
        backend = left[0].backend if left else "envlayer"
        hint = "" if left else "`envlayer ls` lists the tasks, ids and names rm takes"
        out.append(lifecycle.SweepOutcome(backend, supported=True, error=f"not removed: {reason}", hint=hint))
    return out


def _removable(specs: list[lifecycle.BackendSpec]) -> tuple[list[lifecycle.BackendSpec], list[lifecycle.SweepOutcome]]:
    """The backends ``rm`` removes on, and a note for each that cannot remove sandboxes."""
    able = [spec for spec in specs if supports(spec[0], Capability.REMOVE_SANDBOX)]
    unable = [spec for spec in specs if spec not in able]
    return able, lifecycle.remove_sandbox(unable, "", profile="")  # notes only: nothing is called


def cmd_rm(args: argparse.Namespace, release: Release) -> int:
    """Run ``envlayer rm`` (``release``: see :data:`Release`); the exit code."""
    if bool(args.tasks) == bool(args.all):
        raise InvalidArgument("TASK", "name the tasks to remove, or --all (not both)", hint="envlayer rm TASK...")
    settings = settings_of(args)
    specs, failures = sweep_targets(args, settings)
    able, unable = _removable(specs)
    listable = [spec for spec in able if supports(spec[0], Capability.LIST_SANDBOXES)]
    listing = lifecycle.list_sandboxes(listable, profile=settings.profile)
    broken = {o.backend for o in listing if o.error}  # said once, by the listing's error
    able = [spec for spec in able if backend_name(spec[0]) not in broken]
    known = [s for o in listing for s in o.sandboxes]
    plan = plan_removal(args, known)
    if args.all and not confirm_all(plan, known, settings.profile, args.yes):
        print("envlayer: nothing removed", file=sys.stderr)
        return 1

    def remove(task: str) -> list[tuple[str, lifecycle.SweepOutcome]]:
        released = release(task, settings.profile, args.backend)
        outcomes = lifecycle.remove_sandbox(able, task, profile=settings.profile, force=args.force, purge=args.purge)
        return [(task, o) for o in released + outcomes]

    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(plan.tasks)))) as pool:
        done = [pair for pairs in pool.map(remove, plan.tasks) for pair in pairs]
    removed = [s for _, o in done for s in o.sandboxes]
    after = [s for o in lifecycle.list_sandboxes(listable, profile=settings.profile) for s in o.sandboxes]
    errors = [o for o in listing if o.error] + _unremoved(plan, known, after, removed, settings.profile, bool(able))
    for reason in plan.kept:
        print(f"envlayer: note: kept: {reason}", file=sys.stderr)
    return report(failures + _merged(done) + unable + plan.refused + errors, args, "removed")
