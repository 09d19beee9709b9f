"""Create, attach to, start, resume or recover the sandbox of (profile, task).

:func:`ensure` is the whole decision, made from Daytona's answers:

* ``create(name=...)`` with every label in the request; Daytona accepts one create per name,
  so among racing processes one wins and the others get 409 (``DaytonaConflictError``);
* on 409: ``get(name)``; a sandbox envlayer did not label is never touched; a different
  fingerprint is deleted and re-created (``on_fingerprint_mismatch = "recreate"``) or raises;
  otherwise :func:`bring_up` acts on its state as :data:`STATE_ACTIONS` says: every state
  the SDK lists is there on purpose (wait, start, resume, recover, recreate or fail).

:func:`revive` is what the backend calls when a command finds the sandbox not running.
Every SDK failure becomes :class:`~envlayer.errors.BackendUnavailable` with a hint
(:func:`envlayer_daytona.client.translate`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from envlayer.errors import BackendUnavailable, ImageBuildFailed, InvalidArgument
from envlayer.sandbox import recorded_options
from envlayer.sandbox.dockerfile import resolve_build
from envlayer.sandbox.retry import DEFAULT_POLICY
from envlayer_daytona import identity, sdk
from envlayer_daytona.client import retrying, translate
from envlayer_daytona.options import DaytonaOptions

log = logging.getLogger("envlayer.daytona")
T = TypeVar("T")

_ATTEMPTS = 4

READY, WAIT, START, RECOVER, RECREATE, FAIL = "ready", "wait", "start", "recover", "recreate", "fail"
STATE_ACTIONS: dict[str, str] = {
    "started": READY,
    # A change Daytona finishes on its own: wait for it (up to create_timeout), then act on
    # the state it reaches.
    "creating": WAIT,
    "restoring": WAIT,
    "starting": WAIT,
    "stopping": WAIT,
    "destroying": WAIT,
    "pending_build": WAIT,
    "building_snapshot": WAIT,
    "pulling_snapshot": WAIT,
    "resizing": WAIT,
    "snapshotting": WAIT,
    "forking": WAIT,
    "pausing": WAIT,
    "resuming": WAIT,
    # At rest and not running: start it. The API's start also takes an archiving sandbox
    # and resumes a paused one (apps/api/src/sandbox/services/sandbox.service.ts ``start``).
    "stopped": START,
    "archived": START,
    "archiving": START,
    "paused": START,
    # ``recover()`` when Daytona says the error is recoverable, else recreate (data lost).
    "error": RECOVER,
    "build_failed": RECREATE,
    "destroyed": RECREATE,
    # The runner lost track of it, or a state newer than this SDK: nothing safe to do.
    "unknown": FAIL,
    "unknown_default_open_api": FAIL,
}
"""What envlayer does with a sandbox in each state of the SDK's ``SandboxState``
(daytona_api_client/models/sandbox_state.py, SDK 0.226); a state missing here is FAIL."""
BUILDING = ("pending_build", "building_snapshot", "pulling_snapshot")
"""States in which Daytona prepares the sandbox's image (said in the progress note)."""


@dataclass(frozen=True)
class Spec:
    """What to create for (profile, task): name, labels and fingerprint."""

    name: str
    labels: dict[str, str]
    fingerprint: str
    profile: str
    task: str
    record: dict[str, Any] = field(default_factory=dict)
    """The options it is created with, as its :data:`~envlayer_daytona.identity.OPTIONS` label records them."""


SHAPING_OPTIONS = (
    "image",
    "snapshot",
    "target",
    "user",
    "cpu",
    "memory_gib",
    "disk_gib",
    "gpu",
    "labels",
    "auto_stop_interval",
    "auto_delete_interval",
    "ttl_minutes",
)
"""The options that shape a sandbox (its fingerprint's inputs), recorded in its labels."""


def build_spec(options: DaytonaOptions, *, profile: str, task: str) -> Spec:
    """The name, labels and fingerprint of (profile, task)'s sandbox under ``options``."""
    build = resolve_build(options.dockerfile, options.build_context)
    shaping = {
        "image": options.image,
        **({"dockerfile": build.digest} if build is not None else {}),
        "snapshot": options.snapshot,
        "target": options.target,
        **({"user": options.user} if options.user else {}),  # unset: fingerprints of earlier sandboxes hold
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
    record = recorded_options.record_of(options, SHAPING_OPTIONS)
    labels[identity.OPTIONS] = recorded_options.encode(record)
    return Spec(name=name, labels=labels, fingerprint=value, profile=profile, task=task, record=record)


def create_params(options: DaytonaOptions, spec: Spec, from_snapshot: str | None = None) -> Any:
    """The SDK's create parameters for ``spec`` (from Daytona snapshot ``from_snapshot``, a
    fork, instead of the options' image or snapshot when set)."""
    common: dict[str, Any] = {
        "name": spec.name,
        "labels": dict(spec.labels),
        "auto_stop_interval": options.auto_stop_interval,
        "auto_delete_interval": options.effective_auto_delete,
        "ttl_minutes": options.ttl_minutes or None,
        "os_user": options.user,
    }
    if from_snapshot is not None:
        return sdk.daytona.CreateSandboxFromSnapshotParams(snapshot=from_snapshot, **common)
    if options.image is not None or options.dockerfile:
        sizes = {"cpu": options.cpu, "memory": options.memory_gib, "disk": options.disk_gib, "gpu": options.gpu}
        resources = (
            sdk.daytona.Resources(**{k: v for k, v in sizes.items() if v is not None}) if any(sizes.values()) else None
        )
        image = sdk.daytona.Image.from_dockerfile(options.dockerfile) if options.dockerfile else options.image
        return sdk.daytona.CreateSandboxFromImageParams(image=image, resources=resources, **common)
    return sdk.daytona.CreateSandboxFromSnapshotParams(snapshot=options.snapshot, **common)


@dataclass
class Attached:
    """The sandbox in use and how it was obtained (``created``, ``started`` or neither)."""

    sandbox: Any
    created: bool = False
    started: bool = False
    recovered: bool = False
    lost: str = ""
    """Why an earlier sandbox of this task was replaced (its data is gone), or ""."""


def ensure(client: Any, options: DaytonaOptions, spec: Spec, from_snapshot: str | None = None) -> Attached:
    """Create, attach to or start the sandbox of ``spec`` (module docstring). With
    ``from_snapshot`` (a fork) it is created from that Daytona snapshot, and a task that
    already has a sandbox is refused (:class:`InvalidArgument`): its data would not come
    from the snapshot.

    Raises :class:`BackendUnavailable` for every other failure, with a hint."""
    lost = ""
    for _ in range(_ATTEMPTS):
        try:
            return Attached(_create(client, options, spec, from_snapshot), created=True, lost=lost)
        except sdk.errors.DaytonaConflictError:
            if from_snapshot is not None:
                raise _fork_target_taken(spec) from None
        except sdk.errors.DaytonaTimeoutError as exc:
            raise _create_timed_out(client, options, spec, exc) from exc
        except sdk.errors.DaytonaError as exc:
            raise translate(exc, f"creating sandbox {spec.name}", options) from exc
        try:
            found = retrying(lambda: client.get(spec.name), f"looking up sandbox {spec.name}")
        except sdk.errors.DaytonaNotFoundError:
            continue  # deleted between our create and get: try again
        except sdk.errors.DaytonaError as exc:
            raise translate(exc, f"looking up sandbox {spec.name}", options) from exc
        attached = _adopt(found, options, spec)
        if isinstance(attached, Attached):
            return attached
        lost = attached or lost
    raise BackendUnavailable(
        f"could not create or attach to sandbox {spec.name} after {_ATTEMPTS} attempts",
        hint="something keeps deleting or replacing it; check `envlayer ls` and other processes using this task",
    )


def _fork_target_taken(spec: Spec) -> InvalidArgument:
    return InvalidArgument(
        "task_id",
        f"task {spec.task!r} already has a sandbox ({spec.name}); a fork needs a new task",
        hint=f"pick a new task id, or remove it first (`envlayer rm --force {spec.task}`)",
    )


def _create(client: Any, options: DaytonaOptions, spec: Spec, from_snapshot: str | None = None) -> Any:
    """``client.create`` for ``spec``, waiting up to ``create_timeout`` for it to start.
    From an image, Daytona builds a snapshot first (minutes for a large image): say so."""
    if (options.image is not None or options.dockerfile) and from_snapshot is None:
        log.warning(
            "creating sandbox %s from image %s: Daytona builds a snapshot of it first, which can take "
            "minutes; waiting up to %g s",
            spec.name,
            options.image or options.dockerfile,
            options.create_timeout,
        )
    try:
        return retrying(
            lambda: client.create(create_params(options, spec, from_snapshot), timeout=options.create_timeout),
            f"creating sandbox {spec.name}",
        )
    except Exception as exc:
        if options.dockerfile and from_snapshot is None and "build_failed" in str(exc).lower():
            raise ImageBuildFailed(
                f"Daytona could not build the image from {options.dockerfile}: {exc}",
                hint="fix the Dockerfile or the files it copies (the reason above is Daytona's errorReason); "
                f"the failed sandbox {spec.name} is removed by `envlayer rm` or the reaper",
            ) from None
        raise


def _create_timed_out(client: Any, options: DaytonaOptions, spec: Spec, exc: Any) -> BackendUnavailable:
    """The error for a create that did not start within ``create_timeout`` (the SDK's
    ``DaytonaTimeoutError`` names the sandbox it made: ``sandbox_id``, daytona/_sync/daytona.py
    ``Daytona.create``). A private sandbox is deleted (nobody else would use it); a
    persist-mode one is left to finish: the next call for the task attaches to it."""
    sandbox_id = getattr(exc, "sandbox_id", None)
    building = " (Daytona was still building the image's snapshot)" if options.image is not None else ""
    what = f"sandbox {spec.name} did not start within create_timeout = {options.create_timeout:g} s{building}"
    hint = "raise create_timeout, or build a snapshot once (`daytona snapshot create`) and set `snapshot`"
    if sandbox_id is None:
        return BackendUnavailable(what, hint=hint)
    if options.persist_across_processes:
        return BackendUnavailable(
            f"{what}; it keeps starting, and the next call for this task attaches to it and waits", hint=hint
        )
    try:
        remove(retrying(lambda: client.get(sandbox_id), f"looking up sandbox {sandbox_id}"), options)
    except Exception as cleanup_exc:
        return BackendUnavailable(
            f"{what}; deleting it failed too ({cleanup_exc})", hint=f"remove it with `envlayer reap`; {hint}"
        )
    return BackendUnavailable(f"{what}; it was deleted", hint=hint)


def _adopt(found: Any, options: DaytonaOptions, spec: Spec) -> Attached | str:
    """Attach to an existing sandbox of the same name, or delete it and return why (try
    again): the notice of its replacement (another fingerprint: see
    :func:`envlayer.sandbox.recorded_options.settle_mismatch`; a broken one: its data is lost)."""
    labels = found.labels or {}
    if labels.get(identity.MANAGED) != "1" or labels.get(identity.TASK) != spec.task:
        raise BackendUnavailable(
            f"a sandbox named {spec.name} exists that envlayer did not create for task {spec.task!r}",
            hint="delete or rename it in Daytona; envlayer never touches sandboxes it did not label",
        )
    if labels.get(identity.FINGERPRINT) != spec.fingerprint:
        notice = recorded_options.settle_mismatch(
            what=f"sandbox {spec.name}",
            mode=options.on_fingerprint_mismatch,
            found=labels.get(identity.OPTIONS),
            requested=spec.record,
            logger=log,
        )
        remove(found, options)
        return notice
    try:
        done = bring_up(found, options, _state(found))
        if done == RECREATE:
            notice = lost_notice(found)
            log.warning("%s; deleting and re-creating it", notice)
            remove(found, options)
            return notice
    except sdk.errors.DaytonaError as exc:
        raise translate(exc, f"starting sandbox {spec.name}", options) from exc
    return Attached(found, started=done == START, recovered=done == RECOVER)


def action_for(sandbox: Any, state: str) -> str:
    """The :data:`STATE_ACTIONS` entry for ``state`` (an ``error`` Daytona does not call
    recoverable is RECREATE)."""
    action = STATE_ACTIONS.get(state, FAIL)
    if action == RECOVER and not getattr(sandbox, "recoverable", False):
        return RECREATE
    return action


def bring_up(sandbox: Any, options: DaytonaOptions, state: str) -> str:
    """Act on the sandbox's ``state`` (as last fetched; ``destroyed`` once it is gone) as
    :data:`STATE_ACTIONS` says, until it is ``started``. Returns
    READY (it was running), START (started or resumed), RECOVER (recovered) or RECREATE
    (the caller deletes it and creates a new one). Raises :class:`BackendUnavailable` for a
    FAIL state or a change that outlasts ``create_timeout``, and SDK errors as they are."""
    deadline = time.monotonic() + options.create_timeout
    done = READY
    while True:
        action = action_for(sandbox, state)
        if action in (READY, RECREATE):
            return RECREATE if action == RECREATE else done
        if action == FAIL:
            raise BackendUnavailable(
                f"sandbox {sandbox.name} is in state {state!r}, which envlayer cannot act on",
                hint="check it in the Daytona dashboard; remove it with `envlayer rm TASK --force` to start afresh",
            )
        if action == WAIT:
            if state in BUILDING:
                log.warning("sandbox %s is building its image (%s); waiting for it", sandbox.name, state)
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"sandbox {sandbox.name} is still {state!r} after {options.create_timeout:g} s",
                    hint="Daytona is slow to finish this change; retry later or raise create_timeout",
                )
            state = wait_for_transition(sandbox, deadline)
            continue
        name = sandbox.name
        if action == START:
            after_transition(
                lambda: sandbox.start(timeout=options.create_timeout), sandbox, options, f"starting {name}"
            )
        else:
            log.warning("sandbox %s is in a recoverable error (%s); recovering it", name, sandbox.error_reason)
            after_transition(
                lambda: sandbox.recover(timeout=options.create_timeout), sandbox, options, f"recovering {name}"
            )
        done = action
        state = state_of(sandbox)


def lost_notice(sandbox: Any) -> str:
    """What the user is told when a broken sandbox is replaced: its data is gone."""
    reason = getattr(sandbox, "error_reason", None)
    because = f" ({reason})" if reason else ""
    return (
        f"sandbox {sandbox.name} was in state {_state(sandbox)!r}{because} and could not be recovered; "
        "it was replaced by a new one and its files and processes are lost"
    )


_REVIVED = {READY: "sandbox restarted", START: "sandbox restarted", RECOVER: "sandbox recovered from an error"}


def revive(client: Any, options: DaytonaOptions, spec: Spec, sandbox: Any) -> tuple[Any, str]:
    """Bring back a sandbox a command found not running: wait, start, resume or recover it,
    or replace it when it is gone or broken. Returns (the sandbox now in use, what was done,
    for the result's ``recovered``). Raises :class:`BackendUnavailable` (with a hint)."""
    try:
        state = state_of(sandbox)
        done = bring_up(sandbox, options, state)
    except sdk.errors.DaytonaError as exc:
        raise translate(exc, f"bringing sandbox {spec.name} back", options) from exc
    if done != RECREATE:
        return sandbox, _REVIVED[done]
    notice = lost_notice(sandbox) if _state(sandbox) in ("error", "build_failed") and state != "destroyed" else ""
    if notice:
        log.warning("%s; deleting and re-creating it", notice)
        remove(sandbox, options)
    attached = ensure(client, options, spec)
    why = notice or attached.lost
    return attached.sandbox, f"sandbox recreated: {why}" if why else "sandbox recreated"


def not_running(sandbox: Any) -> bool:
    """True when Daytona says the sandbox is not ``started`` (or is gone)."""
    return state_of(sandbox) != "started"


def _state(sandbox: Any) -> str:
    state = sandbox.state
    return str(getattr(state, "value", state) or "")


TRANSITION_POLL = 0.5
"""Seconds between looks at a sandbox whose state change is under way."""


def settled(sandbox: Any) -> bool:
    """No state change is under way, as far as the last fetched DTO says: the state is not
    a transition and it is the ``desiredState`` (when Daytona gives one)."""
    state = _state(sandbox)
    desired = getattr(sandbox, "desired_state", None)
    desired = str(getattr(desired, "value", desired) or "")
    return STATE_ACTIONS.get(state) != WAIT and (not desired or desired == state or state in ("error", "build_failed"))


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
    deadline = time.monotonic() + options.create_timeout
    while True:
        try:
            return retrying(fn, doing)
        except sdk.errors.DaytonaConflictError as exc:
            if time.monotonic() >= deadline:
                raise
            log.info("%s: %s; waiting for the state change to end", doing, exc.message)
            wait_for_transition(sandbox, deadline)


def removal_bound(options: DaytonaOptions) -> float:
    """Seconds :func:`remove` can take at most: the wait for a state change, the delete and
    its wait, and the retries' backoff."""
    return 2 * options.create_timeout + DEFAULT_POLICY.budget + 5


def remove(sandbox: Any, options: DaytonaOptions) -> None:
    """Delete ``sandbox`` and wait until Daytona says it is gone (a state change under way is
    waited for first: :func:`after_transition`); a sandbox that is already gone is fine.
    Raises the SDK's error when it could not be deleted."""
    try:
        after_transition(
            lambda: sandbox.delete(timeout=options.create_timeout, wait=True),
            sandbox,
            options,
            f"deleting sandbox {sandbox.name}",
        )
    except sdk.errors.DaytonaNotFoundError:
        pass


def state_of(sandbox: Any) -> str:
    """The sandbox's current state, fetched from Daytona (``destroyed`` once it is gone)."""
    try:
        retrying(sandbox.refresh_data, "reading the sandbox's state")
    except sdk.errors.DaytonaNotFoundError:
        return "destroyed"
    return _state(sandbox)
