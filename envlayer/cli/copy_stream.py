"""``envlayer cp`` over tar streams, for backends with ``archive_stream``: any size in
bounded memory, and nothing half-written at the destination.

Each copy travels as one tar stream (:mod:`envlayer.sandbox.tar_stream`) under a temporary
name, ``.envlayer-cp-<hex>``, next to (or inside) the destination, and takes the
destination's name only when it is complete: renamed into place, or, for a directory
copied into an existing one, merged into it. On an error or Ctrl-C the temporary copy is
removed. A file written into the sandbox is then checked by its size there, so a write
the sandbox did not keep (``/proc``, ``/sys``) is an error, not a success.

Paths in the sandbox are probed once with ``sh`` (what is there, and its absolute path);
the commands that rename, check and clean up run through ``exec``, so the sandbox needs
``sh``, ``mv``, ``cp``, ``rm`` and ``stat`` (coreutils or busybox).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass

from envlayer.capabilities import backend_name
from envlayer.dispatch import run
from envlayer.environment import Environment
from envlayer.errors import EnvlayerError, InvalidArgument, SandboxFileError
from envlayer.execution.shell_script import printf_format, quote
from envlayer.sandbox.tar_stream import ChunkReader, extract_stream, tar_chunks, tree_size
from envlayer.transfer import TransferSummary

TEMP_PREFIX = ".envlayer-cp-"
_PROBE = (
    "case $1 in /*) p=$1 ;; *) p=$(pwd)/$1 ;; esac; "
    'if [ -d "$p" ]; then k=dir; elif [ -e "$p" ]; then k=file; '
    'elif [ -d "$(dirname -- "$p")" ]; then k=missing; else k=noparent; fi; printf "%s\\n%s" "$k" "$p"'
)


class CopyFailed(EnvlayerError):
    """The copy did not do what was asked (exit 1): the message names the path."""


@dataclass(frozen=True)
class RemotePath:
    """A sandbox path as found there: ``kind`` is ``dir``, ``file``, ``missing`` (its
    directory exists) or ``noparent``; ``path`` is absolute."""

    kind: str
    path: str

    @property
    def parent(self) -> str:
        return os.path.dirname(self.path.rstrip("/")) or "/"


def sh_word(path: str) -> str:
    """``path`` as one ``sh`` word: quoted, or, for a name that is not UTF-8 (its bytes
    kept by the surrogateescape of ``sys.argv``), made by ``printf`` from its bytes."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return f'"$(printf {printf_format(os.fsencode(path))})"'
    return quote(path)


def check_utf8(path: str, side: str) -> None:
    """Raise :class:`InvalidArgument` when sandbox ``path`` is not UTF-8 (backends pass
    paths as text)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            side,
            f"the sandbox path {os.fsencode(path)!r} is not UTF-8",
            hint="copy the directory that holds it (names inside a directory may be any bytes), "
            "or rename it in the sandbox",
        ) from None


def run_sh(env: Environment, script: str, what: str) -> bytes:
    """Run ``script`` in the sandbox; its stdout. Raises :class:`CopyFailed` naming
    ``what`` and quoting stderr when it fails."""
    done = run(env, script, timeout=600)
    if done.exit_code != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"exit {done.exit_code}"
        raise CopyFailed(f"{what}: {detail}")
    return done.stdout


def probe(env: Environment, path: str) -> RemotePath:
    """What is at sandbox ``path`` (relative to the sandbox's working directory)."""
    out = run_sh(env, f"set -- {sh_word(path)}; {_PROBE}", f"cannot look at {path!r} in the sandbox")
    kind, _, absolute = out.partition(b"\n")
    return RemotePath(kind.decode(), os.fsdecode(absolute))


def no_directory(path: str, task: str | None, env: Environment | None = None) -> CopyFailed:
    """The error for a missing destination directory, in the sandbox of ``task`` (``env``)
    or (None) on this machine. The hint's command runs as written: it names the backend
    and profile of ``env``."""
    if task is None:
        hint = f"create it first: mkdir -p {quote(path)}"
        return CopyFailed(f"no such directory on this machine: {path!r}", hint=hint)
    where = ""
    if env is not None:
        where = f"--backend {backend_name(env)} --profile {quote(getattr(env, 'profile', 'default'))} "
    mkdir = f"envlayer exec {where}--task {quote(task)} -- mkdir -p {quote(path)}"
    return CopyFailed(f"no such directory in the sandbox: {path!r}", hint=f"create it first: {mkdir}")


def _dir_onto_file(path: str, where: str) -> CopyFailed:
    return CopyFailed(
        f"{path!r} is a file {where}; a directory cannot be copied onto it",
        hint="name a directory (it is created when missing)",
    )


def _remove_quietly(env: Environment, path: str) -> None:
    """Remove the temporary copy at sandbox ``path``; say so when that fails."""
    try:
        run(env, f"rm -rf -- {sh_word(path)}", timeout=120)
    except (Exception, KeyboardInterrupt):  # a second Ctrl-C too: the line below says what is left
        print(f"envlayer: could not remove the partial copy {path!r} in the sandbox", file=sys.stderr)


# --- host -> sandbox ----------------------------------------------------------------------


def upload(env: Environment, local: str, remote: str, task: str) -> TransferSummary:
    """Copy host file or directory ``local`` to sandbox ``remote`` (a file lands at
    ``remote``, or ``remote/NAME`` when that is a directory or ends with ``/``; a
    directory's contents land in ``remote``, created if missing)."""
    is_dir = os.path.isdir(local)
    size = 0 if is_dir else os.stat(local).st_size
    target = probe(env, remote)
    if target.kind == "noparent" or (remote.endswith("/") and target.kind != "dir"):
        raise no_directory(target.parent if target.kind == "noparent" else target.path, task, env)
    if target.kind == "file" and is_dir:
        raise _dir_onto_file(remote, "in the sandbox")
    into = target.path if target.kind == "dir" else target.parent
    final = target.path
    if target.kind == "dir" and not is_dir:
        final = f"{into.rstrip('/')}/{os.path.basename(local.rstrip('/'))}"
    check_utf8(into, "DST")
    temp = f"{into.rstrip('/')}/{TEMP_PREFIX}{secrets.token_hex(6)}"
    try:
        env.put_archive_stream(into, tar_chunks(local, os.path.basename(temp)))  # type: ignore[attr-defined]
        if is_dir:
            return _place_dir(env, local, temp, final, merge=target.kind == "dir")
        _place_file(env, temp, final, size)
        return TransferSummary(files=1, bytes=size)
    except BaseException:
        _remove_quietly(env, temp)
        raise


def _place_file(env: Environment, temp: str, final: str, size: int) -> None:
    """Rename the uploaded ``temp`` to ``final`` and check the sandbox kept ``size`` bytes."""
    t, f = sh_word(temp), sh_word(final)
    script = f"if [ -d {f} ]; then echo 'is a directory' >&2; exit 1; fi; mv -f -- {t} {f} && stat -c %s -- {f}"
    kept = run_sh(env, script, f"the sandbox did not keep {final!r}").strip()
    if kept != str(size).encode():
        there = kept.decode(errors="replace") or "none"
        raise CopyFailed(f"the sandbox did not keep {final!r}: {size} bytes sent, {there} there")


def _place_dir(env: Environment, local: str, temp: str, final: str, *, merge: bool) -> TransferSummary:
    """Move the uploaded directory ``temp`` to ``final`` (or merge it into the existing one)."""
    t, f = sh_word(temp), sh_word(final)
    script = f"cp -a -- {t}/. {f}/ && rm -rf -- {t}" if merge else f"mv -- {t} {f}"
    run_sh(env, script, f"the sandbox did not keep {final!r}")
    files, size = tree_size(local)
    return TransferSummary(files=files, bytes=size)


def upload_archive(env: Environment, chunks: Iterator[bytes], remote: str, task: str) -> None:
    """Unpack the tar ``chunks`` (``cp - TASK:DIR``) under the existing sandbox directory
    ``remote``, member by member, as ``docker cp`` does."""
    target = probe(env, remote)
    if target.kind != "dir":
        raise no_directory(target.path, task, env)
    check_utf8(target.path, "DST")
    env.put_archive_stream(target.path, chunks)  # type: ignore[attr-defined]


# --- sandbox -> host ----------------------------------------------------------------------


def download(env: Environment, remote: str, local: str) -> TransferSummary:
    """Copy sandbox ``remote`` to host ``local``: a file lands at ``local``, or
    ``local/NAME`` when that is a directory or ends with ``/``; a directory's contents land
    in ``local`` (created if missing, merged into an existing directory)."""
    check_utf8(remote, "SRC")
    existing_dir = os.path.isdir(local)
    if local.endswith("/") and not existing_dir:
        raise no_directory(local, None)
    into = local if existing_dir else (os.path.dirname(local) or ".")
    if not os.path.isdir(into):
        raise no_directory(into, None)
    with _temporary_directory(into) as temp:
        with closing(ChunkReader(env.get_archive_stream(remote))) as reader:  # type: ignore[attr-defined]
            summary = extract_stream(reader, temp)  # type: ignore[arg-type]
        entries = os.listdir(temp)
        if len(entries) != 1:
            raise SandboxFileError(remote, "pack", f"the archive held {len(entries)} top-level entries, not 1")
        got = os.path.join(temp, entries[0])
        if os.path.isdir(got) and not os.path.islink(got):
            _place_local_dir(got, local)
        else:
            name = os.path.basename(remote.rstrip("/"))
            _place_local_file(got, os.path.join(local, name) if existing_dir else local)
    return summary


@contextmanager
def _temporary_directory(into: str) -> Iterator[str]:
    """A new hidden directory in ``into``, removed with whatever is left in it."""
    temp = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=into)
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _place_local_dir(got: str, final: str) -> None:
    """Move the complete directory ``got`` to the missing ``final``, or merge it into the
    existing directory ``final``."""
    if os.path.isdir(final):
        _merge(got, final)
    elif os.path.lexists(final):
        raise _dir_onto_file(final, "on this machine")
    else:
        os.rename(got, final)


def _place_local_file(got: str, final: str) -> None:
    """Move the complete file ``got`` over ``final`` (not over a directory)."""
    if os.path.isdir(final) and not os.path.islink(final):
        raise CopyFailed(f"{final!r} is a directory on this machine", hint="name a file, or a directory to copy into")
    os.replace(got, final)


def _merge(source: str, target: str) -> None:
    """Move everything in directory ``source`` into directory ``target`` (files replace files)."""
    for entry in os.listdir(source):
        src, dst = os.path.join(source, entry), os.path.join(target, entry)
        if os.path.isdir(src) and not os.path.islink(src) and os.path.isdir(dst) and not os.path.islink(dst):
            _merge(src, dst)
        elif os.path.isdir(dst) and not os.path.islink(dst):
            raise CopyFailed(f"{dst!r} is a directory on this machine; the copy has a file there")
        else:
            os.replace(src, dst)
