"""Create, attach to or restart the sandbox of (profile, task).

:func:`ensure` is the whole decision, made from Daytona's answers:

* ``create(name=...)`` with every label in the request; Daytona accepts one create per name,
  so among racing processes one wins and the others get 409 (``DaytonaConflictError``);
* on 409: ``get(name)``; a sandbox envlayer did not label is never touched; a different
  fingerprint is deleted and re-created (``on_fingerprint_mismatch = "recreate"``) or raises;
  ``stopped``/``archived`` is started; ``starting``/``creating``/... is waited for; ``error``,
  ``build_failed`` or ``destroyed`` is deleted and created again.

Every SDK failure becomes :class:`~envlayer.errors.BackendUnavailable` with a hint
(:func:`envlayer_daytona.client.translate`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from envlayer.errors import BackendUnavailable
from envlayer.retry import DEFAULT_POLICY
from envlayer_daytona import identity
from envlayer_daytona.client import retrying, translate
from envlayer_daytona.options import DaytonaOptions

log = logging.getLogger("envlayer.daytona")
T = TypeVar("T")

RESTARTABLE = ("stopped", "archived")
BROKEN = ("error", "build_failed", "destroyed", "destroying")
_ATTEMPTS = 4


@dataclass(frozen=True)
class Spec:
    """What to create for (profile, task): name, labels and fingerprint."""

    name: str
    labels: dict[str, str]
    fingerprint: str
    profile: str
    task: str


def build_spec(options: DaytonaOptions, *, profile: str, task: str) -> Spec:
    """The name, labels and fingerprint of (profile, task)'s sandbox under ``options``."""
    shaping = {
        "image": options.image,
        "snapshot": options.snapshot,
        "target": options.target,
        "resources": [options.cpu, options.memory_gib, options.disk_gib, options.gpu],
        "labels": options.labels,
        "auto_stop_interval": options.auto_stop_interval,
        "auto_delete_interval": options.effective_auto_delete,
        "ttl_minutes": options.ttl_minutes,
    }
    value = identity.fingerprint(shaping)
    persist = options.persist_across_processes
    name = identity.sandbox_name(profile, task) if persist else identity.private_name(profile, task)
    labels = identity.managed_labels(
        profile=profile, task=task, fingerprint_value=value, persist=persist, extra=options.labels
    )
    return Spec(name=name, labels=labels, fingerprint=value, profile=profile, task=task)


def create_params(options: DaytonaOptions, spec: Spec) -> Any:
    """The SDK's create parameters for ``spec``."""
    from daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams, Resources

    common: dict[str, Any] = {
        "name": spec.name,
        "labels": dict(spec.labels),
        "auto_stop_interval": options.auto_stop_interval,
        "auto_delete_interval": options.effective_auto_delete,
        "ttl_minutes": options.ttl_minutes or None,
    }
    if options.image is not None:
        sizes = {"cpu": options.cpu, "memory": options.memory_gib, "disk": options.disk_gib, "gpu": options.gpu}
        resources = Resources(**{k: v for k, v in sizes.items() if v is not None}) if any(sizes.values()) else None
        return CreateSandboxFromImageParams(image=options.image, resources=resources, **common)
    return CreateSandboxFromSnapshotParams(snapshot=options.snapshot, **common)


@dataclass
class Attached:
    """The sandbox in use and how it was obtained (``created``, ``started`` or neither)."""

    sandbox: Any
    created: bool = False
    started: bool = False


def ensure(client: Any, options: DaytonaOptions, spec: Spec) -> Attached:
    """Create, attach to or start the sandbox of ``spec`` (module docstring).

    Raises :class:`BackendUnavailable` for every failure, with a hint."""
    from daytona.common.errors import DaytonaConflictError, DaytonaError, DaytonaNotFoundError

    for _ in range(_ATTEMPTS):
        try:
            created = retrying(
                lambda: client.create(create_params(options, spec), timeout=options.create_timeout),
                f"creating sandbox {spec.name}",
            )
            return Attached(created, created=True)
        except DaytonaConflictError:
            pass
        except DaytonaError as exc:
            raise translate(exc, f"creating sandbox {spec.name}", options) from exc
        try:
            found = retrying(lambda: client.get(spec.name), f"looking up sandbox {spec.name}")
        except DaytonaNotFoundError:
            continue  # deleted between our create and get: try again
        except DaytonaError as exc:
            raise translate(exc, f"looking up sandbox {spec.name}", options) from exc
        attached = _adopt(found, options, spec)
        if attached is not None:
            return attached
    raise BackendUnavailable(
        f"could not create or attach to sandbox {spec.name} after {_ATTEMPTS} attempts",
        hint="something keeps deleting or replacing it; check `envlayer ls` and other processes using this task",
    )


def _adopt(found: Any, options: DaytonaOptions, spec: Spec) -> Attached | None:
    """Attach to an existing sandbox of the same name; None after deleting it (try again)."""
    from daytona.common.errors import DaytonaError

    labels = found.labels or {}
    if labels.get(identity.MANAGED) != "1" or labels.get(identity.TASK) != spec.task:
        raise BackendUnavailable(
            f"a sandbox named {spec.name} exists that envlayer did not create for task {spec.task!r}",
            hint="delete or rename it in Daytona; envlayer never touches sandboxes it did not label",
        )
    state = _state(found)
    if labels.get(identity.FINGERPRINT) != spec.fingerprint:
        if options.on_fingerprint_mismatch == "error":
            raise BackendUnavailable(
                f"sandbox {spec.name} was created with different options (fingerprint "
                f"{labels.get(identity.FINGERPRINT)} != {spec.fingerprint})",
                hint="use the same options, remove it (`envlayer rm TASK --force`), "
                'or set on_fingerprint_mismatch = "recreate"',
            )
        log.info("sandbox %s has another fingerprint; deleting and re-creating it", spec.name)
        remove(found, options)
        return None
    try:
        if state in BROKEN:
            log.warning("sandbox %s is %s; deleting and re-creating it", spec.name, state)
            remove(found, options)
            return None
        if state == "started":
            return Attached(found)
        if state in RESTARTABLE or state == "stopping":
            start(found, options)
            return Attached(found, started=True)
        retrying(lambda: found.wait_for_sandbox_start(timeout=options.create_timeout), "waiting for the sandbox")
        return Attached(found)
    except DaytonaError as exc:
        raise translate(exc, f"starting sandbox {spec.name}", options) from exc


def _state(sandbox: Any) -> str:
    state = sandbox.state
    return str(getattr(state, "value", state) or "")


TRANSITION_POLL = 0.5
"""Seconds between looks at a sandbox whose state change is under way."""
TRANSITIONAL = frozenset({"creating", "starting", "stopping", "destroying", "restoring", "archiving"})


def settled(sandbox: Any) -> bool:
    """No state change is under way, as far as the last fetched DTO says: the state is not
    a transition and it is the ``desiredState`` (when Daytona gives one)."""
    state = _state(sandbox)
    desired = getattr(sandbox, "desired_state", None)
    desired = str(getattr(desired, "value", desired) or "")
    return state not in TRANSITIONAL and (not desired or desired == state or state in ("error", "build_failed"))


def wait_for_transition(sandbox: Any, deadline: float) -> str:
    """Poll (every :data:`TRANSITION_POLL` s) until the sandbox's state change ends, it is
    gone, or monotonic ``deadline`` passes; returns the last state seen."""
    while True:
        time.sleep(max(0.0, min(TRANSITION_POLL, deadline - time.monotonic())))
        state = state_of(sandbox)
        if state == "destroyed" or settled(sandbox) or time.monotonic() >= deadline:
            return state


def after_transition(fn: Callable[[], T], sandbox: Any, options: DaytonaOptions, doing: str) -> T:
    """``fn()`` (a start, stop or delete: safe to repeat), again each time Daytona answers
    409 "Sandbox state change in progress" (the API refuses them while the sandbox is
    stopping, starting...: apps/api/src/sandbox/services/sandbox.service.ts ``start``,
    ``stop``, ``destroy``) once the change has ended, for up to ``create_timeout`` seconds;
    then the last 409 is raised. Throttling is retried too (:func:`retrying`)."""
    from daytona.common.errors import DaytonaConflictError

    deadline = time.monotonic() + options.create_timeout
    while True:
        try:
            return retrying(fn, doing)
        except DaytonaConflictError as exc:
            if time.monotonic() >= deadline:
                raise
            log.info("%s: %s; waiting for the state change to end", doing, exc.message)
            wait_for_transition(sandbox, deadline)


def start(sandbox: Any, options: DaytonaOptions) -> None:
    """Bring a stopped, stopping, archived or paused sandbox to ``started`` (a start resumes
    a paused one); a state change under way, such as another process's start, is waited for."""
    if state_of(sandbox) != "started":
        after_transition(
            lambda: sandbox.start(timeout=options.create_timeout), sandbox, options, f"starting sandbox {sandbox.name}"
        )


def removal_bound(options: DaytonaOptions) -> float:
    """Seconds :func:`remove` can take at most: the wait for a state change, the delete and
    its wait, and the retries' backoff."""
    return 2 * options.create_timeout + DEFAULT_POLICY.budget + 5


def remove(sandbox: Any, options: DaytonaOptions) -> None:
    """Delete ``sandbox`` and wait until Daytona says it is gone (a state change under way is
    waited for first: :func:`after_transition`); a sandbox that is already gone is fine.
    Raises the SDK's error when it could not be deleted."""
    from daytona.common.errors import DaytonaNotFoundError

    try:
        after_transition(
            lambda: sandbox.delete(timeout=options.create_timeout, wait=True),
            sandbox,
            options,
            f"deleting sandbox {sandbox.name}",
        )
    except DaytonaNotFoundError:
        pass


def state_of(sandbox: Any) -> str:
    """The sandbox's current state, fetched from Daytona (``destroyed`` once it is gone)."""
    from daytona.common.errors import DaytonaNotFoundError

    try:
        retrying(sandbox.refresh_data, "reading the sandbox's state")
    except DaytonaNotFoundError:
        return "destroyed"
    return _state(sandbox)
