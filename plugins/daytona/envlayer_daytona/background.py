"""Background work of the backend, and nothing of it left running when the interpreter ends.

CPython ends the daemon threads still alive at shutdown when they next take the GIL: a
thread caught inside a socket call (an SDK request on its way) is ended by
``pthread_exit``, which aborts the whole process (SIGABRT, exit status 134) after the
script printed its output. So every piece of background work envlayer starts here (ending
a session shell, deleting a sandbox) goes through :func:`start` with a bound it cannot
outlive (each of its SDK calls carries a timeout), and at exit (:func:`finish_at_exit`,
registered with ``atexit``, which runs before the interpreter tears threads down) each one
is joined until its bound, then the SDK clients' own event threads are shut down
(:func:`envlayer_daytona.client.close_all`).
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("envlayer.daytona")
EXIT_GRACE = 2.0
"""Seconds allowed past a job's bound at exit (its last request's connection teardown)."""


@dataclass(frozen=True)
class Job:
    """A background thread and the monotonic time by which it has ended."""

    thread: threading.Thread
    deadline: float

    def join(self, until: float) -> bool:
        """Wait for the thread up to monotonic time ``until``; True once it has ended."""
        self.thread.join(max(0.0, until - time.monotonic()))
        return not self.thread.is_alive()


_JOBS: list[Job] = []
_LOCK = threading.Lock()


def start(fn: Callable[[], None], *, name: str, bound: float) -> Job:
    """Run ``fn`` on a daemon thread named ``name``. ``bound`` is how many seconds ``fn``
    can take at most (the caller gives each of its requests a timeout that fits); the
    process waits for it at exit up to then. ``fn`` must not raise (it is logged)."""

    def run() -> None:
        try:
            fn()
        except Exception as exc:  # the contract says it does not; never lose the thread's failure
            log.warning("%s failed: %s", name, exc)

    job = Job(threading.Thread(target=run, name=name, daemon=True), time.monotonic() + bound)
    with _LOCK:
        _JOBS[:] = [j for j in _JOBS if j.thread.is_alive()]
        _JOBS.append(job)
    job.thread.start()
    return job


def join_all(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for every background job; True when none is left."""
    until = time.monotonic() + timeout
    with _LOCK:
        jobs = list(_JOBS)
    return all([job.join(until) for job in jobs])


def finish_at_exit() -> None:
    """Join every job until its own bound, then stop the SDK clients' event threads, so no
    thread of the backend is in a call when the interpreter shuts down."""
    with _LOCK:
        jobs = list(_JOBS)
    for job in jobs:
        if not job.join(job.deadline + EXIT_GRACE):
            log.warning("%s did not finish by its deadline at exit", job.thread.name)
    client = sys.modules.get("envlayer_daytona.client")
    if client is not None:  # never imported: no SDK client to stop (and importing it at exit fails)
        client.close_all()


atexit.register(finish_at_exit)
