"""``envlayer cp SRC TASK:DST`` and ``envlayer cp TASK:SRC DST``: files and directories
between this machine and a task's sandbox, like ``docker cp``; ``-`` as SRC or DST is a tar
archive on stdin or stdout.

It runs in the calling process (not through the session broker), on the sandbox that
``envlayer exec --task TASK`` uses. On backends with ``archive_stream`` a copy is one tar
stream in bounded memory, placed atomically and checked (:mod:`envlayer.cli.copy_stream`).
Elsewhere it goes through the Environment API: ``read_file`` / ``write_file`` for a file
(refused before anything is read past ``max_file_bytes``), ``upload_dir`` / ``download_dir``
for a directory on backends with ``directory_transfer``, and file by file otherwise.

Paths: a file lands at DST, or at DST/NAME when DST ends with ``/`` or is an existing
directory; a directory's contents land in DST (created if missing). Ctrl-C prints one line,
leaves nothing at DST and exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.capabilities import Capability, supports
from envlayer.cli import copy_stream
from envlayer.cli.console import json_text, settings_of
from envlayer.cli.copy_stream import CopyFailed
from envlayer.cli.progress import Meter, io_meter, progress
from envlayer.cli.task_sandbox import open_task_environment
from envlayer.environment import Environment
from envlayer.errors import EnvlayerError, InvalidArgument, SandboxFileNotFound, SandboxIsADirectory
from envlayer.factory import backend_specs
from envlayer.result import INTERRUPT_EXIT_CODE as INTERRUPTED
from envlayer.sandbox.tar_stream import file_chunks, tree_size

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


def _upload(env: Environment, local: str, remote: str, task: str) -> tuple[int, int]:
    """Copy host ``local`` (a path, or ``-``: a tar on stdin) to sandbox ``remote``; (files, bytes)."""
    streams = supports(env, Capability.ARCHIVE_STREAM)
    if local == "-":
        if not streams:
            raise _no_streams(env, "read a tar archive from stdin")
        counted = _Counted(file_chunks(sys.stdin.buffer))
        copy_stream.upload_archive(env, counted, remote, task)
        return counted.files, counted.bytes
    if not os.path.lexists(local):
        raise InvalidArgument("SRC", f"{local!r} does not exist on this machine", hint=_USAGE_HINT)
    if streams:
        summary = copy_stream.upload(env, local, remote, task)
        return summary.files, summary.bytes
    if os.path.isdir(local):
        if supports(env, Capability.DIRECTORY_TRANSFER):
            summary = env.upload_dir(local, remote)  # type: ignore[attr-defined]
            return summary.files, summary.bytes
        return _upload_tree(env, local, remote)
    if remote.endswith("/"):
        remote += os.path.basename(local)
    return 1, _write_bounded(env, local, remote)


def _write_bounded(env: Environment, local: str, remote: str) -> int:
    """``write_file`` of host file ``local`` (a backend that cannot stream): refused before
    anything is read when it is over the backend's ``max_file_bytes``; its size."""
    size = os.stat(local).st_size
    limit = getattr(env.options, "max_file_bytes", None)
    if limit is not None and size > limit:
        raise CopyFailed(
            f"{local!r} is {size} bytes, over max_file_bytes ({limit}) of backend {env.name!r}, "
            "which cannot stream files (it lacks archive_stream)",
            hint=f"raise the cap: -o max_file_bytes={size}",
        )
    with open(local, "rb") as fh:
        env.write_file(remote, fh.read(size + 1))
    return size


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
            size += _write_bounded(env, path, remote.rstrip("/") + "/" + relative)
            files += 1
    return files, size


def _download(env: Environment, remote: str, local: str) -> tuple[int, int]:
    """Copy sandbox ``remote`` to host ``local`` (a path, or ``-``: a tar on stdout); (files, bytes)."""
    streams = supports(env, Capability.ARCHIVE_STREAM)
    if local == "-":
        if not streams:
            raise _no_streams(env, "write a tar archive to stdout")
        if sys.stdout.isatty():
            raise InvalidArgument("DST", "`-` writes a tar archive, and stdout is a terminal", hint="pipe it: | tar -x")
        copy_stream.check_utf8(remote, "SRC")
        counted = _Counted(env.get_archive_stream(remote))  # type: ignore[attr-defined]
        for chunk in counted:
            sys.stdout.buffer.write(chunk)
        return counted.files, counted.bytes
    if streams:
        summary = copy_stream.download(env, remote, local)
        return summary.files, summary.bytes
    try:
        data = env.read_file(remote)
    except SandboxIsADirectory:
        if supports(env, Capability.DIRECTORY_TRANSFER):
            summary = env.download_dir(remote, local)  # type: ignore[attr-defined]
            return summary.files, summary.bytes
        return _download_tree(env, remote, local)
    if local.endswith("/") or os.path.isdir(local):
        local = os.path.join(local, os.path.basename(remote.rstrip("/")))
    _write_local(local, data)
    return 1, len(data)


def _write_local(local: str, data: bytes) -> None:
    """Write ``data`` to host file ``local`` through a temporary file renamed into place."""
    folder = os.path.dirname(local) or "."
    if not os.path.isdir(folder):
        raise copy_stream.no_directory(folder, None)
    fd, temp = tempfile.mkstemp(prefix=copy_stream.TEMP_PREFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, local)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _download_tree(env: Environment, remote: str, local: str) -> tuple[int, int]:
    """``download_dir`` for backends without it: the regular files ``find`` lists in
    the sandbox, one ``read_file`` each."""
    listing = lifecycle.run(env, f"cd {shlex.quote(remote)} && find . -type f -print0")
    if listing.exit_code != 0:
        raise SandboxFileNotFound(remote)
    files = size = 0
    for relative in filter(None, listing.stdout.split(b"\0")):
        name = os.fsdecode(relative)[2:]
        target = os.path.join(local, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        data = env.read_file(remote.rstrip("/") + "/" + name)
        _write_local(target, data)
        size += len(data)
        files += 1
    return files, size


def _no_streams(env: Environment, doing: str) -> InvalidArgument:
    return InvalidArgument(
        "SRC/DST",
        f"`-` needs a backend that streams tar archives; {env.name!r} cannot {doing} (it lacks archive_stream)",
        hint="copy a path instead: envlayer cp ./dir TASK:/dst",
    )


class _Counted:
    """The chunks of a tar stream passed through, counting its bytes (``files`` is 1: the
    archive is what was copied)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self.files = 1
        self.bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.bytes += len(chunk)
            yield chunk


def _remote_size(env: Environment, remote: str) -> int:
    """The bytes of the regular files at sandbox path ``remote`` (0 when it cannot say)."""
    listed = lifecycle.run(env, f"find {shlex.quote(remote)} -type f -exec stat -c %s {{}} + 2>/dev/null", timeout=60)
    return sum(int(word) for word in listed.stdout.split() if word.isdigit())


def _transfer_meter(env: Environment, plan: CopyPlan) -> Meter | None:
    """A bar's meter for ``plan`` when stderr is a terminal (the size is looked up only
    then): the host files' bytes this process reads (upload) or writes (download), out
    of the bytes to copy."""
    if not sys.stderr.isatty():
        return None
    if plan.upload:
        return io_meter(tree_size(plan.local)[1], written=False)
    return io_meter(_remote_size(env, plan.remote), written=True)


def cmd_cp(args: argparse.Namespace) -> int:
    plan = plan_copy(args.source, args.destination)
    try:
        files, size = _copy(args, plan)
    except KeyboardInterrupt:
        print(f"envlayer: cp interrupted; {_left_behind(args.source, args.destination)}", file=sys.stderr)
        return INTERRUPTED
    except OSError as exc:
        if isinstance(exc, (EnvlayerError, BrokenPipeError)):
            raise
        raise CopyFailed(f"cannot copy {exc.filename or plan.local!r}: {exc.strerror or exc}") from None
    if args.json:
        print(json_text({"files": files, "bytes": size}))
    return 0


def _copy(args: argparse.Namespace, plan: CopyPlan) -> tuple[int, int]:
    """Make the copy ``plan`` names on the task's sandbox; (files, bytes)."""
    env = _existing_task(args, plan.task)
    try:
        what = f"copying {'to' if plan.upload else 'from'} the sandbox of task {plan.task!r}"
        with progress(what, meter=_transfer_meter(env, plan)):
            if plan.upload:
                return _upload(env, plan.local, plan.remote, plan.task)
            return _download(env, plan.remote, plan.local)
    finally:
        env.cleanup()


def _left_behind(source: str, destination: str) -> str:
    """What an interrupted copy left at ``destination``, in words."""
    if destination == "-":
        return "the tar archive on stdout is incomplete"
    if source == "-":
        return f"the members unpacked before it stay in {destination}"
    return f"nothing was written to {destination}"


def add_parsers(sub: Any, shared: dict[str, argparse.ArgumentParser], make: Callable[..., Any]) -> None:
    """Register ``cp`` on ``sub`` (``make`` is the CLI's subcommand builder)."""
    p = make(
        sub,
        "cp",
        shared,
        "copy files or directories between this machine and a task's sandbox",
        "  envlayer cp ./src t1:/work/src        # a directory's contents into /work/src\n"
        "  envlayer cp t1:/work/out.log ./       # a file into the current directory\n"
        "  envlayer cp t1:/work/out - | tar -t   # a tar of it on stdout",
        "exit codes: 0 success, 1 failure (reason and hint on stderr), 2 usage error, 130 interrupted (Ctrl-C)",
    )
    p.add_argument(
        "source", metavar="SRC", help="a host path, - (a tar archive on stdin), or TASK:PATH in the task's sandbox"
    )
    p.add_argument(
        "destination", metavar="DST", help="a host path, - (a tar archive on stdout), or TASK:PATH in the sandbox"
    )
    p.set_defaults(func=cmd_cp)
