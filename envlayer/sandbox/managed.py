"""``ManagedSandboxEnvironment``: the base of a sandbox that envlayer creates, finds again
by (profile, task), removes and sweeps (Docker, Kubernetes, Modal, Daytona).

On top of :class:`~envlayer.sandbox.base.SandboxEnvironment`, it owns, once:

* ``cleanup(force_remove=False)``: under the backend's state lock, mark the environment
  closed, close this process's session shell, then either keep the sandbox (persist mode:
  :meth:`release_sandbox`) or remove it (``force_remove``, or
  ``persist_across_processes = false``) on a thread of
  :mod:`envlayer.sandbox.teardown_threads`: the work :meth:`removal` returns. Idempotent;
  ``cleanup(force_remove=True)`` after a plain ``cleanup()`` still removes the sandbox, and
  a removal is scheduled once. Never raises: a session that fails to close is logged, and
  so is a removal that fails on its thread;
* ``wait_for_cleanup(timeout)``, joining that thread, and ``wait_for_all_cleanups``;
* ``reap_orphans`` as "sweep, then expire snapshots": the backend's :meth:`sweep_orphans`,
  then its :meth:`expire_snapshots`, then (a real reap only) :meth:`release_reaped` with
  both results. A step that fails does not stop the next one; the first failure is raised
  after the others ran, and what they removed is named in a warning (the dispatcher
  reports the failure; a reaper failure never blocks creating an environment: see
  :mod:`envlayer.agents.orphan_sweeps`).

The sandbox base makes the state lock (``_state_lock``, reentrant; a recovery takes it
too) and the session's lock; a backend sets ``_session`` (an object with ``close()``) and
supplies :meth:`holds_sandbox`, :meth:`close_session` (the default closes
``self._session``), :meth:`removal`
(and :meth:`removal_bound` when its removal needs longer than the exit's shared wait),
:meth:`release_sandbox` when keeping the sandbox means more than doing nothing, and for the
reaper :meth:`reaper_context`, :meth:`sweep_orphans`, :meth:`expire_snapshots`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from envlayer.environment import SandboxInfo
from envlayer.options import BaseOptions
from envlayer.sandbox import teardown_threads
from envlayer.sandbox.base import SandboxEnvironment
from envlayer.snapshot import Snapshot

log = logging.getLogger("envlayer.sandbox")


class ManagedSandboxEnvironment(SandboxEnvironment):
    """Base of a managed sandbox backend; see the module docstring for what it owns and
    what a subclass implements."""

    _teardown: threading.Thread | None = None
    """The removal scheduled by :meth:`cleanup` (None: none yet)."""

    # --- cleanup: the template -------------------------------------------------------------

    def cleanup(self, *, force_remove: bool = False) -> None:
        """Release this handle. Persist mode: the sandbox keeps running (this process's
        session shell ends). With ``force_remove`` or ``persist_across_processes = false``:
        remove the sandbox in the background (see :meth:`wait_for_cleanup`). Idempotent;
        ``cleanup(force_remove=True)`` after a plain ``cleanup()`` still removes it. Never
        raises."""
        with self._state_lock:
            self._closed = True
            try:
                self.close_session()
            except Exception as exc:
                log.debug("closing the %s session of task %r: %r", self.name, self.task_id, exc)
            if self._teardown is not None or not self.holds_sandbox():
                return
            if force_remove or not self.options.persist_across_processes:
                name = f"envlayer-{self.name}-teardown-{self.sandbox_identity()[:12]}"
                self._teardown = teardown_threads.schedule(self.removal(), name, bound=self.removal_bound())
            else:
                self.release_sandbox()

    def wait_for_cleanup(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for this environment's teardown; True when done
        (or when there was nothing to tear down)."""
        thread = self._teardown
        if thread is None:
            return True
        thread.join(max(timeout, 0))
        return not thread.is_alive()

    @classmethod
    def wait_for_all_cleanups(cls, timeout: float) -> bool:
        """Join every teardown started in this process (also done at exit: see
        :mod:`envlayer.sandbox.teardown_threads`)."""
        return teardown_threads.wait_all(timeout)

    # --- cleanup: what a backend supplies ----------------------------------------------------

    def holds_sandbox(self) -> bool:
        """True when this environment has a sandbox that cleanup may remove or release."""
        return True

    def close_session(self) -> None:
        """End this process's session shell (idempotent; the sandbox is not touched).
        Called under the state lock; an exception is logged. The default closes
        ``self._session`` when there is one."""
        if self._session is not None:
            self._session.close()

    def removal(self) -> Callable[[], None]:
        """The work that removes the sandbox, run on a teardown thread: it must take what
        it needs from ``self`` now (called under the state lock), and log what it cannot
        remove (an exception it raises is logged as a warning)."""
        raise NotImplementedError(f"{type(self).__name__} cannot remove its sandbox")

    def removal_bound(self) -> float | None:
        """The seconds :meth:`removal`'s work can take at most, which the process waits for
        at exit; None (the default): the exit's shared wait
        (:data:`~envlayer.sandbox.teardown_threads.EXIT_WAIT`)."""
        return None

    def release_sandbox(self) -> None:
        """Let go of a sandbox that stays (persist mode); called under the state lock by
        every cleanup that keeps it, so it must be idempotent. The default does nothing."""

    # --- reaping: "sweep, then expire snapshots" -------------------------------------------

    @classmethod
    def reap_orphans(cls, *, profile: str, max_age: float, dry_run: bool, options: BaseOptions) -> list[SandboxInfo]:
        """Remove this profile's orphaned sandboxes (:meth:`sweep_orphans`, the backend's
        documented rule; ``max_age`` in seconds), then its snapshots beyond the retention
        options (:meth:`expire_snapshots`, as rows with status ``snapshot``). Returns what
        was (or, with ``dry_run``, would be) removed. A failing step does not stop the
        other; its error is raised once both ran (module docstring)."""
        context = cls.reaper_context(options)

        def sweep() -> list[SandboxInfo]:
            return cls.sweep_orphans(context, profile=profile, max_age=max_age, dry_run=dry_run)

        def expire() -> list[SandboxInfo]:
            return [s.info() for s in cls.expire_snapshots(context, profile=profile, dry_run=dry_run)]

        steps = (("sweeping sandboxes", sweep), ("expiring snapshots", expire))
        removed: list[SandboxInfo] = []
        failures: list[tuple[str, Exception]] = []
        for doing, step in steps:
            try:
                removed += step()
            except Exception as exc:
                failures.append((doing, exc))
        if not dry_run:
            cls.release_reaped(context, removed)
        if failures:
            _warn_partial(cls.name, profile, failures, removed, dry_run)
            raise failures[0][1]
        return removed

    @classmethod
    def reaper_context(cls, options: BaseOptions) -> Any:
        """What the reaper's steps share (a connected client, the options), made once per
        reap; an exception fails the reap. The default: ``options``."""
        return options

    @classmethod
    def sweep_orphans(cls, context: Any, *, profile: str, max_age: float, dry_run: bool) -> list[SandboxInfo]:
        """Remove (or with ``dry_run``, list) this profile's orphaned sandboxes by the
        backend's rule; one sandbox's failure is logged and the sweep goes on. Raises only
        when the sweep cannot run (listing fails)."""
        raise NotImplementedError(f"{cls.__name__} has no orphan sweep")

    @classmethod
    def expire_snapshots(cls, context: Any, *, profile: str, dry_run: bool) -> list[Snapshot]:
        """Remove (or list) this profile's snapshots beyond the retention options. The
        default: none (a backend without snapshots)."""
        return []

    @classmethod
    def release_reaped(cls, context: Any, removed: list[SandboxInfo]) -> None:
        """After a real reap: release what the removed rows held (e.g. images). Never
        raises. The default does nothing."""


def _warn_partial(
    backend: str, profile: str, failures: list[tuple[str, Exception]], removed: list[SandboxInfo], dry_run: bool
) -> None:
    """Say which reaper steps failed and what the others removed (the first failure is
    raised, so those rows would otherwise go unreported)."""
    failed = "; ".join(f"{doing} failed: {exc}" for doing, exc in failures)
    done = ", ".join(f"{r.status} {r.id}" for r in removed) or "nothing"
    verb = "would remove" if dry_run else "removed"
    log.warning("reaper of %s for profile %r: %s; the other steps %s %s", backend, profile, failed, verb, done)
