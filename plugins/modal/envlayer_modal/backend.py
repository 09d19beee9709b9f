"""``ModalEnvironment``: the envlayer backend that runs commands in a Modal sandbox.

Lifecycle (details in docs/backends/modal.md):

* The constructor connects (``modal.Client.from_env``, the App by ``app_name``) and
  attaches to, replaces or creates the sandbox of (profile, task)
  (:mod:`envlayer_modal.sandbox`); it raises :class:`BackendUnavailable` with a hint for
  missing credentials, an unreachable API, an unknown image or a quota.
* ``cleanup()`` in persist mode (default) ends this process's session shell and leaves
  the sandbox running, bounded by
  ``idle_timeout`` and ``sandbox_timeout``.
  ``cleanup(force_remove=True)``, or any cleanup with ``persist_across_processes = false``,
  terminates it on a background thread that :meth:`wait_for_cleanup` joins.
* Commands run in a persistent shell (``exec_mode = "session"``, the core's protocol over
  one long-lived exec, :mod:`envlayer_modal.session`) or one ``Sandbox.exec`` each
  (``"oneshot"``). A timeout or an interrupt kills the command's process tree inside the
  sandbox, which stays usable.
* A sandbox found ended when a command starts (the exec, or the write of the command to
  the session shell, failed, and the control plane reports the sandbox ended, whatever the
  error code: :func:`envlayer_modal.sandbox.ended_error`) is replaced once in persist mode
  and the command runs there, with ``ExecResult.recovered`` saying so; a private
  environment raises :class:`BackendUnavailable`. A command is never run twice.

Importing this module does not import the Modal SDK (read through :mod:`envlayer_modal.sdk`),
nor the plugin's modules that only some calls need: the methods that use them import
them, since ``envlayer backends`` and every CLI call import this class.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from envlayer.capabilities import Capability
from envlayer.environment import SandboxInfo
from envlayer.errors import BackendUnavailable, InvalidArgument
from envlayer.execution.cancel import killer_for
from envlayer.execution.collector import OutputCollector
from envlayer.execution.tree_kill import EXEC_ID_VAR
from envlayer.options import BaseOptions
from envlayer.request import ExecRequest, check_path
from envlayer.result import TIMEOUT_EXIT_CODE, ExecResult
from envlayer.sandbox.base import MANAGED_SANDBOX_CAPABILITIES
from envlayer.sandbox.client_identity import ClientIdentity
from envlayer.sandbox.command_env import with_command_defaults
from envlayer.sandbox.idle_check import parse_idle_check
from envlayer.sandbox.managed import ManagedSandboxEnvironment
from envlayer.sandbox.paths import confined_path
from envlayer.snapshot import Snapshot
from envlayer.transfer import TransferSummary
from envlayer_modal import reaper, sandbox, sdk, teardown
from envlayer_modal.client import client_identity, connect, control, throttled, translate
from envlayer_modal.naming import sandbox_name
from envlayer_modal.options import ModalOptions
from envlayer_modal.reaper import LEASE_PATH
from envlayer_modal.sandbox import NotStarted, _lookup, detach_quietly, ended_error, ensure, terminate_quietly

log = logging.getLogger("envlayer.modal")
T = TypeVar("T")

ALL_CAPABILITIES = MANAGED_SANDBOX_CAPABILITIES | {Capability.UNSET_ENV, Capability.SNAPSHOT}
LEASE_INTERVAL = 30.0
_HELPER_TIMEOUT = 300.0


class ModalEnvironment(ManagedSandboxEnvironment):
    """Commands and files in a Modal sandbox; see the module docstring."""

    name = "modal"
    Options = ModalOptions
    capabilities = ALL_CAPABILITIES
    environment_variables = ("MODAL_*", "HOME")  # the SDK's variables and ~/.modal.toml
    options: ModalOptions
    recovery_hint = "check the Modal dashboard; something keeps terminating it"

    @classmethod
    def client_identity(cls, options: Any, environ: Mapping[str, str], cwd: str) -> ClientIdentity:
        """Whom a caller with ``options``, ``environ`` and ``cwd`` reaches, and as whom
        (see :mod:`envlayer.sandbox.client_identity`)."""
        return client_identity(environ)

    def open_sandbox(self) -> None:
        from envlayer_modal.image import prepare

        self._conn = connect(self.options)
        self.options = self._conn.options = prepare(self._conn)
        if self.from_snapshot is not None:
            self._prepare_fork(self.from_snapshot)
        self._last_lease = 0.0
        self._attached: Any = None
        self._notice = ""
        self._detached = False
        self._session: Any = None
        self._attach()

    # --- sandbox --------------------------------------------------------------------------

    def _attach(self) -> None:
        attached = ensure(
            self._conn, profile=self.profile, task=self.task_id, persist=self.options.persist_across_processes
        )
        self._use(attached)
        log.debug(
            "%s sandbox %s for task %r", "created" if attached.created else "attached to", attached.id, self.task_id
        )

    def _prepare_fork(self, snapshot: Snapshot) -> None:
        """New sandboxes of this environment start from ``snapshot``'s Image; a task that
        already has a running sandbox is refused (its files would not come from the snapshot)."""
        from envlayer_modal import snapshots

        self._conn.snapshot_image = snapshots.image_of(self._conn, snapshot)
        if self.options.persist_across_processes and _lookup(self._conn, sandbox_name(self.profile, self.task_id)):
            raise InvalidArgument(
                "task_id",
                f"task {self.task_id!r} already has a running sandbox; a fork needs a new task",
                hint=f"pick a new task id, or remove it first (`envlayer rm --force {self.task_id}`)",
            )

    def _use(self, attached: Any) -> None:
        if attached.replaced:
            self.announce(attached.replaced)
        with self._state_lock:
            self._attached = attached
            self._drop_session()
            self._session = self._new_session()

    @property
    def sandbox_id(self) -> str:
        """The Modal id (``sb-...``) of the sandbox in use."""
        return str(self._attached.id)

    @property
    def sandbox_name(self) -> str:
        """The name of the sandbox in use (unique in the App)."""
        return str(self._attached.name)

    # --- recovery (the base retries once, see envlayer.sandbox.base) ---------------------

    def is_gone(self, exc: Exception) -> bool:
        """The control plane reports the sandbox ended and the command was not started."""
        return isinstance(exc, NotStarted)

    def sandbox_identity(self) -> str:
        return self.sandbox_id

    def recover(self, seen: str) -> str:
        """The sandbox ``seen`` has ended: replace it (persist mode) or raise (a private
        environment), see :func:`envlayer_modal.sandbox.recover`. Returns the notice for
        ``ExecResult.recovered``; when another thread already replaced it, that thread's notice."""
        with self._state_lock:
            if self._attached is not None and self._attached.id != seen:
                return self._notice
            code = sandbox.sandbox_ended(self._attached.sandbox)
            attached, self._notice = sandbox.recover(
                self._conn,
                self._attached,
                -1 if code is None else code,
                profile=self.profile,
                task=self.task_id,
                persist=self.options.persist_across_processes,
            )
            self._use(attached)
            return self._notice

    def _start_exec(self, argv: list[str], env: Mapping[str, str]) -> Any:
        """``Sandbox.exec`` with ``text=False``, retried while throttled (refused before it
        ran). A failure after which the control plane reports the sandbox ended becomes
        :class:`NotStarted`; every other failure :class:`BackendUnavailable`."""
        from envlayer_modal.ended_watch import unless_ended

        attached = self._attached

        def start() -> Any:
            return control(
                lambda: attached.sandbox.exec(*argv, env=dict(env), text=False), "starting a command", throttled
            )

        try:
            return unless_ended(start, attached)
        except NotStarted:
            raise
        except Exception as exc:
            ended = ended_error(exc, self._conn, attached)
            if ended is not None:
                raise ended from exc
            raise translate(exc, "starting a command") from exc

    def open_terminal(self, rows: int, cols: int) -> Any:
        """An interactive shell on a pty in this task's sandbox (``envlayer shell``). Its
        size is the calling terminal's (the SDK reads it; ``rows``/``cols`` are that same
        window) and later resizes are not passed on: see :mod:`envlayer_modal.terminal`."""
        from envlayer_modal.terminal import ModalTerminal

        self._ensure_open()
        sandbox, env = self._attached.sandbox, self._command_env(None, None)
        argv, workdir = [self.options.shell, "-i"], self.options.workdir
        try:
            proc = control(
                lambda: sandbox.exec(*argv, env=env, workdir=workdir, pty=True, text=False),
                "starting an interactive shell",
                throttled,
            )
        except Exception as exc:
            raise translate(exc, "starting an interactive shell") from exc
        return ModalTerminal(proc)

    def _command_env(self, extra: Mapping[str, str] | None, exec_id: str | None) -> dict[str, str]:
        env = with_command_defaults(self.options.env)
        env.update(extra or {})
        if exec_id is not None:
            env[EXEC_ID_VAR] = exec_id
        return env

    def _touch_lease(self) -> bool:
        now = time.monotonic()
        if now - self._last_lease >= LEASE_INTERVAL:
            self._last_lease = now
            return True
        return False

    # --- exec: the base owns the contract and the session-or-one-shot choice ----------------

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        session = self._session
        if session is None:  # replaced by a recovery in another thread a moment ago
            return self.run_oneshot(request)
        prelude = f": > {LEASE_PATH} 2>/dev/null" if self._touch_lease() else ""
        return self.run_shell(session, request, prelude=prelude)

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        from envlayer_modal import oneshot
        from envlayer_modal.process import Process

        collector = OutputCollector.for_request(request, self.options)
        argv = self._oneshot_argv(request)
        proc = Process(self._start_exec(argv, self._command_env(request.env, request.exec_id)))
        oneshot.feed_stdin(proc, request.stdin)
        kill = functools.partial(self._kill, request.exec_id)
        with killer_for(request.cancel, kill):
            outcome = oneshot.run(proc, collector, request.deadline, kill=kill)
        if outcome.timed_out:
            return collector.result(request, TIMEOUT_EXIT_CODE, timed_out=True)
        if outcome.code is None:
            self._check_still_running("the command's exec ended without an exit status")
            return collector.result(request, 255)
        return collector.result(request, outcome.code)

    def _oneshot_argv(self, request: ExecRequest) -> list[str]:
        """The exec argv of a one-shot command; one over the SDK's 64 KiB argument limit is
        staged in a file first (see :mod:`envlayer_modal.oneshot`)."""
        from envlayer_modal import files, oneshot

        shell, lease = self.options.shell, self._touch_lease()
        cwd = self.call_directory(request, self.options.workdir)
        command = request.process_command(shell)
        argv = oneshot.oneshot_argv(shell, command, cwd=cwd, touch_lease=lease)
        if not oneshot.too_long(argv):
            return argv
        path = f"/tmp/.envlayer-cmd-{request.exec_id}"
        script = oneshot.script_of(command)
        self._files_call(lambda sb: files.write(sb, path, script), "staging a long command")
        return oneshot.script_argv(shell, path, cwd=cwd, touch_lease=lease)

    def _check_still_running(self, what: str) -> None:
        """After an exec vanished: if the sandbox is gone, the command may or may not have
        run, so raise instead of guessing (never re-run)."""
        try:
            code = self._attached.sandbox.poll()
        except Exception:
            code = None
        if code is not None:
            raise BackendUnavailable(
                f"{what} because the sandbox {self.sandbox_id} ended (code {code}); "
                "the command may have partly run and was NOT re-run",
                hint="check its effects and retry; the next call replaces the sandbox",
            )

    def _kill(self, exec_id: str) -> None:
        from envlayer_modal.killer import kill_command

        attached = self._attached
        if attached is not None:
            kill_command(attached.sandbox, exec_id, shell=self.options.shell)

    def _helper(
        self, argv: list[str], data: bytes | None, limit: int | None = None, *, recover: bool = True
    ) -> tuple[int, bytes, bytes]:
        """Run an internal command one-shot (no session state): (code, stdout, stderr).
        stdout is kept up to ``limit`` bytes (all when None). A gone sandbox is replaced
        once with ``recover``; without, the result is exit 255."""
        from envlayer_modal import oneshot
        from envlayer_modal.process import Process

        def start() -> Any:
            return Process(self._start_exec(argv, self._command_env(None, None)))

        try:
            proc = self.with_recovery(start, again=self._keeps_disappearing)[0] if recover else start()
        except NotStarted as exc:
            return 255, b"", str(exc).encode()
        oneshot.feed_stdin(proc, data)
        collector = OutputCollector(limit, "head")
        outcome = oneshot.collect(proc, collector, time.monotonic() + _HELPER_TIMEOUT)
        code = 255 if outcome.code is None or outcome.timed_out else outcome.code
        return code, collector.buffers["stdout"].getvalue(), collector.buffers["stderr"].getvalue()

    @staticmethod
    def _keeps_disappearing(exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(f"the sandbox keeps disappearing: {exc}", hint="check the Modal dashboard")

    def _new_session(self) -> Any:
        """A (not yet started) persistent shell in the current sandbox, or None in one-shot mode."""
        from envlayer_modal.ended_watch import unless_ended
        from envlayer_modal.session import shell_session

        if self.options.exec_mode != "session":
            return None
        attached = self._attached
        return shell_session(
            self._start_exec,
            lambda argv, data: self._helper(argv, data, recover=False),
            shell=self.options.shell,
            env=self._command_env(None, None),
            cwd=self.options.workdir,
            idle_exit=self.options.session_idle_exit,
            ended=lambda exc: exc if isinstance(exc, NotStarted) else ended_error(exc, self._conn, attached),
            guard=lambda send: unless_ended(send, attached),
        )

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    # --- files ---------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        """Absolute sandbox path for ``path``, confined to ``file_root`` (also against symlinks)."""
        return confined_path(self, self._helper, path, self.options.workdir)

    def _files_call(self, fn: Callable[[Any], T], doing: str) -> T:
        """``fn(sandbox)``; a sandbox found ended (asked of the control plane) is replaced
        once (persist mode) and ``fn`` runs again: a file call is idempotent."""
        from envlayer_modal.ended_watch import unless_ended

        def attempt() -> T:
            attached = self._attached
            try:
                return unless_ended(lambda: fn(attached.sandbox), attached)
            except sdk.exception.Error as exc:
                ended = ended_error(exc, self._conn, attached)
                if ended is None:
                    raise translate(exc, doing) from exc
                raise ended from exc

        return self.with_recovery(attempt, again=lambda exc: translate(exc.__cause__ or exc, doing))[0]

    def file_helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        return self._helper(argv, data)

    def fetch_file(self, full: str, limit: int) -> bytes:
        """A file through ``sb.filesystem`` (:mod:`envlayer_modal.files`)."""
        from envlayer_modal import files

        return self._files_call(lambda sb: files.read(sb, full, limit), f"reading {full}")

    def store_file(self, full: str, data: bytes) -> None:
        """A file by one exec with the data on stdin, replaced atomically
        (:func:`~envlayer.sandbox.files.write_by_helper`: ``sb.filesystem.write_bytes``
        rewrites a file in place, so a reader could see half of it)."""
        from envlayer.sandbox.files import write_by_helper

        write_by_helper(self.file_helper, full, data)

    def upload_dir(self, local: str | os.PathLike[str], remote: str) -> TransferSummary:
        """Copy the contents of host directory ``local`` into sandbox directory ``remote``
        (tar over an exec); see :class:`~envlayer.transfer.SupportsDirectoryTransfer`."""
        from envlayer_modal import files

        self._ensure_open()
        source = check_path(os.fspath(local), "local")
        return files.upload_dir(self._helper, source, self._path(remote), self.options.max_transfer_bytes)

    def download_dir(self, remote: str, local: str | os.PathLike[str]) -> TransferSummary:
        """Copy the contents of sandbox directory ``remote`` into host directory ``local``.
        Members escaping ``local`` raise :class:`SandboxPathError`."""
        from envlayer_modal import files

        self._ensure_open()
        dest = check_path(os.fspath(local), "local")
        limit = self.options.max_transfer_bytes

        def capped(argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
            return self._helper(argv, data, limit + 1)

        return files.download_dir(capped, self._path(remote), dest, limit)

    # --- lifecycle -------------------------------------------------------------------------------

    def close_session(self) -> None:
        self._drop_session()

    def holds_sandbox(self) -> bool:
        return self._attached is not None

    def removal(self) -> Callable[[], None]:
        """Terminate the sandbox (see :mod:`envlayer_modal.teardown`); a handle released by an
        earlier plain ``cleanup()`` is looked up again by id."""
        conn, attached, detached = self._conn, self._attached, self._detached
        self._detached = True

        def handle() -> Any:
            if detached:
                return sdk.modal.Sandbox.from_id(attached.id, client=conn.client)
            return attached.sandbox

        return lambda: teardown.terminate(handle, attached.id)

    def release_sandbox(self) -> None:
        """Let go of the sandbox (``Sandbox.detach``): it runs on, this process keeps no
        connection to it."""
        if not self._detached:
            detach_quietly(self._attached.sandbox)
            self._detached = True

    # --- snapshots (envlayer_modal.snapshots) ------------------------------------------------

    def create_snapshot(self, *, name: str | None = None) -> Snapshot:
        """The sandbox's filesystem now, as a Modal Image with a record; see
        :mod:`envlayer_modal.snapshots`. Background processes are not carried."""
        from envlayer_modal import snapshots

        return snapshots.create(self._conn, self._attached.sandbox, profile=self.profile, task=self.task_id, name=name)

    @classmethod
    def list_snapshots(cls, *, profile: str | None, options: ModalOptions) -> list[Snapshot]:
        """The recorded snapshots of ``profile`` (None: all), newest first."""
        from envlayer_modal import snapshots

        return snapshots.list_all(profile=profile)

    @classmethod
    def remove_snapshot(cls, snapshot_id: str, *, options: ModalOptions) -> list[Snapshot]:
        """Delete snapshot ``snapshot_id`` (its Image and record); sandboxes started from it
        keep running. Returns what was removed ([] when there is no such snapshot)."""
        from envlayer_modal import snapshots

        if not snapshot_id.startswith("im-"):
            return []
        return snapshots.remove(cls._class_conn(options), snapshot_id)

    @classmethod
    def _class_conn(cls, options: BaseOptions | None) -> Any:
        return connect(options if isinstance(options, ModalOptions) else ModalOptions())

    @classmethod
    def check_available(cls, options: BaseOptions) -> None:
        """Raise :class:`BackendUnavailable` unless credentials are configured and the API
        answers (it looks up, or creates, the App; it creates no sandbox)."""
        cls._class_conn(options)

    @classmethod
    def reaper_context(cls, options: BaseOptions) -> Any:
        return cls._class_conn(options)

    @classmethod
    def sweep_orphans(cls, context: Any, *, profile: str, max_age: float, dry_run: bool) -> list[SandboxInfo]:
        """This profile's orphaned sandboxes (see :mod:`envlayer_modal.reaper`)."""
        return reaper.reap(context, profile=profile, max_age=max_age, dry_run=dry_run)

    @classmethod
    def expire_snapshots(cls, context: Any, *, profile: str, dry_run: bool) -> list[Snapshot]:
        """Its snapshots beyond the retention options (:func:`envlayer_modal.snapshots.expire`)."""
        from envlayer_modal import snapshots

        return snapshots.expire(context, profile=profile, dry_run=dry_run)

    @classmethod
    def list_sandboxes(cls, *, profile: str | None, options: ModalOptions) -> list[SandboxInfo]:
        """Every running envlayer sandbox in the App (of ``profile``, or of all when None)."""
        return [
            reaper.info_from(sb, tags) for sb, tags in reaper.list_managed(cls._class_conn(options), profile=profile)
        ]

    @classmethod
    def remove_sandbox(cls, task_id: str, *, profile: str, options: ModalOptions, force: bool) -> list[SandboxInfo]:
        """Terminate the sandboxes of (profile, task). Every listed sandbox is running, so
        without ``force`` only those in which no command is running are terminated."""
        conn = cls._class_conn(options)
        removed = []
        for sb, tags in reaper.list_managed(conn, profile=profile, task=task_id):
            if not force and not parse_idle_check(reaper.idle_output(sb, conn.options.shell), 0.0, 0.0):
                continue
            if not terminate_quietly(sb):
                log.warning("could not terminate %s", sb.object_id)
                continue
            removed.append(reaper.info_from(sb, tags, "terminated"))
        return removed
