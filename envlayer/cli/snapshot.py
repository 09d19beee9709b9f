"""``envlayer snapshot``, ``envlayer fork`` and ``envlayer snapshots ls|rm``.

They run in the calling process, not through the session broker: a snapshot is taken
of the task's sandbox as the backend stores it (a persist-mode Docker container is the
same one the broker's shell uses), and the forks are persist-mode sandboxes that later
``envlayer exec --task NEW_TASK`` calls attach to.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.cli.exec_plan import json_text
from envlayer.cli.exec_plan import settings_of as _settings
from envlayer.cli.report import report, sweep_targets
from envlayer.environment import Environment
from envlayer.errors import InvalidArgument
from envlayer.cli.task_sandbox import open_task_environment
from envlayer.factory import backend_specs


def _existing_task(args: argparse.Namespace) -> Environment:
    """The environment of ``args.task`` on a backend with ``snapshot``. Where the
    backend can list its sandboxes, the task must have one already (a sandbox made just
    now would be an empty snapshot): nothing is created for a mistyped task."""
    settings = _settings(args)
    specs, failures = backend_specs(settings, [settings.backend])
    if failures:
        raise failures[0].error
    cls = specs[0][0]
    if not supports(cls, Capability.SNAPSHOT):
        raise lifecycle.snapshot_refused(cls, "take a snapshot")
    if supports(cls, Capability.LIST_SANDBOXES):
        (listed,) = lifecycle.list_sandboxes(specs, profile=settings.profile)
        if listed.error is None and args.task not in {s.task for s in listed.sandboxes if s.status != "data"}:
            raise InvalidArgument(
                "TASK",
                f"task {args.task!r} has no {listed.backend} sandbox in profile {settings.profile!r}",
                hint="`envlayer ls` lists them; make it first (`envlayer exec --task TASK ...`)",
            )
    return open_task_environment(settings, args.task)


def cmd_snapshot(args: argparse.Namespace) -> int:
    env = _existing_task(args)
    try:
        snapshot = lifecycle.take_snapshot(env, args.name)
    finally:
        env.cleanup()
    print(json_text(dataclasses.asdict(snapshot)) if args.json else snapshot.id)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    env = _existing_task(args)
    try:
        if not supports(env, Capability.PERSIST_ACROSS_PROCESSES):
            raise InvalidArgument(
                "persist_across_processes",
                f"forks made by `envlayer fork` must outlive it, and backend {env.name!r} is set to remove its "
                "sandboxes when the process ends",
                hint="set persist_across_processes = true (the default), or fork from Python with env.fork()",
            )
        forks = lifecycle.open_forks(env, args.new_tasks)
    finally:
        env.cleanup()
    for fork in forks:
        fork.cleanup()  # persist mode: the sandbox stays for `envlayer exec --task`
    rows = [{"backend": f.name, "task": f.task_id, "profile": f.profile} for f in forks]
    print(json_text(rows) if args.json else "\n".join(f.task_id for f in forks))
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = sweep_targets(args, settings)
    if args.action == "ls":
        if args.snapshot_id:
            raise InvalidArgument("SNAPSHOT", "`snapshots ls` takes no snapshot id", hint="envlayer snapshots ls")
        profile = None if args.all_profiles else settings.profile
        return report(failures + lifecycle.list_snapshots(specs, profile=profile), args, "listed")
    if not args.snapshot_id:
        raise InvalidArgument("SNAPSHOT", "`snapshots rm` needs the snapshot id", hint="see `envlayer snapshots ls`")
    return report(failures + lifecycle.remove_snapshot(specs, args.snapshot_id), args, "removed")


def add_parsers(sub: Any, shared: dict[str, argparse.ArgumentParser], make: Callable[..., Any]) -> None:
    """Register ``snapshot``, ``fork`` and ``snapshots`` on ``sub`` (``make`` is the
    CLI's subcommand builder, ``shared`` its groups of shared flags)."""
    p = make(
        sub,
        "snapshot",
        shared,
        "snapshot the sandbox of a task (backends with snapshot: see docs/snapshots.md)",
        "  envlayer snapshot build-42 --name deps-installed\n  envlayer snapshot build-42 --json",
    )
    p.add_argument("task", metavar="TASK", help="the task whose sandbox to snapshot")
    p.add_argument("--name", help="a name for the snapshot (letters, digits, _ . -)")
    p.set_defaults(func=cmd_snapshot)

    p = make(
        sub,
        "fork",
        shared,
        "start new tasks from a snapshot of a task's sandbox",
        "  envlayer fork build-42 try-1 try-2 try-3\n  envlayer exec --task try-2 -- make test",
    )
    p.add_argument("task", metavar="TASK", help="the task to fork")
    p.add_argument("new_tasks", nargs="+", metavar="NEW_TASK", help="the new tasks, each with its own sandbox")
    p.set_defaults(func=cmd_fork)

    p = make(
        sub,
        "snapshots",
        shared,
        "list or remove snapshots",
        "  envlayer snapshots ls\n  envlayer snapshots rm --backend docker envlayer-snapshot:deps-installed-1a2b3c4d",
        "exit codes: 0 success, 1 a backend's call failed (the others still ran), 2 usage error",
        flags=("settings", "json", "verbose"),
    )
    p.add_argument("action", choices=["ls", "rm"])
    p.add_argument("snapshot_id", nargs="?", metavar="SNAPSHOT", help="for rm: the id `snapshots ls` shows")
    p.add_argument("--all-profiles", action="store_true", help="ls: every profile, not only the current one")
    p.set_defaults(func=cmd_snapshots, late_positional="snapshot_id")
