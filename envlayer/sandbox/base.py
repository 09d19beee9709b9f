"""``SandboxEnvironment``: the opt-in base of sandbox backends (every built-in one uses it).

In the spirit of httpx's ``BaseTransport``: the base owns what every sandbox backend
shares, once, and a backend implements running one request over its transport.

The base owns:

* ``handle_request``, the contract's one method for ``exec`` (see
  :class:`~envlayer.environment.Environment`): it receives a checked
  :class:`~envlayer.request.ExecRequest` holding only what the class declares
  (``user`` only with ``exec_as_user``, ``cancel`` only with ``cancel``);
* the session-or-one-shot choice: a call runs in the session shell when its lock is
  free, else as a one-shot command (or, with ``wait_for_busy_session``, it waits for the
  shell, and its timeout counts from when it gets it); a call with ``user`` always runs
  one-shot;
* retry-once-after-recovery (:meth:`with_recovery`): when the backend says the sandbox
  was gone and the command provably did not start, the backend recovers the sandbox and
  the call runs once more (with its whole timeout), with ``ExecResult.recovered`` saying
  what was done. A command that may have started is never run again;
* narrowing ``capabilities`` from the options: ``exec_mode = "oneshot"`` drops
  ``persistent_session``, ``persist_across_processes = false`` drops
  ``persist_across_processes``.

A backend implements:

* :meth:`run_oneshot` (required), and for a session :meth:`session_lock` and
  :meth:`run_in_session` (:meth:`run_shell` runs a core
  :class:`~envlayer.execution.shell_session.PersistentShell` and builds the result);
* for recovery: :meth:`is_gone` (the failure proves the sandbox was gone and nothing
  ran), :meth:`sandbox_identity` and :meth:`recover` (returns what it did);
* :meth:`open_sandbox` (connect and find or create the sandbox, instead of ``__init__``);
* its file transport (:meth:`fetch_file`, :meth:`store_file`, :meth:`file_helper`,
  :meth:`file_directory`, and :attr:`session_file_max` when files may travel through
  its session): ``read_file``/``write_file`` are the base's, over them (see
  :mod:`envlayer.sandbox.files`); its directory moves and ``cleanup``.

Plugins that implement :meth:`Environment.handle_request` (or, the older contract,
``exec``) directly are unaffected: the base is opt-in.
"""

from __future__ import annotations

import dataclasses
import posixpath
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from envlayer.capabilities import Capability, declared_capabilities
from envlayer.environment import Environment
from envlayer.errors import BackendUnavailable
from envlayer.execution.shell_session import PersistentShell
from envlayer.options import BaseOptions
from envlayer.request import ExecRequest
from envlayer.result import ExecResult
from envlayer.snapshot import Snapshot

T = TypeVar("T")

MANAGED_SANDBOX_CAPABILITIES = frozenset(
    {
        Capability.FORCE_REMOVE,
        Capability.WAIT_FOR_CLEANUP,
        Capability.REAP_ORPHANS,
        Capability.LIST_SANDBOXES,
        Capability.REMOVE_SANDBOX,
        Capability.STREAMING,
        Capability.CANCEL,
        Capability.PERSISTENT_SESSION,
        Capability.DIRECTORY_TRANSFER,
        Capability.PERSIST_ACROSS_PROCESSES,
    }
)
"""What a sandbox that envlayer creates, finds by (profile, task), sweeps and removes has
(Docker, Kubernetes, Modal and Daytona declare it; Docker adds ``exec_as_user``)."""


def narrowed_capabilities(declared: frozenset[Capability], options: BaseOptions) -> frozenset[Capability]:
    """``declared`` minus what ``options`` turn off: ``persistent_session`` with
    ``exec_mode = "oneshot"``, ``persist_across_processes`` when that option is false."""
    if getattr(options, "exec_mode", "session") == "oneshot":
        declared = declared - {Capability.PERSISTENT_SESSION}
    if not getattr(options, "persist_across_processes", True):
        declared = declared - {Capability.PERSIST_ACROSS_PROCESSES}
    return declared


def check_snapshot_source(env: Environment, snapshot: Snapshot) -> None:
    """Raise :class:`~envlayer.errors.InvalidArgument` unless ``env``'s backend has
    ``snapshot`` and ``snapshot`` was made by that backend."""
    from envlayer.dispatch import snapshot_refused
    from envlayer.errors import InvalidArgument

    if Capability.SNAPSHOT not in (declared_capabilities(env) or ()):
        raise snapshot_refused(env, "start from a snapshot")
    if not isinstance(snapshot, Snapshot) or snapshot.backend != env.name:
        made_by = snapshot.backend if isinstance(snapshot, Snapshot) else type(snapshot).__name__
        raise InvalidArgument(
            "from_snapshot",
            f"a {env.name} environment cannot start from a snapshot of {made_by!r}",
            hint=f"pass a Snapshot made by the {env.name} backend (env.snapshot() or list_snapshots)",
        )


def _restarted(request: ExecRequest) -> ExecRequest:
    """``request`` with its deadline counted from now."""
    if request.timeout is None:
        return request
    return dataclasses.replace(request, deadline=time.monotonic() + request.timeout)


class SandboxEnvironment(Environment):
    """Base of a sandbox backend; see the module docstring for what it owns and what a
    subclass implements. Subclasses declare ``capabilities`` (a frozenset; the base is
    never introspected, so an undeclared ``exec_as_user`` stays off)."""

    capabilities: frozenset[Capability] | None = frozenset()
    wait_for_busy_session: ClassVar[bool] = False
    """True: a call that finds the session shell busy waits for it instead of running one-shot."""
    session_file_max: ClassVar[int] = 0
    """Files up to this many bytes travel through the session shell (0: never; see
    :mod:`envlayer.sandbox.files`)."""
    recovery_hint: ClassVar[str] = "check the sandbox's platform; something keeps removing or stopping it"
    """What to do when the sandbox is gone again right after a recovery (see :meth:`gone_again`)."""
    _session: Any = None
    """This process's session shell (None: none, every call is one-shot); the backend sets
    it and the base's :meth:`session_lock` guards it."""
    _state_lock: threading.RLock
    """Guards the handle's own state (the sandbox it holds, closing it, recovering it);
    made by the base before :meth:`open_sandbox`."""

    def __init__(
        self,
        options: BaseOptions | None = None,
        *,
        task_id: str = "default",
        profile: str = "default",
        from_snapshot: Snapshot | None = None,
    ) -> None:
        """``from_snapshot``: start the sandbox from that snapshot (capability
        ``snapshot`` only; :class:`~envlayer.errors.InvalidArgument` otherwise, or when
        the snapshot belongs to another backend). The backend reads
        :attr:`from_snapshot` when it creates the sandbox."""
        super().__init__(options, task_id=task_id, profile=profile)
        self.from_snapshot = from_snapshot
        if from_snapshot is not None:
            check_snapshot_source(self, from_snapshot)
        wanted = type(self).Options
        if not isinstance(self.options, wanted):
            raise TypeError(f"{type(self).__name__} needs {wanted.__name__}, got {type(self.options).__name__}")
        declared = type(self).capabilities
        if declared is not None:
            self.capabilities = narrowed_capabilities(frozenset(declared), self.options)
        self._state_lock = threading.RLock()
        self._session_lock = threading.Lock()
        self.open_sandbox()

    def open_sandbox(self) -> None:
        """Connect to the platform and find or create the sandbox: called once, at the end of
        ``__init__``, when :attr:`options`, :attr:`task_id`, :attr:`profile`,
        :attr:`from_snapshot` and :attr:`capabilities` are set. A backend overrides this
        instead of ``__init__`` (so the constructor's signature is written once, here);
        an exception it raises fails the construction. The default does nothing."""

    # --- the exec contract ----------------------------------------------------------

    def handle_request(self, request: ExecRequest) -> ExecResult:
        """Run a checked request (the contract's; ``exec`` and :func:`envlayer.run` build
        it): in the session or one-shot, recovering a gone sandbox once. A backend may
        extend it (to note a reconnect, say), calling this.

        Raises :class:`BackendUnavailable` when the sandbox cannot be reached, or was lost
        while the command ran (it may or may not have finished and is not re-run; the
        next call recovers the sandbox)."""
        attempts = 0

        def attempt() -> ExecResult:
            nonlocal attempts
            attempts += 1  # a retry after a recovery gets the whole timeout again
            return self._run_once(request if attempts == 1 else _restarted(request))

        result, recovered = self.with_recovery(attempt)
        if recovered:
            result = dataclasses.replace(result, recovered=recovered)
        notice = self._announcement
        if not notice:
            return result
        self._announcement = ""
        return result.with_notice(f"{notice}; {result.notice}" if result.notice else notice)

    _announcement = ""
    """What :meth:`announce` left for the next result ("": nothing)."""

    def announce(self, notice: str) -> None:
        """Put ``notice`` on the next :class:`~envlayer.result.ExecResult` (something the
        caller must hear of, such as a sandbox replaced because its options differed)."""
        self._announcement = notice

    def _run_once(self, request: ExecRequest) -> ExecResult:
        lock = self.session_lock() if request.user is None else None
        if lock is not None and lock.acquire(blocking=self.wait_for_busy_session):
            try:
                # a call that waited for the shell: its timeout counts from when it got it
                return self.run_in_session(_restarted(request) if self.wait_for_busy_session else request)
            finally:
                lock.release()
        return self.run_oneshot(request)

    # --- snapshots (capability ``snapshot``; see envlayer.snapshot) ------------------------

    def snapshot(self, name: str | None = None) -> Snapshot:
        """The sandbox's filesystem (and workspace) now, as a managed snapshot named
        ``name`` (default: the backend picks one); running processes are not carried.
        The backend implements it in ``create_snapshot(name=...)``. Raises
        :class:`~envlayer.errors.InvalidArgument` for a bad name or a backend without
        ``snapshot`` (naming those that have it)."""
        from envlayer.dispatch import take_snapshot

        return take_snapshot(self, name)

    def fork(self, task_ids: Sequence[str], *, snapshot: Snapshot | None = None) -> list[Environment]:
        """One new environment per task id, started from ``snapshot`` or from a snapshot
        taken now (then removed once the forks exist), created concurrently; see
        :func:`envlayer.dispatch.open_forks`. The caller cleans the forks up."""
        from envlayer.dispatch import open_forks

        return open_forks(self, task_ids, snapshot=snapshot)

    # --- transport: what a backend implements -------------------------------------------

    def session_lock(self) -> Any:
        """The lock of the session shell (``acquire(blocking=...)``/``release()``), or
        None when there is no session (one-shot mode): then every call is one-shot. The
        default: the base's one lock while :attr:`_session` is set. The lock stays the same
        when a recovery replaces the session, so a call on the new shell waits for one
        still running on the old."""
        return self._session_lock if self._session is not None else None

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        """Run ``request`` in the session shell; the caller holds :meth:`session_lock`."""
        raise NotImplementedError(f"{type(self).__name__} has a session lock but no run_in_session")

    @abstractmethod
    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        """Run ``request`` as a command of its own (as ``request.user`` when set: only
        for a backend that declares ``exec_as_user``), killing its process tree on a
        timeout, an interrupt or ``request.cancel``."""

    @staticmethod
    def call_directory(request: ExecRequest, base: str) -> str:
        """Where a one-shot call runs: ``base`` (the session's current directory, or the
        working directory), or the call's ``cwd`` taken relative to it."""
        return posixpath.join(base, request.cwd) if request.cwd else base

    def run_shell(self, shell: PersistentShell, request: ExecRequest, *, prelude: str = "") -> ExecResult:
        """Run ``request`` in a core persistent ``shell`` and return its result."""
        return shell.run_request(request, self.options, prelude=prelude)

    # --- files: the base's calls over the backend's transport (envlayer.sandbox.files) ----

    def read_file(self, path: str) -> bytes:
        """Read a file; the contract is :class:`~envlayer.environment.Environment`'s,
        the mechanics :mod:`envlayer.sandbox.files`'."""
        from envlayer.sandbox import files

        return files.read_file(self, path)

    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace a file atomically, creating parent directories; a path that is
        an existing directory raises :class:`~envlayer.errors.SandboxIsADirectory` (name
        the file inside it). Contract: :class:`~envlayer.environment.Environment`'s."""
        from envlayer.sandbox import files

        files.write_file(self, path, data)

    def file_directory(self) -> str:
        """Where a relative file path points (default: ``options.workdir``)."""
        return str(getattr(self.options, "workdir", "/"))

    def file_helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        """Run a short helper ``argv`` in the sandbox as its user, with ``data`` on stdin:
        ``(exit code, stdout, stderr)`` (the ``file_root`` check against symlinks)."""
        raise NotImplementedError(f"{type(self).__name__} has no file helper")

    def fetch_file(self, full: str, limit: int) -> bytes:
        """The bytes of the file at absolute, confined ``full`` over the backend's
        transport, with :class:`~envlayer.environment.Environment`'s errors (over
        ``limit`` bytes: :class:`~envlayer.errors.FileTooLarge` before anything moves)."""
        raise NotImplementedError(f"{type(self).__name__} has no file transport")

    def store_file(self, full: str, data: bytes) -> None:
        """Create or replace the file at absolute, confined ``full`` with ``data`` over the
        backend's transport, creating parent directories; the contract's errors."""
        raise NotImplementedError(f"{type(self).__name__} has no file transport")

    # --- recovery: how a backend detects "gone" and recovers ------------------------------

    def is_gone(self, exc: Exception) -> bool:
        """True when ``exc`` proves the sandbox was gone (or not running) and the
        operation did not start, so recovering and running it again is safe. The
        default: never (no recovery)."""
        return False

    def sandbox_identity(self) -> str:
        """The id of the sandbox in use: :meth:`recover` gets the one an operation saw,
        to tell whether another thread has recovered already."""
        return ""

    def recover(self, seen: str) -> str:
        """Bring the sandbox back after :meth:`is_gone` (start it, or create a new one),
        unless another thread already replaced sandbox ``seen``. Returns what was done,
        for ``ExecResult.recovered`` (e.g. ``"sandbox recreated"``)."""
        raise NotImplementedError(f"{type(self).__name__} reports a gone sandbox but cannot recover it")

    def gone_again(self, exc: Exception) -> BackendUnavailable:
        """The error when the sandbox is gone again right after :meth:`recover`; its hint
        is :attr:`recovery_hint`."""
        return BackendUnavailable(
            f"the {self.name} sandbox for task {self.task_id!r} is gone again right after being recovered: {exc}",
            hint=self.recovery_hint,
        )

    def with_recovery(
        self,
        operation: Callable[[], T],
        *,
        gone: Callable[[Exception], bool] | None = None,
        again: Callable[[Exception], Exception] | None = None,
    ) -> tuple[T, str]:
        """Run ``operation``; when it fails with an error that ``gone`` (default
        :meth:`is_gone`) accepts, :meth:`recover` and run it once more. Returns
        ``(value, what recover did or "")``. A second such failure raises ``again(exc)``
        (default :meth:`gone_again`); any other error propagates as it is."""
        seen = self.sandbox_identity()
        try:
            return operation(), ""
        except Exception as exc:
            is_gone = gone or self.is_gone
            if not is_gone(exc):
                raise
        done = self.recover(seen)
        try:
            return operation(), done
        except Exception as exc:
            if not is_gone(exc):
                raise
            raise (again or self.gone_again)(exc) from exc
