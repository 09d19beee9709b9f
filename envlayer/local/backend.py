"""The embedded default backend: commands run as processes on this machine.

Lifecycle: nothing to create or tear down; ``cleanup()`` closes the handle and ends the
session shell. With ``exec_mode = "session"`` (default) commands run one after another in
one persistent shell (:mod:`envlayer.local.session`): ``cd``/``export`` persist;
a call that finds the session busy (another thread) runs as its own process, in the
session's directory. A deleted working directory falls back to its nearest existing
parent, and the result's ``notice`` says so; a ``cwd`` option naming a directory that
never existed fails every command with exit 126, as a per-call ``cwd`` does.
Commands inherit this process's environment (as it was at creation) without credential variables
(``env_blocklist``, see :mod:`envlayer.sandbox.command_env`) unless forwarded (``forward_env``).
Every command runs in its own session and process group; a timeout or an interrupt
kills the whole tree (SIGTERM, one second of grace, SIGKILL), including processes
that left the group with ``setsid`` (found through their ``ENVLAYER_EXEC_ID``).
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from envlayer.capabilities import Capability
from envlayer.environment import DEFAULT_TASK
from envlayer.errors import (
    FileTooLarge,
    InvalidArgument,
    SandboxFileError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
    SandboxPermissionDenied,
)
from envlayer.execution.cancel import killer_for
from envlayer.execution.collector import OutputCollector
from envlayer.execution.tree_kill import EXEC_ID_VAR, kill_tree
from envlayer.local import snapshots as local_snapshots
from envlayer.local import tasks as local_tasks
from envlayer.local.session import LocalSession, moved_notice, nearest_existing
from envlayer.local.terminal import PtyTerminal
from envlayer.options import OptionError, option
from envlayer.request import ExecRequest, file_payload
from envlayer.result import ExecResult
from envlayer.sandbox.base import SandboxEnvironment
from envlayer.sandbox.command_env import CREDENTIAL_PATTERNS, inherited_environment, with_command_defaults
from envlayer.sandbox.options import SandboxOptions
from envlayer.sandbox.tar_stream import ChunkReader, extract_stream, tar_chunks
from envlayer.snapshot import Snapshot, SnapshotRetentionOptions, apply_retention

_READ_CHUNK = 65536
_DRAIN_GRACE = 0.1
"""After the command exits, how long to keep reading pipes that a background child
still holds open before returning (so ``cmd &`` never hangs the call)."""
_POLL_EVERY = 0.05
"""Seconds between looks at a one-shot process's end where it has no process descriptor."""
_ENDED = "ended"
"""The selector's tag of a one-shot process's descriptor (see :func:`_process_fd`)."""


@dataclass(kw_only=True)
class LocalOptions(SandboxOptions, SnapshotRetentionOptions):
    """Options of the local backend."""

    shell: str = option("/bin/sh", doc="Shell that runs string commands as `shell -c COMMAND`.")
    inherit_env: bool = option(
        True,
        doc="Start commands with this process's environment, minus variables matching `env_blocklist` "
        "(then apply `env`).",
    )
    env_blocklist: list[str] = option(
        doc="Shell globs (case-insensitive) of variables never inherited from this process: credentials "
        "such as `*_API_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, `AWS_*` (see envlayer.sandbox.command_env). "
        "`[]` inherits everything.",
        factory=lambda: list(CREDENTIAL_PATTERNS),
    )
    forward_env: list[str] = option(
        doc="Names of variables inherited even when `env_blocklist` matches them (explicit opt-in).",
        factory=list,
    )
    on_fingerprint_mismatch: Literal["none", "recreate", "error"] = option(
        "none",
        doc="`none`: keep no record of the task's options (commands on this machine leave nothing to replace); "
        "`error` or `recreate` (the CLI sets one): record them in a file (see docs/backends/local.md) and, when a "
        "call's options differ from the task's, raise, or take the new ones with a notice. Per-process setting.",
    )
    snapshot_dir: str = option(
        "",
        doc="Where snapshots (copies of `cwd`) and the working copies of forks are kept; "
        "empty: `${XDG_STATE_HOME:-~/.local/state}/envlayer/snapshots` (see docs/snapshots.md).",
    )
    snapshot_max_bytes: int = option(
        2 * 1024**3,
        doc="Largest directory a snapshot copies, in bytes (the sum of its regular files, measured "
        "before copying); a larger one is refused and nothing is copied. 0: no limit.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.snapshot_max_bytes < 0:
            raise OptionError("snapshot_max_bytes", "must be >= 0 (0: no limit)")


class LocalEnvironment(SandboxEnvironment):
    """Runs commands on the local machine. See the module docstring for the lifecycle."""

    name = "local"
    Options = LocalOptions
    capabilities = frozenset(
        {
            Capability.STREAMING,
            Capability.CANCEL,
            Capability.UNSET_ENV,
            Capability.PERSISTENT_SESSION,
            Capability.SNAPSHOT,
            Capability.ARCHIVE_STREAM,
        }
    )
    environment_variables = ()  # commands inherit the creating process's environment: it selects nothing
    options_change_in_place = True
    """A local task's options change without losing anything: the CLI takes a call's
    differing options (with a notice) instead of refusing them (see envlayer.local.tasks)."""
    options: LocalOptions

    def open_sandbox(self) -> None:
        """Commands run in ``options.cwd`` or, with :attr:`from_snapshot`, in a private copy of
        that snapshot's files (deleted by :meth:`cleanup`); see
        :mod:`envlayer.local.snapshots`."""
        self.fork_directory: str | None = None
        from_snapshot = self.from_snapshot
        mode = self.options.on_fingerprint_mismatch
        if mode != "none" and from_snapshot is None and self.task_id != DEFAULT_TASK:
            notice = local_tasks.claim(self.options, profile=self.profile, task=self.task_id, mode=mode)
            if notice:
                self.announce(notice)
        if from_snapshot is None:
            self.cwd = os.path.abspath(os.path.expanduser(self.options.cwd or os.getcwd()))
        else:
            store = local_snapshots.store_path(self.options.snapshot_dir)
            self.cwd = self.fork_directory = local_snapshots.make_fork_directory(store, from_snapshot, self.task_id)
        self._environ = dict(os.environ)
        """This process's environment when this environment was created: what commands inherit."""
        self._cwd_existed = os.path.isdir(self.cwd)
        """Whether :attr:`cwd` was ever seen to exist: only then does its loss fall back."""
        self._session: LocalSession | None = None
        if self.options.exec_mode == "session":
            self._session = LocalSession(self.options.shell, self.cwd, self._base_environment)
            weakref.finalize(self, self._session.close)

    def _base_environment(self) -> dict[str, str]:
        """What every command starts with: this process's environment (when this environment
        was created) without credential
        variables (unless forwarded), then the agent defaults and ``env``."""
        opts = self.options
        inherited = (
            inherited_environment(self._environ, blocklist=opts.env_blocklist, forward=opts.forward_env)
            if opts.inherit_env
            else {}
        )
        return {**inherited, **with_command_defaults(opts.env)}

    # --- exec: the base runs the session-or-one-shot choice --------------------------

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        assert self._session is not None
        return self._session.run(request, OutputCollector.for_request(request, self.options))

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        base = (self._session.cwd if self._session else None) or self.cwd
        return self._run_oneshot(request, OutputCollector.for_request(request, self.options), base)

    def _run_oneshot(self, request: ExecRequest, collector: OutputCollector, base: str) -> ExecResult:
        """Run ``request`` as its own process in ``base`` (or the call's ``cwd`` relative to
        it). A deleted ``base`` falls back to its nearest existing parent, with a notice;
        the ``cwd`` option's directory only once it was seen to exist (else exit 126)."""
        notice = ""
        if base == self.cwd and not self._cwd_existed:
            self._cwd_existed = os.path.isdir(base)
            if not self._cwd_existed:
                collector.write("stderr", f"working directory does not exist: {base}\n".encode())
                return collector.result(request, 126)
        if not os.path.isdir(base):
            fallback = nearest_existing(base)
            notice, base = moved_notice(base, fallback), fallback
        argv = (
            [self.options.shell, "-c", request.command] if isinstance(request.command, str) else list(request.command)
        )
        child_env = {**self._base_environment(), **request.env, EXEC_ID_VAR: request.exec_id}
        for name in request.unset_env or ():
            child_env.pop(name, None)
        run_cwd = os.path.join(base, request.cwd) if request.cwd else base
        try:
            proc = subprocess.Popen(
                argv,
                cwd=run_cwd,
                env=child_env,
                stdin=subprocess.PIPE if request.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            if not os.path.isdir(run_cwd):
                collector.write("stderr", f"working directory does not exist: {run_cwd}\n".encode())
                return collector.result(request, 126)
            collector.write("stderr", f"command not found: {exc.filename or argv[0]}\n".encode())
            return collector.result(request, 127)
        except PermissionError as exc:
            collector.write("stderr", f"permission denied: {exc.filename or argv[0]}\n".encode())
            return collector.result(request, 126)
        with killer_for(request.cancel, lambda: kill_tree(proc.pid, request.exec_id)):
            timed_out = self._collect(proc, request, collector)
        result = collector.result(request, _exit_code(proc.returncode), timed_out=timed_out)
        return result.with_notice(notice) if notice else result

    def _collect(self, proc: subprocess.Popen[bytes], request: ExecRequest, collector: OutputCollector) -> bool:
        """Read the pipes until the command ends (plus a short drain, for background
        children that keep them open) or its deadline; kill its tree on timeout or on any
        exception. Returns whether it timed out. Where the kernel gives a process file
        descriptor (Linux 5.3+: ``os.pidfd_open``) the end is waited for with the pipes,
        and seen at once; elsewhere the process is polled every :data:`_POLL_EVERY`."""
        writer = None
        if request.stdin is not None:
            writer = threading.Thread(target=_feed_stdin, args=(proc, request.stdin), daemon=True)
            writer.start()
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, name)
        ended = _process_fd(proc.pid)
        if ended is not None:
            sel.register(ended, selectors.EVENT_READ, _ENDED)
        deadline = request.deadline
        exited_at: float | None = None
        timed_out = False
        try:
            while sel.get_map():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    timed_out = True
                    break
                if exited_at is None and ended is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > _DRAIN_GRACE:
                    break
                for key, _ in sel.select(_wait(now, deadline, exited_at, polled=ended is None)):
                    if key.data is _ENDED:
                        sel.unregister(key.fileobj)
                        exited_at = time.monotonic()
                        continue
                    try:
                        chunk = os.read(key.fd, _READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    collector.write(key.data, chunk)
            if not timed_out and exited_at is None:  # polled, and the pipes closed first
                try:
                    proc.wait(timeout=request.remaining())
                except subprocess.TimeoutExpired:
                    timed_out = True
        except BaseException:
            self._kill(proc, request.exec_id)
            raise
        finally:
            sel.close()
            if ended is not None:
                os.close(ended)
        if timed_out:
            self._kill(proc, request.exec_id)
        else:
            proc.wait()  # background children are left alone on purpose: `server &` must survive
        if writer is not None:
            writer.join(timeout=1.0)
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
        return timed_out

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes], exec_id: str) -> None:
        kill_tree(proc.pid, exec_id)
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def open_terminal(self, rows: int, cols: int) -> PtyTerminal:
        """An interactive ``shell`` on a new pty in the task's working directory (the
        session's current one), with the commands' environment and the caller's ``TERM``."""
        self._ensure_open()
        cwd = (self._session.cwd if self._session else None) or self.cwd
        environ = {**self._base_environment(), "TERM": os.environ.get("TERM", "xterm")}
        return PtyTerminal(self.options.shell, cwd, environ, rows, cols)

    # --- files ----------------------------------------------------------------

    def _local_path(self, path: str) -> str:
        full = self.resolve_path(os.path.expanduser(path), self.cwd)
        root = self.options.file_root
        if root is not None:
            real_root = os.path.realpath(os.path.join(self.cwd, root))
            real = os.path.realpath(full)
            if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
                raise SandboxPathError(path, real_root)
        return full

    def read_file(self, path: str) -> bytes:
        """Read a local file with this process's rights; see
        :class:`~envlayer.environment.Environment`."""
        self._ensure_open()
        full = self._local_path(path)
        with _denied_as(path, "read"):
            try:
                size = os.stat(full).st_size
                if os.path.isdir(full):
                    raise SandboxIsADirectory(path)
                if size > self.options.max_file_bytes:
                    raise FileTooLarge(path, size, self.options.max_file_bytes)
                with open(full, "rb") as fh:
                    return fh.read(self.options.max_file_bytes + 1)
            except FileNotFoundError:
                raise SandboxFileNotFound(path) from None

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write atomically (temp file + rename): a reader never sees half a file.

        The rename would replace a read-only file, so an existing file is first opened
        for writing (without truncating it): a file this process may not write raises
        :class:`SandboxPermissionDenied` and is left untouched, as a plain ``open(path,
        "w")`` would. The replacement keeps the file's mode (and, for root, its owner).
        """
        self._ensure_open()
        payload = file_payload(path, data, self.options.max_file_bytes)
        full = self._local_path(path)
        if os.path.isdir(full):
            raise SandboxIsADirectory(path)
        parent = os.path.dirname(full)
        with _denied_as(path, "write"):
            os.makedirs(parent, exist_ok=True)
            existing = _writable_stat(full)
            fd, tmp = tempfile.mkstemp(prefix=".envlayer-", dir=parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(payload)
                if existing is None:
                    umask = os.umask(0)
                    os.umask(umask)
                    os.chmod(tmp, 0o666 & ~umask)
                else:
                    os.chmod(tmp, existing.st_mode & 0o7777)
                    if os.geteuid() == 0:
                        os.chown(tmp, existing.st_uid, existing.st_gid)
                os.replace(tmp, full)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise

    def put_archive_stream(self, remote_dir: str, chunks: Iterable[bytes]) -> None:
        """Unpack a tar stream under directory ``remote_dir`` member by member, with the
        ``"data"`` filter's rules; see :class:`~envlayer.transfer.SupportsArchiveStream`."""
        self._ensure_open()
        dest = self._local_path(remote_dir)
        if not os.path.isdir(dest):
            raise SandboxFileNotFound(remote_dir)
        with _denied_as(remote_dir, "write"), ChunkReader(chunks) as reader:
            try:
                extract_stream(reader, dest)  # type: ignore[arg-type]
            except tarfile.TarError as exc:
                hint = "send a tar (POSIX, GNU or PAX), e.g. `tar -c -f - DIR`"
                raise InvalidArgument("archive", f"not a tar archive: {exc}", hint=hint) from None
            except (PermissionError, SandboxPathError):
                raise
            except OSError as exc:
                raise SandboxFileError(exc.filename or remote_dir, "unpack into", exc.strerror or str(exc)) from None

    def get_archive_stream(self, remote: str) -> Iterator[bytes]:
        """A tar stream of ``remote`` (a final symlink is followed), read as it is sent;
        see :class:`~envlayer.transfer.SupportsArchiveStream`."""
        self._ensure_open()
        full = os.path.realpath(self._local_path(remote))
        with _denied_as(remote, "read"):
            try:
                yield from tar_chunks(full, os.path.basename(full) or ".")
            except FileNotFoundError:
                raise SandboxFileNotFound(remote) from None

    def cleanup(self) -> None:
        """Close the handle and end the session shell (background jobs it started keep
        running); a fork's working copy is deleted. Idempotent."""
        self._closed = True
        if self._session is not None:
            self._session.close()
        if self.fork_directory is not None:
            shutil.rmtree(self.fork_directory, ignore_errors=True)

    # --- snapshots (envlayer.local.snapshots) -----------------------------------

    def create_snapshot(self, *, name: str | None = None) -> Snapshot:
        """A copy of the task's own directory (the ``cwd`` option, or the fork's copy; the
        session's current directory is not followed) as a snapshot named ``name``, refused
        past ``snapshot_max_bytes``; then the profile's snapshots beyond the retention
        options (``snapshot_keep``, ``snapshot_max_age``) are removed. Raises
        :class:`InvalidArgument` when the task has no directory of its own (no ``cwd``
        option): the directory this process stands in is never taken."""
        if self.fork_directory is None and not self.options.cwd:
            raise InvalidArgument(
                "cwd",
                f"a local snapshot copies the task's own directory, and task {self.task_id!r} has none: "
                f"the cwd option is not set (the directory this process stands in, {os.getcwd()}, is not taken)",
                hint="name the task's directory: -o cwd=DIR on the command line, cwd under [backends.local] "
                "in the config, or LocalOptions(cwd=DIR)",
            )
        store = local_snapshots.store_path(self.options.snapshot_dir)
        snap = local_snapshots.create(
            store,
            self.cwd,
            profile=self.profile,
            task=self.task_id,
            name=name,
            limit=self.options.snapshot_max_bytes,
        )
        kept = local_snapshots.list_all(store, profile=self.profile)
        apply_retention(kept, self.options, lambda ident: local_snapshots.remove(store, ident), spare=snap.id)
        return snap

    @classmethod
    def list_snapshots(cls, *, profile: str | None, options: LocalOptions) -> list[Snapshot]:
        """The snapshots of ``profile`` (None: all) in the store, newest first."""
        return local_snapshots.list_all(local_snapshots.store_path(options.snapshot_dir), profile=profile)

    @classmethod
    def remove_snapshot(cls, snapshot_id: str, *, options: LocalOptions) -> list[Snapshot]:
        """Delete snapshot ``snapshot_id`` (forks keep their copies); what was removed."""
        return local_snapshots.remove(local_snapshots.store_path(options.snapshot_dir), snapshot_id)


@contextmanager
def _denied_as(path: str, operation: str) -> Iterator[None]:
    """Turn a ``PermissionError`` from the OS into :class:`SandboxPermissionDenied` naming ``path``."""
    try:
        yield
    except SandboxPathError:
        raise
    except PermissionError as exc:
        raise SandboxPermissionDenied(path, operation, exc.strerror or "") from None


def _writable_stat(full: str) -> os.stat_result | None:
    """The stat of the existing file at ``full`` after proving this process may write it
    (an open for writing, no truncation); ``None`` when there is no such file.
    Raises ``PermissionError`` for a file this process may not write."""
    try:
        fd = os.open(full, os.O_WRONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _feed_stdin(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _process_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` ends (``os.pidfd_open``), or
    None where the platform has none (not Linux, or a kernel before 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait(now: float, deadline: float | None, exited_at: float | None, *, polled: bool) -> float | None:
    """How long a one-shot's selector may wait (None: until something is ready): to the
    deadline, to the end of the drain once the process ended, and at most
    :data:`_POLL_EVERY` when its end must be ``polled``."""
    bounds = [_POLL_EVERY] if polled else []
    if deadline is not None:
        bounds.append(deadline - now)
    if exited_at is not None:
        bounds.append(exited_at + _DRAIN_GRACE - now)
    return max(min(bounds), 0.0) if bounds else None


def _exit_code(returncode: int | None) -> int:
    """Map Popen's negative signal codes to the shell convention 128 + signal."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode
