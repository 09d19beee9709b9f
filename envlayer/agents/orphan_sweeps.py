"""The process-wide orphan sweep: once per process, backend and profile.

On the first creation of an environment for a backend, the
:class:`~envlayer.agents.manager.EnvironmentManager` asks :func:`start_sweep`; the first call
for a ``(backend, profile)`` pair starts :func:`envlayer.dispatch.reap_orphans` on a
daemon thread with ``max_age = 2 * max(ORPHAN_AGE_FLOOR, lifetime)``, later calls (from
any manager of the process) get the same :class:`OrphanSweep`. A sweep never delays
creation; its failures are logged, never raised.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from envlayer.dispatch import SweepOutcome, reap_orphans
from envlayer.environment import Environment
from envlayer.options import BaseOptions

log = logging.getLogger("envlayer.manager")

ORPHAN_AGE_FLOOR = 60.0
"""``max_age`` of the orphan sweep is ``2 * max(ORPHAN_AGE_FLOOR, lifetime_seconds)``."""


@dataclass
class OrphanSweep:
    """One orphan sweep of one backend for one profile, running or finished."""

    backend: str
    profile: str
    max_age: float
    done: threading.Event = field(default_factory=threading.Event)
    outcomes: list[SweepOutcome] = field(default_factory=list)

    def wait(self, timeout: float | None = None) -> bool:
        """True once the sweep has finished (successfully or not)."""
        return self.done.wait(timeout)


_sweeps: dict[tuple[str, str], OrphanSweep] = {}
_sweeps_lock = threading.Lock()


def _run(sweep: OrphanSweep, cls: type[Environment], options: BaseOptions) -> None:
    try:
        sweep.outcomes = reap_orphans([(cls, options)], profile=sweep.profile, max_age=sweep.max_age)
        for outcome in sweep.outcomes:
            if outcome.sandboxes:
                log.info(
                    "orphan reaper removed %d sandbox(es) of profile %r on %r",
                    len(outcome.sandboxes),
                    sweep.profile,
                    outcome.backend,
                )
    except Exception:
        log.warning("orphan sweep of %r for profile %r failed", sweep.backend, sweep.profile, exc_info=True)
    finally:
        sweep.done.set()


def start_sweep(name: str, cls: type[Environment], options: BaseOptions, profile: str, lifetime: float) -> OrphanSweep:
    """Start the sweep of ``(name, profile)`` on a daemon thread unless this process
    already did; return it either way."""
    with _sweeps_lock:
        sweep = _sweeps.get((name, profile))
        if sweep is not None:
            return sweep
        sweep = OrphanSweep(name, profile, 2 * max(ORPHAN_AGE_FLOOR, lifetime))
        _sweeps[(name, profile)] = sweep
    threading.Thread(target=_run, args=(sweep, cls, options), name=f"envlayer-orphan-sweep-{name}", daemon=True).start()
    return sweep


def orphan_sweep(backend: str, profile: str) -> OrphanSweep | None:
    """The sweep this process started for ``backend`` and ``profile``, if any."""
    with _sweeps_lock:
        return _sweeps.get((backend, profile))
