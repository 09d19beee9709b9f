"""Per-task environments for agents: one cached environment per effective key.

An agent framework asks :meth:`EnvironmentManager.get` for the environment of a task on
every tool call; the manager creates it once, hands back the same handle while it lives,
and releases it when it has been idle too long, when the backend became unusable, or
when the process exits.

Contract:

* **Key.** :class:`EnvKey` ``(profile, backend, task, overrides)``. ``task`` is the task
  after following aliases (:meth:`~EnvironmentManager.alias`); the walk stops at the
  first task with registered overrides, which always gets its own environment.
  ``overrides`` is a digest of that task's overrides ("" without). ``get``, ``release``
  and ``register_overrides`` all resolve a task id through the same function.
* **Creation at most once.** Concurrent ``get`` calls for one key create one
  environment: the first caller creates it outside any global lock, the others wait for
  that creation (and receive its exception if it fails; a later call tries again).
  Creation for other keys is never blocked by it.
* **Activity.** Every call through a :class:`ManagedEnvironment` marks the environment
  active when it starts and again when it ends, and counts as in flight meanwhile. The
  idle reaper (a daemon thread, every ``reap_interval`` seconds) releases environments
  idle longer than ``settings.lifetime_seconds`` with no call in flight and no idle
  guard keeping it (the tools keep environments with running background jobs), through
  :func:`envlayer.dispatch.cleanup` without ``force_remove`` (persist-mode sandboxes
  stay).
* **Eviction.** A call that raises :class:`~envlayer.errors.BackendUnavailable` drops
  its environment from the cache (best-effort cleanup, failures logged) and re-raises;
  the next ``get`` builds a new one.
* **Orphan reaper.** On the first creation for a backend, once per process and profile,
  :func:`envlayer.dispatch.reap_orphans` runs on a daemon thread with
  ``max_age = 2 * max(60, lifetime_seconds)`` scoped to the profile, unless
  ``settings.orphan_reaper`` is false. It never delays creation; failures are logged.
* **Exit.** :meth:`~EnvironmentManager.close` (and, for managers still alive at
  interpreter exit, one ``atexit`` hook holding them weakly) stops the reaper, cleans up
  every environment without ``force_remove``, then waits through
  :func:`envlayer.dispatch.wait_for_cleanup` for background teardowns, within one
  bounded total timeout. Nothing destructive runs from ``__del__``: a manager that is
  garbage-collected without ``close()`` releases nothing.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

from envlayer.agents import exit_hook
from envlayer.agents.orphan_sweeps import OrphanSweep, orphan_sweep, start_sweep
from envlayer.agents.task_bindings import EnvKey, TaskBindingConflict, TaskBindings, TaskOverrides
from envlayer.capabilities import EXEC_KEYWORD_OF, Capability, capabilities_of, supports
from envlayer.config import Settings, load_settings
from envlayer.discovery.plugin_calls import plugin_call, recording
from envlayer.dispatch import CleanupOutcome, cleanup, run, wait_for_cleanup
from envlayer.environment import DEFAULT_TASK, Command, Environment
from envlayer.errors import BackendUnavailable, EnvironmentClosed, EnvlayerError
from envlayer.factory import backend_class, open_environment
from envlayer.request import ExecArguments
from envlayer.result import ExecResult

if TYPE_CHECKING:
    from envlayer.snapshot import Snapshot

__all__ = [
    "DEFAULT_EXIT_TIMEOUT",
    "DEFAULT_REAP_INTERVAL",
    "EnvKey",
    "EnvironmentManager",
    "IdleGuard",
    "ManagedEnvironment",
    "ManagerClosed",
    "OrphanSweep",
    "TaskBindingConflict",
]

log = logging.getLogger("envlayer.manager")

DEFAULT_REAP_INTERVAL = 60.0
"""Seconds between two passes of the idle reaper."""

DEFAULT_EXIT_TIMEOUT = 15.0
"""Total seconds :meth:`EnvironmentManager.close` waits for background teardowns."""

_PASSTHROUGH = frozenset({Capability.PERSISTENT_SESSION, Capability.PERSIST_ACROSS_PROCESSES, *EXEC_KEYWORD_OF})
"""Capabilities a managed handle keeps from its environment: every ``exec`` keyword's
(:data:`envlayer.capabilities.EXEC_KEYWORD_OF`) and the session ones; the lifecycle ones
stay with the manager."""


class ManagerClosed(EnvlayerError):
    """The manager was closed; it creates no more environments."""


IdleGuard = Callable[[EnvKey, Environment], bool]
"""``guard(key, env) -> bool``; see :meth:`EnvironmentManager.add_idle_guard`."""


@dataclass(eq=False)
class _Entry:
    key: EnvKey
    env: Environment
    last_activity: float
    in_flight: int = 0
    released: bool = False
    handle: ManagedEnvironment | None = None


@dataclass
class _Pending:
    """A creation in progress for one key; waiters block on ``done``."""

    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


# --- the idle reaper thread -------------------------------------------------------


def _reaper_loop(ref: weakref.ReferenceType[EnvironmentManager], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        manager = ref()
        if manager is None:
            return
        try:
            manager.reap_idle()
        except Exception:
            log.warning("idle reaper pass failed", exc_info=True)
        del manager


# --- the handle ----------------------------------------------------------------------


class ManagedEnvironment(Environment):
    """The handle :meth:`EnvironmentManager.get` returns for one cached environment.

    It forwards ``exec``, ``read_file`` and ``write_file`` to the backend environment
    (:attr:`environment`) and reports their activity to the manager. Once the manager
    has released the environment (idle, evicted, released, closed), every call raises
    :class:`~envlayer.errors.EnvironmentClosed`: call ``get`` again for a fresh one.
    ``cleanup()`` releases it through the manager, without ``force_remove``.
    """

    def __init__(self, manager: EnvironmentManager, entry: _Entry) -> None:
        inner = entry.env
        super().__init__(inner.options, task_id=inner.task_id, profile=inner.profile)
        self.name = inner.name  # type: ignore[misc]
        self.capabilities = capabilities_of(inner) & _PASSTHROUGH
        self.key = entry.key
        self.environment = inner
        self._manager = manager
        self._entry = entry

    @property
    def closed(self) -> bool:
        """True once the manager released this environment."""
        return self._entry.released or self.environment.closed

    def exec(self, command: Command, **arguments: Unpack[ExecArguments]) -> ExecResult:
        """:meth:`Environment.exec`, tracked: :func:`envlayer.dispatch.run` on the backend
        environment, whose rules apply (``on_output`` streamed or given the output at the
        end, ``cancel`` passed on only to a backend with ``cancel``, ``user`` refused
        without ``exec_as_user``)."""
        on_output = arguments.get("on_output")
        callers: list[BaseException] = []
        if on_output is not None:  # the caller's own exceptions are not the plugin's
            arguments["on_output"], callers = recording(on_output)
        with self._manager._activity(self._entry, "exec", passthrough=callers):
            return run(self.environment, command, **arguments)

    def read_file(self, path: str) -> bytes:
        """:meth:`Environment.read_file`, tracked."""
        with self._manager._activity(self._entry, "read_file"):
            return self.environment.read_file(path)

    def write_file(self, path: str, data: bytes | str) -> None:
        """:meth:`Environment.write_file`, tracked."""
        with self._manager._activity(self._entry, "write_file"):
            self.environment.write_file(path, data)

    def cleanup(self) -> None:
        """Release this environment through the manager (no ``force_remove``)."""
        self._manager._release_entry(self._entry, force_remove=False)

    def __repr__(self) -> str:
        return f"<ManagedEnvironment {self.key} {'closed' if self.closed else 'open'}>"


# --- the manager ---------------------------------------------------------------------


class EnvironmentManager:
    """Per-task environments from configuration; see the module docstring for the rules.

    ``settings`` defaults to :func:`envlayer.config.load_settings` (file, environment
    variables). ``backends`` maps extra backend names to classes, looked up before the
    installed entry points (for applications that embed a backend without packaging it).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        reap_interval: float = DEFAULT_REAP_INTERVAL,
        exit_timeout: float = DEFAULT_EXIT_TIMEOUT,
        backends: Mapping[str, type[Environment]] | None = None,
    ) -> None:
        if reap_interval <= 0:
            raise ValueError("reap_interval must be > 0")
        self.settings = settings if settings is not None else load_settings()
        self.reap_interval = reap_interval
        self.exit_timeout = exit_timeout
        self._backends = dict(backends or {})
        self._lock = threading.Lock()
        self._entries: dict[EnvKey, _Entry] = {}
        self._pending: dict[EnvKey, _Pending] = {}
        self._bindings = TaskBindings(self.settings)
        self._tearing_down: list[Environment] = []
        self._guards: list[IdleGuard] = []
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._closed = False
        exit_hook.track(self)

    # --- keys ---------------------------------------------------------------------

    def _resolve_locked(self, task_id: str) -> tuple[EnvKey, TaskOverrides | None]:
        return self._bindings.resolve(task_id)

    def _is_live_locked(self, key: EnvKey) -> bool:
        return key in self._entries or key in self._pending

    def key_for(self, task_id: str = DEFAULT_TASK) -> EnvKey:
        """The key ``get(task_id)`` would use now."""
        with self._lock:
            return self._resolve_locked(task_id)[0]

    def register_overrides(
        self, task_id: str, *, backend: str | None = None, options: Mapping[str, Any] | None = None
    ) -> EnvKey:
        """Give ``task_id`` its own environment, on ``backend`` (default: the configured
        one) with ``options`` applied over the configured options. Returns its key.

        Raises:
            ConfigError, BackendNotFound, BackendLoadError: invalid options or backend
                (checked now, not at the first call).
            TaskBindingConflict: the task already has a live environment under another key.
        """
        ov = TaskOverrides.make(backend, options)
        name = backend or self.settings.backend
        self.settings.options_for(name, self._backend_class(name).Options, overrides=ov.options)
        with self._lock:
            return self._bindings.register_overrides(task_id, ov, self._is_live_locked)

    def alias(self, child_task: str, parent_task: str) -> EnvKey:
        """Make ``child_task`` (a subagent) share ``parent_task``'s environment. Returns
        the shared key.

        Raises:
            TaskBindingConflict: the alias would form a cycle, or the child already has a
                live environment of its own.
        """
        with self._lock:
            return self._bindings.alias(child_task, parent_task, self._is_live_locked)

    def forget(self, task_id: str) -> None:
        """Drop ``task_id``'s alias and overrides registrations (its environment, if
        any, is not touched: release it first)."""
        with self._lock:
            self._bindings.forget(task_id)

    # --- get / release ----------------------------------------------------------------

    def get(self, task_id: str = DEFAULT_TASK) -> ManagedEnvironment:
        """The environment of ``task_id``, created on first use.

        Raises:
            ManagerClosed: after :meth:`close`.
            BackendNotFound, BackendLoadError, ConfigError, BackendUnavailable: creation
                failed (nothing is cached; a later call tries again).
        """
        while True:
            with self._lock:
                if self._closed:
                    raise ManagerClosed("the environment manager is closed", hint="create a new EnvironmentManager")
                key, overrides = self._resolve_locked(task_id)
                entry = self._entries.get(key)
                if entry is not None:
                    entry.last_activity = time.monotonic()
                    assert entry.handle is not None
                    return entry.handle
                pending = self._pending.get(key)
                creator = pending is None
                if pending is None:
                    pending = self._pending[key] = _Pending()
            if creator:
                return self._create(key, overrides, pending)
            pending.done.wait()
            if isinstance(pending.error, Exception):
                raise pending.error
            # created by another thread (loop to return it, or to create it again if it was
            # released meanwhile), or the creator was interrupted (loop to try ourselves)

    def _backend_class(self, name: str) -> type[Environment]:
        return backend_class(name, self._backends)

    def _create(self, key: EnvKey, overrides: TaskOverrides | None, pending: _Pending) -> ManagedEnvironment:
        try:
            cls = self._backend_class(key.backend)
            options = self.settings.options_for(
                key.backend, cls.Options, overrides=overrides.options if overrides is not None else None
            )
            if self.settings.orphan_reaper:
                start_sweep(key.backend, cls, options, key.profile, self.settings.lifetime_seconds)
            env = open_environment(
                key.backend,
                task_id=key.task,
                profile=key.profile,
                options=options,
                settings=self.settings,
                backends={key.backend: cls},  # loaded once, above
            )
        except BaseException as exc:
            with self._lock:
                self._pending.pop(key, None)
            pending.error = exc
            pending.done.set()
            raise
        entry = _Entry(key, env, time.monotonic())
        entry.handle = ManagedEnvironment(self, entry)
        with self._lock:
            self._pending.pop(key, None)
            closed = self._closed
            if not closed:
                self._entries[key] = entry
                self._start_reaper_locked()
        pending.done.set()
        if closed:
            self._safe_cleanup(env, "created while the manager closed")
            raise ManagerClosed(
                "the environment manager was closed during creation", hint="create a new EnvironmentManager"
            )
        return entry.handle

    # --- fork (capability ``snapshot``) -------------------------------------------------

    def fork(
        self, task_id: str, new_task_ids: Sequence[str], *, snapshot: Snapshot | None = None
    ) -> list[ManagedEnvironment]:
        """New environments for ``new_task_ids``, each started from a snapshot of
        ``task_id``'s environment (created first if it has none), or from ``snapshot``;
        see :func:`envlayer.lifecycle.open_forks`. Each is then ``task``'s environment as
        if ``get(task)`` had created it (same idle release, same ``release``); a new task
        inherits the source task's registered overrides, so its key has the same backend
        and options. Returns the handles in the order of ``new_task_ids``.

        Raises:
            InvalidArgument: bad task ids, or a backend without ``snapshot`` (nothing made).
            TaskBindingConflict: a new task already has an environment, or is an alias or
                has overrides of its own (``forget`` it first).
            ManagerClosed: after :meth:`close`.
        """
        from envlayer.dispatch import open_forks
        from envlayer.snapshot import check_fork_tasks

        tasks = check_fork_tasks(new_task_ids, task_id)
        source = self.get(task_id)
        keys = self._reserve_fork_keys(source.key, tasks)
        try:
            with self._activity(source._entry, "fork"):
                envs = open_forks(source.environment, tasks, snapshot=snapshot)
        except BaseException as exc:
            self._finish_pending(keys, exc)
            raise
        handles = []
        for key, env in zip(keys, envs, strict=True):
            entry = _Entry(key, env, time.monotonic())
            entry.handle = ManagedEnvironment(self, entry)
            handles.append(entry.handle)
        with self._lock:
            closed = self._closed
            if not closed:
                self._entries.update((h.key, h._entry) for h in handles)
        self._finish_pending(keys, None)
        if closed:
            for env in envs:
                self._safe_cleanup(env, "forked while the manager closed")
            raise ManagerClosed(
                "the environment manager was closed during fork", hint="create a new EnvironmentManager"
            )
        return handles

    def _reserve_fork_keys(self, source: EnvKey, tasks: list[str]) -> list[EnvKey]:
        """The keys of the forks of ``source`` into ``tasks``, marked pending (a ``get``
        of one waits for the fork); the source's overrides registered for each task."""
        with self._lock:
            if self._closed:
                raise ManagerClosed("the environment manager is closed", hint="create a new EnvironmentManager")
            overrides = self._bindings.resolve(source.task)[1]
            for task in tasks:
                key = self._bindings.resolve(task)[0]
                if key.task != task or key.overrides or self._is_live_locked(key):
                    raise TaskBindingConflict(
                        f"cannot fork into task {task!r}: it already has an environment, an alias or overrides",
                        hint="fork into new task ids, or release(task) and forget(task) first",
                    )
            keys = []
            for task in tasks:
                if overrides is not None:
                    self._bindings.register_overrides(task, overrides, self._is_live_locked)
                keys.append(self._bindings.resolve(task)[0])
                self._pending[keys[-1]] = _Pending()
            return keys

    def _finish_pending(self, keys: list[EnvKey], error: BaseException | None) -> None:
        """End the pending creations of ``keys``, with ``error`` for their waiters."""
        with self._lock:
            pendings = [self._pending.pop(key) for key in keys]
            if error is not None:
                for key in keys:
                    if key.overrides:
                        self._bindings.forget(key.task)
        for pending in pendings:
            pending.error = error
            pending.done.set()

    def release(
        self, task_id: str = DEFAULT_TASK, *, force_remove: bool = False, purge: bool = False
    ) -> CleanupOutcome | None:
        """Release ``task_id``'s environment (resolved exactly like :meth:`get`) through
        :func:`envlayer.dispatch.cleanup`. ``force_remove`` also removes a persist-mode
        sandbox where the backend supports it; ``purge`` (implies ``force_remove``) also
        deletes the task's durable data (Docker workspace). Calls still running on it will fail.
        Returns ``None`` when the task has no live environment.

        Raises: whatever the backend's cleanup raises.
        """
        with self._lock:
            key = self._resolve_locked(task_id)[0]
            entry = self._entries.get(key)
        if entry is None:
            return None
        return self._release_entry(entry, force_remove=force_remove, purge=purge)

    def _detach_locked(self, entry: _Entry) -> bool:
        """Remove ``entry`` from the cache; False if it was already released."""
        if entry.released:
            return False
        entry.released = True
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        return True

    def _release_entry(self, entry: _Entry, *, force_remove: bool, purge: bool = False) -> CleanupOutcome | None:
        with self._lock:
            if not self._detach_locked(entry):
                return None
        outcome = cleanup(entry.env, force_remove=force_remove, purge=purge)
        self._note_teardown(entry.env)
        return outcome

    def _note_teardown(self, env: Environment) -> None:
        if supports(env, Capability.WAIT_FOR_CLEANUP):
            with self._lock:
                self._tearing_down.append(env)

    def _safe_cleanup(self, env: Environment, why: str) -> None:
        try:
            cleanup(env)
        except Exception:
            log.warning("cleanup of %r (%s) failed", env, why, exc_info=True)
        self._note_teardown(env)

    # --- activity, eviction, idle reaping -------------------------------------------

    @contextmanager
    def _activity(self, entry: _Entry, stage: str, passthrough: list[BaseException] | None = None) -> Iterator[None]:
        """Track one call on ``entry`` (in flight, last activity); evict on
        ``BackendUnavailable``; a contract-breaking exception becomes ``PluginError``."""
        with self._lock:
            if entry.released:
                raise EnvironmentClosed(
                    f"the manager released the environment of task {entry.key.task!r}",
                    hint="call manager.get(task_id) again for a fresh environment",
                )
            entry.in_flight += 1
            entry.last_activity = time.monotonic()
        try:
            with plugin_call(entry.env, stage, passthrough=passthrough if passthrough is not None else ()):
                yield
        except BackendUnavailable:
            self._evict(entry)
            raise
        finally:
            with self._lock:
                entry.in_flight -= 1
                entry.last_activity = time.monotonic()

    def _evict(self, entry: _Entry) -> None:
        with self._lock:
            if not self._detach_locked(entry):
                return
        log.info("evicting the %s environment of task %r: backend unavailable", entry.key.backend, entry.key.task)
        self._safe_cleanup(entry.env, "evicted")

    def add_idle_guard(self, guard: IdleGuard) -> None:
        """Register ``guard(key, env) -> bool``: True keeps an environment the idle
        reaper was about to release, as if it had just been used (e.g. a background job
        is still running in it). Called from the reaper, outside the manager's lock, with
        the backend environment (calls on it do not count as activity). A guard that
        raises counts as False; the exception is logged."""
        with self._lock:
            self._guards.append(guard)

    def _guarded(self, entry: _Entry, guards: list[IdleGuard]) -> bool:
        for guard in guards:
            try:
                if guard(entry.key, entry.env):
                    return True
            except Exception:
                log.warning("idle guard %r failed for %s", guard, entry.key, exc_info=True)
        return False

    def reap_idle(self) -> list[EnvKey]:
        """Release every environment idle longer than ``settings.lifetime_seconds`` with
        no call in flight and no idle guard keeping it (no ``force_remove``). Returns
        their keys. The reaper thread calls this every ``reap_interval`` seconds."""
        cutoff = time.monotonic() - self.settings.lifetime_seconds
        with self._lock:
            candidates = [e for e in self._entries.values() if e.in_flight == 0 and e.last_activity < cutoff]
            guards = list(self._guards)
        kept = [e for e in candidates if self._guarded(e, guards)]
        idle = []
        with self._lock:
            for entry in candidates:
                if entry in kept:
                    entry.last_activity = time.monotonic()
                elif entry.in_flight == 0 and entry.last_activity < cutoff and self._detach_locked(entry):
                    idle.append(entry)
            tearing, self._tearing_down = self._tearing_down, []
        for entry in idle:
            log.debug("releasing idle environment %s", entry.key)
            self._safe_cleanup(entry.env, "idle")
        still = [env for env in tearing if not self._teardown_done(env, 0)]
        with self._lock:
            self._tearing_down.extend(still)
        return [e.key for e in idle]

    @staticmethod
    def _teardown_done(env: Environment, timeout: float) -> bool:
        try:
            return wait_for_cleanup(env, timeout)
        except Exception:
            log.warning("wait_for_cleanup on %r failed", env, exc_info=True)
            return False

    def _start_reaper_locked(self) -> None:
        if self._reaper is None and not self._closed:
            self._reaper = threading.Thread(
                target=_reaper_loop,
                args=(weakref.ref(self), self._stop, self.reap_interval),
                name="envlayer-idle-reaper",
                daemon=True,
            )
            self._reaper.start()

    # --- introspection ----------------------------------------------------------------

    def active_keys(self) -> list[EnvKey]:
        """Keys of the environments alive now."""
        with self._lock:
            return list(self._entries)

    def activity(self) -> dict[EnvKey, tuple[float, int]]:
        """For each environment alive now: seconds since its last activity, and the
        number of calls in flight on it."""
        now = time.monotonic()
        with self._lock:
            return {key: (now - e.last_activity, e.in_flight) for key, e in self._entries.items()}

    def orphan_sweep(self, backend: str | None = None) -> OrphanSweep | None:
        """This process's orphan sweep of ``backend`` (default: the configured one) for
        this manager's profile, or ``None`` if none ran."""
        return orphan_sweep(backend or self.settings.backend, self.settings.profile)

    # --- shutdown ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self, *, timeout: float | None = None, force_remove: bool = False) -> bool:
        """Stop the reaper, clean up every environment (no ``force_remove`` unless
        asked), then wait for background teardowns, all within ``timeout`` seconds in
        total (default ``exit_timeout``). Cleanup failures are logged, not raised.
        Idempotent. Returns True when every teardown finished in time.
        """
        deadline = time.monotonic() + (self.exit_timeout if timeout is None else timeout)
        with self._lock:
            self._closed = True
            self._stop.set()
            reaper = self._reaper
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            entries = list(self._entries.values())
            for entry in entries:
                self._detach_locked(entry)
        for entry in entries:
            try:
                cleanup(entry.env, force_remove=force_remove)
            except Exception:
                log.warning("cleanup of %r at close failed", entry.env, exc_info=True)
            self._note_teardown(entry.env)
        with self._lock:
            tearing, self._tearing_down = self._tearing_down, []
        done = all([self._teardown_done(env, max(0.0, deadline - time.monotonic())) for env in tearing])
        exit_hook.untrack(self)
        return done

    def __enter__(self) -> EnvironmentManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
