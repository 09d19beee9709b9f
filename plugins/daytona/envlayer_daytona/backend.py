"""``DaytonaEnvironment``: the envlayer backend that runs commands in a Daytona sandbox.

Lifecycle (details in docs/backends/daytona.md):

* The constructor creates, attaches to or starts the sandbox of (profile, task) (see
  :mod:`envlayer_daytona.sandbox`) and prepares the working directory; the session shell
  (the core's ``PersistentShell`` over :mod:`envlayer_daytona.stream`) starts with the first
  command. It raises
  :class:`BackendUnavailable` for a missing key, an unreachable API, an unknown snapshot or
  image, or a quota, each with a hint.
* ``cleanup()`` in persist mode (default) ends this process's shell and leaves the sandbox
  to Daytona's auto-stop. ``cleanup(force_remove=True)``, or any cleanup with
  ``persist_across_processes = false``, deletes the sandbox on a background thread that
  :meth:`wait_for_cleanup` joins.
* A sandbox found not running when a command is sent (auto-stop, another process, an
  error) is brought back as :func:`envlayer_daytona.sandbox.revive` decides: started,
  resumed, recovered, or re-created (saying its data is lost), at most once per call and
  only when the command provably did not run; a command is never run twice.

Importing this module does not import the Daytona SDK (read through :mod:`envlayer_daytona.sdk`),
nor the plugin's modules that only some calls need: the methods that use them import
them, since ``envlayer backends`` and every CLI call import this class.
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from envlayer.capabilities import Capability
from envlayer.environment import SandboxInfo
from envlayer.errors import BackendUnavailable
from envlayer.execution.shell_session import PersistentShell
from envlayer.options import BaseOptions
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer.sandbox.base import MANAGED_SANDBOX_CAPABILITIES
from envlayer.sandbox.client_identity import ClientIdentity
from envlayer.sandbox.command_env import COMMAND_DEFAULTS
from envlayer.sandbox.managed import ManagedSandboxEnvironment
from envlayer.sandbox.paths import confined_path
from envlayer.snapshot import Snapshot
from envlayer.transfer import TransferSummary
from envlayer_daytona import sdk
from envlayer_daytona.options import DaytonaOptions

log = logging.getLogger("envlayer.daytona")
T = TypeVar("T")

ALL_CAPABILITIES = MANAGED_SANDBOX_CAPABILITIES | {Capability.UNSET_ENV, Capability.SNAPSHOT}


class _NotStarted(BackendUnavailable):
    """The command could not be sent because the sandbox is not running: it did not run, so
    starting the sandbox and running it is safe."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="the next call starts the sandbox again")


class DaytonaEnvironment(ManagedSandboxEnvironment):
    """Commands and files in a Daytona sandbox; see the module docstring."""

    name = "daytona"
    Options = DaytonaOptions
    capabilities = ALL_CAPABILITIES
    environment_variables = ("DAYTONA_*",)  # credentials.py and the SDK's Daytona()
    options: DaytonaOptions
    recovery_hint = "check the sandbox in the Daytona dashboard; something keeps stopping it"

    @classmethod
    def client_identity(cls, options: Any, environ: Mapping[str, str], cwd: str) -> ClientIdentity:
        """Whom a caller with ``options``, ``environ`` and ``cwd`` reaches, and as whom
        (see :mod:`envlayer.sandbox.client_identity`)."""
        from envlayer_daytona.client import client_identity

        return client_identity(options, environ, cwd)

    def open_sandbox(self) -> None:
        """Connect to the Daytona API, create or attach the sandbox, prepare the working directory."""
        from envlayer_daytona.client import get_client
        from envlayer_daytona.sandbox import build_spec

        self._client = get_client(self.options)
        self._spec = build_spec(self.options, profile=self.profile, task=self.task_id)
        self._last_refresh = time.monotonic()
        self._sandbox: Any = None
        self._attach()
        self._workdir = self._guard(self._prepare_workdir, "preparing the working directory")
        self._shell = self._new_shell(self._workdir)

    # --- sandbox ------------------------------------------------------------------------

    def _attach(self) -> str:
        """Create/attach/start the sandbox; returns what was done (for ``recovered``)."""
        from envlayer_daytona.sandbox import ensure

        fork = self.from_snapshot.id if self.from_snapshot is not None else None
        attached = ensure(self._client, self.options, self._spec, fork)
        with self._state_lock:
            self._sandbox = attached.sandbox
        what = "created" if attached.created else "started" if attached.started else "attached to"
        what = "recovered" if attached.recovered else what
        if attached.lost:
            log.warning("task %r: %s", self.task_id, attached.lost)
            self.announce(attached.lost)
        log.debug("%s sandbox %s for task %r", what, self._spec.name, self.task_id)
        return what

    def _prepare_workdir(self) -> str:
        """``cwd`` (created if missing), or the directory the sandbox's commands start in.

        A sandbox that was started a moment ago may answer its first toolbox call before its
        daemon is ready (an empty answer): that is retried for up to about three seconds."""
        cwd = self.options.cwd
        script = 'mkdir -p -- "$1" && cd -- "$1" && pwd'
        command = f"sh -c {shlex.quote(script)} envlayer {shlex.quote(cwd)}" if cwd else "pwd"
        for attempt in range(6):
            answer = self._sandbox.process.exec(command, timeout=int(self.options.request_timeout))
            lines = (answer.result or "").splitlines()
            if answer.exit_code == 0 and lines and lines[-1].startswith("/"):
                return lines[-1]
            if answer.exit_code not in (0, None) and lines:
                break  # a real failure (e.g. permission denied): no point retrying
            time.sleep(0.1 * (attempt + 1))
        raise BackendUnavailable(
            f"could not prepare the working directory {cwd or '(default)'} in the sandbox "
            f"(exit {answer.exit_code}): {(answer.result or '')[:300]}",
            hint="set `cwd` to a directory the sandbox user may create",
        )

    def open_terminal(self, rows: int, cols: int) -> Any:
        """An interactive shell on a Daytona PTY session in this task's sandbox, in the
        working directory with the commands' environment (``envlayer shell``); see
        :mod:`envlayer_daytona.terminal`."""
        from envlayer_daytona.terminal import DaytonaTerminal

        self._ensure_open()
        envs = {**COMMAND_DEFAULTS, **self.options.env}
        return self._guard(
            lambda: DaytonaTerminal(self._sandbox, self._workdir, envs, rows, cols), "starting an interactive shell"
        )

    @property
    def sandbox_id(self) -> str:
        """The Daytona id of the sandbox in use."""
        return self._sandbox.id

    @property
    def sandbox_name(self) -> str:
        """The Daytona name of the sandbox in use."""
        return self._sandbox.name

    def _guard(self, fn: Callable[[], T], doing: str) -> T:
        """Run an SDK call, turning its failures into :class:`BackendUnavailable` with a hint."""
        from envlayer_daytona.client import translate

        try:
            return fn()
        except sdk.errors.DaytonaError as exc:
            raise translate(exc, doing, self.options) from exc

    def _new_shell(self, start_dir: str) -> Any:
        """A core :class:`~envlayer.execution.shell_session.PersistentShell` over a
        :class:`~envlayer_daytona.stream.DaytonaStream` (not started until its first run)."""
        return PersistentShell(self._open_stream, run_aside=self._aside, start_dir=start_dir, upload=self._upload)

    def _open_stream(self) -> Any:
        from envlayer_daytona.client import translate
        from envlayer_daytona.stream import open_stream

        try:
            return open_stream(
                self._sandbox,
                shell="/bin/sh",
                env={**COMMAND_DEFAULTS, **self.options.env},
                lost=self._lost,
                tick=self._refresh_activity,
                max_wait=min(2.0, self.options.activity_interval / 2),
                request_timeout=self.options.request_timeout,
            )
        except sdk.errors.DaytonaError as exc:
            if self._not_running():
                raise _NotStarted(f"the sandbox is not running: {exc}") from exc
            raise translate(exc, "starting a shell in the sandbox", self.options) from exc

    def _aside(self, argv: list[str]) -> None:
        """Run one of the core's helper commands (the kill script, a clean-up) to its end."""
        self._sandbox.process.exec(" ".join(shlex.quote(a) for a in argv), timeout=int(self.options.request_timeout))

    def _upload(self, path: str, data: bytes) -> None:
        self._sandbox.fs.upload_file(data, path)

    def _lost(self, exc: BaseException, sent: bool = True) -> BackendUnavailable:
        """The error for an API failure while talking to a session shell: when the sandbox
        is no longer running, the command was cut (or, not ``sent``, never started: then it
        is :class:`_NotStarted` and may be run after a restart)."""
        from envlayer_daytona.client import translate

        if self._not_running():
            if not sent:
                return _NotStarted(f"the sandbox stopped before the command was sent: {exc}")
            return BackendUnavailable(
                f"the sandbox {self.sandbox_name} stopped or was deleted while the command ran; "
                "the command may have partly run and was NOT re-run",
                hint="check its effects and retry; the next call starts or re-creates the sandbox",
            )
        return translate(exc, "talking to the session shell", self.options)

    # --- recovery (the base retries once, see envlayer.sandbox.base) ---------------------

    def is_gone(self, exc: Exception) -> bool:
        """The command could not be sent because the sandbox is not running."""
        return isinstance(exc, _NotStarted)

    def sandbox_identity(self) -> str:
        return str(self._sandbox.id)

    def recover(self, seen: str) -> str:
        """The sandbox ``seen`` was found not running: bring it back as
        :func:`envlayer_daytona.sandbox.revive` decides (wait, start, resume, recover, or
        replace it, saying that its data is lost). Returns what was done (for ``recovered``)."""
        from envlayer_daytona.sandbox import revive

        with self._state_lock:
            self._drop_session()
            if self._sandbox.id != seen:
                return "sandbox recreated"
            self._sandbox, done = revive(self._client, self.options, self._spec, self._sandbox)
            log.warning("task %r: %s", self.task_id, done)
            return done

    def _refresh_activity(self) -> None:
        """Tell Daytona the sandbox is in use, at most every ``activity_interval`` seconds, so
        auto-stop does not fire while a command runs. Failures are logged, never raised."""
        now = time.monotonic()
        if now - self._last_refresh < self.options.activity_interval:
            return
        self._last_refresh = now
        from envlayer_daytona.client import retrying

        try:
            retrying(self._sandbox.refresh_activity, "refreshing the sandbox's activity")
        except Exception as exc:
            log.warning("could not refresh the activity of sandbox %s: %s", self.sandbox_name, exc)

    def _not_running(self) -> bool:
        """True when Daytona says the sandbox is not running; False when it cannot be asked."""
        from envlayer_daytona.sandbox import not_running

        try:
            return self._guard(lambda: not_running(self._sandbox), "checking the sandbox's state")
        except BackendUnavailable:
            return False

    # --- exec: the base owns the contract and the session-or-one-shot choice ----------------

    def handle_request(self, request: ExecRequest) -> ExecResult:
        self._refresh_activity()
        return super().handle_request(request)

    def session_lock(self) -> threading.Lock | None:
        return self._session_lock if self.options.exec_mode == "session" else None

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        from envlayer_daytona.stream import ShellGoneBeforeSend

        try:
            return self.run_shell(self._shell, request)
        except ShellGoneBeforeSend:
            self._shell.abandon()  # ended from outside between calls; the command did not run
            return self.run_shell(self._shell, request)

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        """A shell of its own (one-shot mode, or the session busy in another thread), in
        the session's directory, closed afterwards."""
        shell = self._new_shell(self._shell.cwd or self._workdir)
        try:
            return self.run_shell(shell, request)
        finally:
            shell.close()

    def _drop_session(self) -> None:
        """Forget the session shell (after the sandbox stopped: it is gone); the next call
        starts a new one and says so in ``recovered``."""
        shell = getattr(self, "_shell", None)
        if shell is not None:
            shell.abandon()

    # --- files --------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        """Absolute sandbox path for ``path``, confined to ``file_root`` (also against symlinks)."""
        return confined_path(self, self.file_helper, path, self._workdir)

    def file_directory(self) -> str:
        return self._workdir

    def file_helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        """``argv`` by one ``process/execute`` (its output comes as one stream: stdout; no
        stdin, so ``data`` must be None)."""
        line = " ".join(shlex.quote(a) for a in argv)
        answer = self._files_call(lambda: self._sandbox.process.exec(line, timeout=int(self.options.request_timeout)))
        return answer.exit_code, (answer.result or "").encode(), b""

    def _files_call(self, fn: Callable[[], T], doing: str = "moving files") -> T:
        """Run a file operation; a sandbox found stopped is started and the operation retried
        once (file operations are idempotent)."""
        from envlayer_daytona.client import translate

        def gone(exc: Exception) -> bool:
            return isinstance(exc, sdk.errors.DaytonaError) and self._not_running()

        try:
            return self.with_recovery(fn, gone=gone, again=lambda exc: translate(exc, doing, self.options))[0]
        except sdk.errors.DaytonaError as exc:
            raise translate(exc, doing, self.options) from exc

    def fetch_file(self, full: str, limit: int) -> bytes:
        """A file through the toolbox API (:mod:`envlayer_daytona.files`)."""
        from envlayer_daytona import files

        return self._files_call(lambda: files.read(self._sandbox, full, limit), f"reading {full}")

    def store_file(self, full: str, data: bytes) -> None:
        """A file uploaded through the toolbox API to a staging path, then put in place by
        one ``process/execute`` (:func:`~envlayer.sandbox.files.write_from_staged`): the
        toolbox rewrites a file in place, so a reader could see half of it."""
        from envlayer.sandbox.files import write_from_staged
        from envlayer_daytona import files
        from envlayer_daytona.stream import SPOOL

        staged = f"{SPOOL}/{uuid.uuid4().hex}.part"
        self._files_call(lambda: files.write(self._sandbox, staged, data), f"writing {full}")
        write_from_staged(self.file_helper, full, staged)

    def upload_dir(self, local: str | os.PathLike[str], remote: str) -> TransferSummary:
        """Copy the regular files and directories under host directory ``local`` into
        sandbox directory ``remote``; see :class:`~envlayer.transfer.SupportsDirectoryTransfer`."""
        from envlayer_daytona import files

        self._ensure_open()
        full = self._path(remote)
        limit = self.options.max_transfer_bytes
        return self._files_call(lambda: files.upload_dir(self._sandbox, local, full, limit), f"uploading to {full}")

    def download_dir(self, remote: str, local: str | os.PathLike[str]) -> TransferSummary:
        """Copy the regular files and directories under sandbox directory ``remote`` into
        host directory ``local``; see :class:`~envlayer.transfer.SupportsDirectoryTransfer`.
        Members escaping ``local`` raise :class:`SandboxPathError` before anything is written."""
        from envlayer_daytona import files

        self._ensure_open()
        full = self._path(remote)
        limit = self.options.max_transfer_bytes
        return self._files_call(lambda: files.download_dir(self._sandbox, full, local, limit), f"downloading {full}")

    # --- lifecycle ----------------------------------------------------------------------

    def close_session(self) -> None:
        self._shell.close()

    def holds_sandbox(self) -> bool:
        return self._sandbox is not None

    def removal(self) -> Callable[[], None]:
        """Delete the sandbox and wait until Daytona says it is gone
        (:func:`envlayer_daytona.sandbox.remove`)."""
        from envlayer_daytona.sandbox import remove

        sandbox, options = self._sandbox, self.options
        return lambda: remove(sandbox, options)

    def removal_bound(self) -> float:
        """:func:`envlayer_daytona.sandbox.removal_bound`: every request of the removal has a
        timeout, and the process waits that long for it at exit."""
        from envlayer_daytona.sandbox import removal_bound

        return removal_bound(self.options)

    # --- snapshots (envlayer_daytona.snapshots) ---------------------------------------------

    def create_snapshot(self, *, name: str | None = None) -> Snapshot:
        """The sandbox's filesystem now as a Daytona snapshot; then the profile's snapshots
        beyond the retention options (``snapshot_keep``, ``snapshot_max_age``) are removed.
        See :mod:`envlayer_daytona.snapshots`. Background processes are not carried."""
        from envlayer_daytona import snapshots

        self._ensure_open()
        opts = self.options
        return self._guard(
            lambda: snapshots.create(
                self._client, self._sandbox, profile=self.profile, task=self.task_id, name=name, options=opts
            ),
            "taking a snapshot",
        )

    @classmethod
    def list_snapshots(cls, *, profile: str | None, options: BaseOptions) -> list[Snapshot]:
        """envlayer's Daytona snapshots of ``profile`` (None: all), newest first."""
        from envlayer_daytona import snapshots

        return cls._sweep(options, "listing snapshots", lambda c, o: snapshots.list_all(c, profile=profile))

    @classmethod
    def remove_snapshot(cls, snapshot_id: str, *, options: BaseOptions) -> list[Snapshot]:
        """Delete snapshot ``snapshot_id``; sandboxes made from it keep working. Returns what
        was removed ([] when there is no such snapshot)."""
        from envlayer_daytona import snapshots

        return cls._sweep(options, "removing a snapshot", lambda c, o: snapshots.remove(c, snapshot_id))

    @classmethod
    def _class_client(cls, options: BaseOptions | None) -> tuple[Any, DaytonaOptions]:
        from envlayer_daytona.client import get_client

        opts = options if isinstance(options, DaytonaOptions) else DaytonaOptions()
        return get_client(opts), opts

    @classmethod
    def _sweep(cls, options: BaseOptions | None, doing: str, fn: Callable[[Any, DaytonaOptions], T]) -> T:
        from envlayer_daytona.client import translate

        client, opts = cls._class_client(options)
        try:
            return fn(client, opts)
        except sdk.errors.DaytonaError as exc:
            raise translate(exc, doing, opts) from exc

    @classmethod
    def check_available(cls, options: BaseOptions) -> None:
        """Raise :class:`BackendUnavailable` unless a credential is set and the API answers
        an authenticated request (listing one sandbox)."""
        from envlayer_daytona.sweep import list_managed

        cls._sweep(options, "checking the Daytona API", lambda c, o: list_managed(c, profile="envlayer-doctor"))

    @classmethod
    def sweep_orphans(cls, context: Any, *, profile: str, max_age: float, dry_run: bool) -> list[SandboxInfo]:
        """This profile's stopped/archived/errored sandboxes older than ``max_age`` seconds
        (see :mod:`envlayer_daytona.sweep`)."""
        from envlayer_daytona import sweep

        def reap(client: Any, opts: DaytonaOptions) -> list[SandboxInfo]:
            timeout = opts.request_timeout
            return sweep.reap(client, profile=profile, max_age=max_age, dry_run=dry_run, timeout=timeout)

        return cls._sweep(context, "reaping sandboxes", reap)

    @classmethod
    def expire_snapshots(cls, context: Any, *, profile: str, dry_run: bool) -> list[Snapshot]:
        """Its snapshots beyond the retention options (:func:`envlayer_daytona.snapshots.expire`)."""
        from envlayer_daytona import snapshots

        return cls._sweep(
            context,
            "expiring snapshots",
            lambda c, o: snapshots.expire(c, o, profile=profile, dry_run=dry_run),
        )

    @classmethod
    def list_sandboxes(cls, *, profile: str | None, options: BaseOptions) -> list[SandboxInfo]:
        """Every managed sandbox (of ``profile``, or of all profiles when None)."""
        from envlayer_daytona import sweep

        return cls._sweep(
            options,
            "listing sandboxes",
            lambda c, o: [sweep.info_from(s) for s in sweep.list_managed(c, profile=profile)],
        )

    @classmethod
    def remove_sandbox(cls, task_id: str, *, profile: str, options: BaseOptions, force: bool) -> list[SandboxInfo]:
        """Delete the sandboxes of (profile, task): stopped ones, running ones too with
        ``force``. Returns what was removed."""
        from envlayer_daytona import sweep

        return cls._sweep(
            options,
            "removing sandboxes",
            lambda c, o: sweep.remove(c, profile=profile, task=task_id, force=force, options=o),
        )
