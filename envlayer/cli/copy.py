"""``envlayer cp SRC TASK:DST`` and ``envlayer cp TASK:SRC DST``: files and directories
between this machine and a task's sandbox, like ``docker cp``.

It runs in the calling process (not through the session broker), on the sandbox that
``envlayer exec --task TASK`` uses, through the Environment API: ``read_file`` /
``write_file`` for a file, ``upload_dir`` / ``download_dir`` for a directory on backends
with ``directory_transfer``, and file by file otherwise. The API's caps
(``max_file_bytes``, the transfer limit) and ``file_root`` confinement apply unchanged.

Paths: a file lands at DST, or at DST/NAME when DST ends with ``/`` or is an existing
directory on this machine; a directory's contents land in DST (created if missing).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.cli.exec_plan import json_text, settings_of
from envlayer.cli.progress import Meter, io_meter, progress
from envlayer.environment import Environment
from envlayer.errors import InvalidArgument, SandboxFileNotFound, SandboxIsADirectory
from envlayer.cli.task_sandbox import open_task_environment
from envlayer.factory import backend_specs

_USAGE_HINT = "envlayer cp ./src TASK:/dst   or   envlayer cp TASK:/src ./dst"


@dataclass(frozen=True)
class CopyPlan:
    """One copy: ``task`` and the sandbox path, the host path, and its direction."""

    task: str
    remote: str
    local: str
    upload: bool


def _remote_part(text: str) -> tuple[str, str] | None:
    """``("TASK", "PATH")`` for ``TASK:PATH``; ``None`` for a host path (no colon, or a
    slash or dot before it, so ``./a:b`` and ``/x:y`` stay host paths)."""
    task, colon, path = text.partition(":")
    if not colon or not task or "/" in task or task.startswith("."):
        return None
    return task, path


def plan_copy(source: str, destination: str) -> CopyPlan:
    """The copy ``source`` -> ``destination`` names; exactly one side is ``TASK:PATH``.

    Raises InvalidArgument when both or neither side is remote, or a remote path is empty."""
    src, dst = _remote_part(source), _remote_part(destination)
    if (src is None) == (dst is None):
        which = "both SRC and DST name a task" if src else "neither SRC nor DST names a task (TASK:PATH)"
        raise InvalidArgument("SRC/DST", f"{which}; exactly one side is in the sandbox", hint=_USAGE_HINT)
    task, remote = src or dst  # type: ignore[misc]
    if not remote:
        raise InvalidArgument("SRC/DST", f"no path after {task + ':'!r}", hint=_USAGE_HINT)
    return CopyPlan(task=task, remote=remote, local=destination if src else source, upload=dst is not None)


def _existing_task(args: argparse.Namespace, task: str) -> Environment:
    """The environment of ``task``; where the backend lists its sandboxes, the task
    must have one already, so a mistyped task creates nothing."""
    settings = settings_of(args)
    specs, failures = backend_specs(settings, [settings.backend])
    if failures:
        raise failures[0].error
    cls = specs[0][0]
    if supports(cls, Capability.LIST_SANDBOXES):
        (listed,) = lifecycle.list_sandboxes(specs, profile=settings.profile)
        if listed.error is None and task not in {s.task for s in listed.sandboxes if s.status != "data"}:
            raise InvalidArgument(
                "TASK",
                f"task {task!r} has no {listed.backend} sandbox in profile {settings.profile!r}",
                hint="`envlayer ls` lists them; make it first (`envlayer exec --task TASK ...`)",
            )
    return open_task_environment(settings, task)


def _upload(env: Environment, local: str, remote: str) -> tuple[int, int]:
    """Copy host ``local`` to sandbox ``remote``; (files, bytes)."""
    if os.path.isdir(local):
        if supports(env, Capability.DIRECTORY_TRANSFER):
            summary = env.upload_dir(local, remote)  # type: ignore[attr-defined]
            return summary.files, summary.bytes
        return _upload_tree(env, local, remote)
    if not os.path.exists(local):
        raise InvalidArgument("SRC", f"{local!r} does not exist on this machine", hint=_USAGE_HINT)
    if remote.endswith("/"):
        remote += os.path.basename(local)
    with open(local, "rb") as fh:
        data = fh.read()
    env.write_file(remote, data)
    return 1, len(data)


def _upload_tree(env: Environment, local: str, remote: str) -> tuple[int, int]:
    """``upload_dir`` for backends without it: every regular file, one ``write_file``
    each (symlinks and special files skipped, as ``upload_dir`` does)."""
    files = size = 0
    for folder, _dirs, names in os.walk(local):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            relative = os.path.relpath(path, local)
            size += _upload(env, path, remote.rstrip("/") + "/" + relative)[1]
            files += 1
    return files, size


def _download(env: Environment, remote: str, local: str) -> tuple[int, int]:
    """Copy sandbox ``remote`` to host ``local``; (files, bytes)."""
    try:
        data = env.read_file(remote)
    except SandboxIsADirectory:
        if supports(env, Capability.DIRECTORY_TRANSFER):
            summary = env.download_dir(remote, local)  # type: ignore[attr-defined]
            return summary.files, summary.bytes
        return _download_tree(env, remote, local)
    if local.endswith("/") or os.path.isdir(local):
        local = os.path.join(local, os.path.basename(remote.rstrip("/")))
    with open(local, "wb") as fh:
        fh.write(data)
    return 1, len(data)


def _download_tree(env: Environment, remote: str, local: str) -> tuple[int, int]:
    """``download_dir`` for backends without it: the regular files ``find`` lists in
    the sandbox, one ``read_file`` each."""
    listing = env.exec(f"cd {shlex.quote(remote)} && find . -type f -print0")
    if listing.exit_code != 0:
        raise SandboxFileNotFound(remote)
    files = size = 0
    for relative in filter(None, listing.stdout.split(b"\0")):
        name = os.fsdecode(relative)[2:]
        target = os.path.join(local, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        size += _download(env, remote.rstrip("/") + "/" + name, target)[1]
        files += 1
    return files, size


def _local_size(local: str) -> int:
    """The bytes of the regular files at host path ``local`` (what an upload sends)."""
    if not os.path.isdir(local):
        return os.path.getsize(local) if os.path.isfile(local) else 0
    return sum(
        os.path.getsize(path)
        for folder, _dirs, names in os.walk(local)
        for path in (os.path.join(folder, name) for name in names)
        if os.path.isfile(path) and not os.path.islink(path)
    )


def _remote_size(env: Environment, remote: str) -> int:
    """The bytes of the regular files at sandbox path ``remote`` (0 when it cannot say)."""
    listed = env.exec(f"find {shlex.quote(remote)} -type f -exec stat -c %s {{}} + 2>/dev/null", timeout=60)
    return sum(int(word) for word in listed.stdout.split() if word.isdigit())


def _transfer_meter(env: Environment, plan: CopyPlan) -> Meter | None:
    """A bar's meter for ``plan`` when stderr is a terminal (the size is looked up only
    then): the host files' bytes this process reads (upload) or writes (download), out
    of the bytes to copy."""
    if not sys.stderr.isatty():
        return None
    if plan.upload:
        return io_meter(_local_size(plan.local), written=False)
    return io_meter(_remote_size(env, plan.remote), written=True)


def cmd_cp(args: argparse.Namespace) -> int:
    plan = plan_copy(args.source, args.destination)
    env = _existing_task(args, plan.task)
    try:
        what = f"copying {'to' if plan.upload else 'from'} the sandbox of task {plan.task!r}"
        with progress(what, meter=_transfer_meter(env, plan)):
            if plan.upload:
                files, size = _upload(env, plan.local, plan.remote)
            else:
                files, size = _download(env, plan.remote, plan.local)
    finally:
        env.cleanup()
    if args.json:
        print(json_text({"files": files, "bytes": size}))
    return 0


def add_parsers(sub: Any, shared: dict[str, argparse.ArgumentParser], make: Callable[..., Any]) -> None:
    """Register ``cp`` on ``sub`` (``make`` is the CLI's subcommand builder)."""
    p = make(
        sub,
        "cp",
        shared,
        "copy files or directories between this machine and a task's sandbox",
        "  envlayer cp ./src t1:/work/src        # a directory's contents into /work/src\n"
        "  envlayer cp t1:/work/out.log ./       # a file into the current directory",
    )
    p.add_argument("source", metavar="SRC", help="a host path, or TASK:PATH in the task's sandbox")
    p.add_argument("destination", metavar="DST", help="a host path, or TASK:PATH in the task's sandbox")
    p.set_defaults(func=cmd_cp)
