"""The capability dispatcher: lifecycle calls that work on every backend.

Each function checks the backend's capabilities (declared, or introspected for
backends that declare nothing) before forwarding anything. A keyword is never passed to
a backend that lacks it, and a missing capability is never an error: the dispatcher
does the nearest correct thing, logs it at DEBUG, and says so in its return value.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envlayer.capabilities import Capability, supports
from envlayer.environment import Command, Environment, SandboxInfo
from envlayer.options import BaseOptions
from envlayer.result import ExecResult

log = logging.getLogger("envlayer.lifecycle")


@dataclass(frozen=True)
class CleanupOutcome:
    """What :func:`cleanup` did. ``forced`` is True only when the backend really
    received ``force_remove=True``; ``note`` explains any fallback."""

    backend: str
    forced: bool
    note: str = ""


@dataclass(frozen=True)
class SweepOutcome:
    """The result of a backend-level sweep (reap, list, remove) on one backend.

    ``supported`` is False when the backend lacks the capability (then ``sandboxes`` is
    empty and ``note`` says so); ``error`` holds a failure message, if any: one backend
    failing never stops the others.
    """

    backend: str
    supported: bool
    sandboxes: list[SandboxInfo] = field(default_factory=list)
    error: str | None = None
    note: str = ""


def _name(env_or_cls: Any) -> str:
    return getattr(env_or_cls, "name", "") or type(env_or_cls).__name__


def cleanup(env: Environment, *, force_remove: bool = False, purge: bool = False) -> CleanupOutcome:
    """Clean ``env`` up, forwarding ``force_remove`` only to backends that support it.

    Without the capability, ``force_remove=True`` degrades to plain ``cleanup()``: that
    backend has no persist mode to override, so its cleanup is already its strongest.
    ``purge`` (which implies ``force_remove``) also deletes the task's durable data, on
    backends whose ``cleanup`` takes it (Docker). Exceptions from the backend's
    ``cleanup`` propagate.
    """
    name = _name(env)
    force_remove = force_remove or purge
    if force_remove and supports(env, Capability.FORCE_REMOVE):
        extra = {"purge": True} if purge and accepts_keyword(env.cleanup, "purge") else {}
        env.cleanup(force_remove=True, **extra)  # type: ignore[call-arg]
        return CleanupOutcome(name, forced=True)
    env.cleanup()
    if force_remove:
        note = f"backend {name!r} has no force_remove; ran plain cleanup()"
        log.debug(note)
        return CleanupOutcome(name, forced=False, note=note)
    return CleanupOutcome(name, forced=False)


def wait_for_cleanup(env: Environment, timeout: float) -> bool:
    """Block up to ``timeout`` seconds for ``env``'s background teardown.

    Returns True when teardown is complete, or when the backend tears down
    synchronously (nothing to wait for); False when the wait timed out.
    """
    if not supports(env, Capability.WAIT_FOR_CLEANUP):
        log.debug("backend %r has no wait_for_cleanup; nothing to wait for", _name(env))
        return True
    return bool(env.wait_for_cleanup(timeout))  # type: ignore[attr-defined]


def exec_streaming(
    environment: Environment,
    command: Command,
    on_output: Callable[[str, bytes], None],
    **kwargs: Any,
) -> ExecResult:
    """Run ``command`` delivering output to ``on_output(stream, chunk)`` as it arrives
    when the backend can stream; otherwise once, when the command has finished."""
    if supports(environment, Capability.STREAMING):
        return environment.exec(command, on_output=on_output, **kwargs)  # type: ignore[call-arg]
    log.debug("backend %r cannot stream; delivering output at the end", _name(environment))
    result = environment.exec(command, **kwargs)
    if result.stdout:
        on_output("stdout", result.stdout)
    if result.stderr:
        on_output("stderr", result.stderr)
    return result


BackendSpec = tuple[type[Environment], BaseOptions]
"""A backend class and the options to use for its backend-level calls."""


def _sweep(
    backends: Iterable[BackendSpec],
    capability: Capability,
    call: Callable[[type[Environment], BaseOptions], list[SandboxInfo]],
) -> list[SweepOutcome]:
    outcomes = []
    for cls, options in backends:
        name = _name(cls)
        if not supports(cls, capability):
            note = f"backend {name!r} has no {capability.value}"
            log.debug(note)
            outcomes.append(SweepOutcome(name, supported=False, note=note))
            continue
        try:
            outcomes.append(SweepOutcome(name, supported=True, sandboxes=list(call(cls, options))))
        except Exception as exc:
            log.warning("%s on backend %r failed: %s", capability.value, name, exc)
            outcomes.append(SweepOutcome(name, supported=True, error=f"{type(exc).__name__}: {exc}"))
    return outcomes


def reap_orphans(
    backends: Sequence[BackendSpec], *, profile: str, max_age: float, dry_run: bool = False
) -> list[SweepOutcome]:
    """Remove (or with ``dry_run``, list) sandboxes of ``profile`` left by dead
    processes, on every backend that has a reaper. What counts as an orphan is each
    backend's documented rule; ``max_age`` is in seconds."""
    return _sweep(
        backends,
        Capability.REAP_ORPHANS,
        lambda cls, opts: cls.reap_orphans(profile=profile, max_age=max_age, dry_run=dry_run, options=opts),  # type: ignore[attr-defined]
    )


def list_sandboxes(backends: Sequence[BackendSpec], *, profile: str | None) -> list[SweepOutcome]:
    """Managed sandboxes on every backend that can list them (``profile=None``: all)."""
    return _sweep(
        backends,
        Capability.LIST_SANDBOXES,
        lambda cls, opts: cls.list_sandboxes(profile=profile, options=opts),  # type: ignore[attr-defined]
    )


def accepts_keyword(fn: Callable[..., Any], keyword: str) -> bool:
    """True when ``fn`` names a parameter ``keyword``. A bare ``**kwargs`` does not count:
    wrappers that forward ``**kwargs`` to a backend without the keyword would fail."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(keyword)
    return param is not None and param.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def remove_sandbox(
    backends: Sequence[BackendSpec], task_id: str, *, profile: str, force: bool = False, purge: bool = False
) -> list[SweepOutcome]:
    """Remove the sandbox(es) of ``task_id`` in ``profile`` on every backend that can.
    ``force`` also removes a running sandbox; ``purge`` also deletes the task's durable
    data (Docker workspaces), on backends whose ``remove_sandbox`` takes ``purge`` (the
    others have no data apart from the sandbox)."""

    def call(cls: type[Environment], opts: BaseOptions) -> list[SandboxInfo]:
        remove = cls.remove_sandbox  # type: ignore[attr-defined]
        extra = {"purge": True} if purge and accepts_keyword(remove, "purge") else {}
        return remove(task_id, profile=profile, options=opts, force=force, **extra)  # type: ignore[no-any-return]

    return _sweep(backends, Capability.REMOVE_SANDBOX, call)
