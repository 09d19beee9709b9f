"""``envlayer snapshot``, ``envlayer fork`` and ``envlayer snapshots ls|rm``.

They run in the calling process, not through the session broker: a snapshot is taken
of the task's sandbox as the backend stores it (a persist-mode Docker container is the
same one the broker's shell uses), and the forks are persist-mode sandboxes that later
``envlayer exec --task NEW_TASK`` calls attach to.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.cli.console import json_text
from envlayer.cli.console import settings_of as _settings
from envlayer.cli.report import report, sweep_targets
from envlayer.cli.task_sandbox import open_task_environment
from envlayer.environment import Environment
from envlayer.errors import InvalidArgument
from envlayer.factory import backend_specs
from envlayer.options import option_fields


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


@contextmanager
def _snapshot_notes() -> Iterator[None]:
    """Within the block, what backends log at INFO on ``envlayer.snapshots`` (the local
    backend: the size it is about to copy) is printed on stderr as ``envlayer: ...``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("envlayer: %(message)s"))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("envlayer.snapshots")
    level, logger.level = logger.level, logging.INFO
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def cmd_snapshot(args: argparse.Namespace) -> int:
    env = _existing_task(args)
    try:
        with _snapshot_notes():
            snapshot = lifecycle.take_snapshot(env, args.name)
    finally:
        env.cleanup()
    print(json_text(dataclasses.asdict(snapshot)) if args.json else snapshot.id)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    env = _existing_task(args)
    try:
        if not supports(env, Capability.PERSIST_ACROSS_PROCESSES):
            raise _forks_would_not_last(env)
        forks = lifecycle.open_forks(env, args.new_tasks)
    finally:
        env.cleanup()
    for fork in forks:
        fork.cleanup()  # persist mode: the sandbox stays for `envlayer exec --task`
    rows = [{"backend": f.name, "task": f.task_id, "profile": f.profile} for f in forks]
    print(json_text(rows) if args.json else "\n".join(f.task_id for f in forks))
    return 0


def _forks_would_not_last(env: Environment) -> InvalidArgument:
    """The error for ``fork`` on a backend whose sandboxes end with the process: the
    option to change when the backend has it, else the backends that persist."""
    if "persist_across_processes" in option_fields(type(env.options)):
        return InvalidArgument(
            "persist_across_processes",
            f"forks made by `envlayer fork` must outlive it, and backend {env.name!r} is set to remove its "
            "sandboxes when the process ends",
            hint="set persist_across_processes = true (the default), or fork from Python with env.fork()",
        )
    lasting = ", ".join(lifecycle.backends_with(Capability.PERSIST_ACROSS_PROCESSES)) or "none is installed"
    return InvalidArgument(
        "backend",
        f"forks made by `envlayer fork` must outlive it, and backend {env.name!r} keeps no sandbox after its "
        "process ends",
        hint=f"fork from Python with env.fork(), or use a backend whose sandboxes persist ({lasting})",
    )


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
    snapshot_id = _snapshot_named(args.snapshot_id, specs, settings.profile)
    outcomes = lifecycle.remove_snapshot(specs, snapshot_id)
    if not any(o.sandboxes for o in outcomes):
        outcomes.append(
            lifecycle.SweepOutcome(
                args.backend or "envlayer",
                supported=True,
                error=f"not removed: no snapshot with id or name {args.snapshot_id!r} in profile {settings.profile!r}",
                hint="`envlayer snapshots ls` lists the ids and names snapshots rm takes",
            )
        )
    return report(failures + outcomes, args, "removed")


def _snapshot_named(word: str, specs: list[lifecycle.BackendSpec], profile: str) -> str:
    """The id of the snapshot ``word`` names, as ``snapshots ls`` shows it: its ID, or its
    NAME in ``profile``; ``word`` itself when none matches. Raises
    :class:`InvalidArgument` when the name is that of several snapshots."""
    listed = [s for o in lifecycle.list_snapshots(specs, profile=profile) for s in o.sandboxes]
    if any(s.id == word for s in listed):
        return word
    named = [s for s in listed if s.detail.get("name") == word]
    if len(named) > 1:
        raise InvalidArgument(
            "SNAPSHOT",
            f"{len(named)} snapshots are named {word!r}: " + ", ".join(s.id for s in named),
            hint="name one by its id",
        )
    return named[0].id if named else word


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
        "exit codes: 0 success, 1 nothing removed (the reason on stderr) or a backend's call failed, 2 usage error",
        flags=("settings", "json", "verbose", "listing"),
    )
    p.add_argument("action", choices=["ls", "rm"])
    p.add_argument("snapshot_id", nargs="?", metavar="SNAPSHOT", help="for rm: its ID or NAME, as `snapshots ls` shows")
    p.add_argument("--all-profiles", action="store_true", help="ls: every profile, not only the current one")
    p.set_defaults(func=cmd_snapshots, late_positional="snapshot_id")
