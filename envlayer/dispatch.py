"""The capability dispatcher: the one way in for ``exec`` (:func:`run`), and lifecycle
calls that work on every backend.

:func:`run` is what every front end calls to run a command (the manager,
:mod:`envlayer.aio`, the agent tools, the CLI and its broker, the framework adapters): it
prepares the call for the backend (:func:`envlayer.exec_call.prepare_call`: keywords
checked against what the backend declares, the :class:`~envlayer.request.ExecRequest`
built) and hands the request to the backend's ``handle_request``, or, for a plugin written
to the older keyword contract, calls its ``exec`` with the keywords it takes.

Each other function checks the backend's capabilities (declared, or introspected for
backends that declare nothing; in both cases only methods whose signature accepts the
call, see :mod:`envlayer.capabilities`) before forwarding anything. A keyword is never
passed to a backend that lacks it, and a missing capability is never an error: the
dispatcher does the nearest correct thing, logs it at DEBUG, and says so in its return
value (``note``). The one exception is ``user``: running a command as another user than
the one asked for is never correct (:data:`envlayer.request.KEYWORD_RULES`). Anything but an
envlayer error raised by the backend during the call becomes a
:class:`~envlayer.errors.PluginError` naming the backend and its distribution.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

from envlayer.capabilities import (
    Capability,
    absence_note,
    accepts_keyword,
    backend_name,
    declared_capabilities,
    handles_requests,
    supports,
)
from envlayer.discovery.plugin_calls import plugin_call, plugin_error, recording
from envlayer.environment import Command, Environment, SandboxInfo
from envlayer.errors import BackendUnavailable, EnvlayerError, InvalidArgument, PluginError
from envlayer.exec_call import exec_request, prepare_call
from envlayer.options import BaseOptions
from envlayer.request import ExecArguments, ExecRequest
from envlayer.result import ExecResult

if TYPE_CHECKING:
    from envlayer.snapshot import Snapshot

log = logging.getLogger("envlayer.lifecycle")


@dataclass(frozen=True)
class CleanupOutcome:
    """What :func:`cleanup` did. ``forced`` is True only when the backend really
    received ``force_remove=True``; ``note`` explains any fallback ("" when there was
    none)."""

    backend: str
    forced: bool
    note: str = ""


@dataclass(frozen=True)
class StreamOutcome:
    """What :func:`exec_streaming` did: ``streamed`` is False when the backend cannot
    stream and the output was delivered once at the end (``note`` says so)."""

    result: ExecResult
    streamed: bool
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
    plugin_failure: bool = False
    """True when ``error`` is a plugin bug or a plugin that cannot be loaded
    (:class:`~envlayer.errors.PluginError`, ``BackendLoadError``, ``BackendConflict``)."""
    unavailable: bool = False
    """True when ``error`` is :class:`~envlayer.errors.BackendUnavailable`: the backend's
    infrastructure cannot be reached (or is not configured) here."""
    hint: str = ""
    """What to do about ``error`` (the envlayer error's hint), when there is one."""


def cleanup(env: Environment, *, force_remove: bool = False, purge: bool = False) -> CleanupOutcome:
    """Clean ``env`` up, forwarding ``force_remove`` only to backends that support it.

    Without the capability, ``force_remove=True`` degrades to plain ``cleanup()``: that
    backend has no persist mode to override, so its cleanup is already its strongest. The
    outcome's note says it may have kept the sandbox, unless the backend declares that
    nothing outlives its cleanup (no ``persist_across_processes``: local, SSH).
    ``purge`` (which implies ``force_remove``) also deletes the task's durable data, on
    backends whose ``cleanup`` takes it (Docker).

    Raises: envlayer errors from the backend's ``cleanup`` as they are; anything else
    as :class:`~envlayer.errors.PluginError`.
    """
    name = backend_name(env)
    force_remove = force_remove or purge
    if force_remove and supports(env, Capability.FORCE_REMOVE):
        extra = {"purge": True} if purge and accepts_keyword(env, "cleanup", "purge") else {}
        with plugin_call(env, "cleanup"):
            env.cleanup(force_remove=True, **extra)  # type: ignore[call-arg]
        return CleanupOutcome(name, forced=True)
    with plugin_call(env, "cleanup"):
        env.cleanup()
    if force_remove:
        note = f"{absence_note(env, Capability.FORCE_REMOVE)}; ran plain cleanup(), which may keep the sandbox"
        log.debug(note)
        if not _keeps_nothing(env):
            return CleanupOutcome(name, forced=False, note=note)
    return CleanupOutcome(name, forced=False)


def _keeps_nothing(env: Environment) -> bool:
    """True when ``env``'s plain cleanup leaves nothing a later process could find: it
    declares its capabilities, without ``persist_across_processes`` (local, SSH). A
    backend that declares nothing may keep anything."""
    declared = declared_capabilities(env)
    return declared is not None and Capability.PERSIST_ACROSS_PROCESSES not in declared


def wait_for_cleanup(env: Environment, timeout: float) -> bool:
    """Block up to ``timeout`` seconds for ``env``'s background teardown.

    Returns True when teardown is complete, or when the backend tears down
    synchronously (nothing to wait for); False when the wait timed out. Raises like
    :func:`cleanup`.
    """
    if not supports(env, Capability.WAIT_FOR_CLEANUP):
        log.debug("%s; nothing to wait for", absence_note(env, Capability.WAIT_FOR_CLEANUP))
        return True
    with plugin_call(env, "wait_for_cleanup"):
        return bool(env.wait_for_cleanup(timeout))  # type: ignore[attr-defined]


def run(environment: Environment, command: Command, /, **arguments: Unpack[ExecArguments]) -> ExecResult:
    """Run ``command`` on ``environment``: the one way in for every front end.

    The keywords are :class:`~envlayer.request.ExecArguments`; one the backend lacks the
    capability for follows :data:`~envlayer.request.KEYWORD_RULES` (``user`` refused,
    ``cancel`` not passed on, ``on_output`` given the output when the command ends).
    Raises like ``exec``: ``TypeError`` for an unknown keyword,
    :class:`~envlayer.errors.InvalidArgument` (nothing ran),
    :class:`~envlayer.errors.BackendUnavailable`,
    :class:`~envlayer.errors.EnvironmentClosed`; anything else the backend raises becomes
    :class:`~envlayer.errors.PluginError`, except what ``on_output`` itself raises.
    :func:`run_with_output` also says whether the output was streamed.
    """
    if not arguments:  # most calls: nothing to fit to the backend, nothing to record
        return _handle(environment, exec_request(environment, command), command, {}, ())
    if arguments.get("on_output") is None:
        call = prepare_call(environment, command, **arguments)
        return call.finish(_handle(environment, call.request, command, call.keywords, ()))
    return run_with_output(environment, command, **arguments).result


def run_with_output(environment: Environment, command: Command, /, **arguments: Unpack[ExecArguments]) -> StreamOutcome:
    """:func:`run`, returning a :class:`StreamOutcome`: whether ``on_output`` got the
    output as it arrived, and the fallback note when it did not."""
    on_output = arguments.get("on_output")
    callers: list[BaseException] = []
    if on_output is not None:
        arguments["on_output"], callers = recording(on_output)  # the callback's own exceptions are not the plugin's
    call = prepare_call(environment, command, **arguments)
    result = _handle(environment, call.request, command, call.keywords, callers)
    return StreamOutcome(call.finish(result), streamed=call.streamed, note=call.note)


def _handle(
    environment: Environment,
    request: ExecRequest,
    command: Command,
    keywords: dict[str, Any],
    callers: Sequence[BaseException],
) -> ExecResult:
    """Hand a prepared call to ``environment``'s backend: its ``request`` to
    ``handle_request``, or for a plugin written to the older keyword contract, ``command``
    and the ``keywords`` it takes to its own ``exec``. What the backend raises is treated
    as :func:`plugin_call` treats it (a ``try`` of its own: the common call enters no
    context manager); ``callers`` are exceptions of the caller's own callback, passed
    through as they are."""
    try:
        if handles_requests(environment):
            return environment.handle_request(request)
        return environment.exec(command, **keywords)
    except EnvlayerError:
        raise
    except Exception as exc:
        if any(exc is other for other in callers):
            raise
        raise plugin_error(environment, "exec", exc) from exc


def user_keywords(environment: Environment, user: str | None) -> dict[str, str]:
    """The keyword arguments that ask ``exec`` to run as ``user``: none for ``None``,
    ``{"user": user}`` when :func:`run` would pass it on. Kept for one release: ``run``
    applies the rule itself (:data:`envlayer.request.KEYWORD_RULES`).

    Raises :class:`~envlayer.errors.UnsupportedArgument` (nothing ran) for a backend
    without ``exec_as_user``, :class:`~envlayer.errors.InvalidArgument` for a malformed
    ``user``.
    """
    if user is None:
        return {}
    prepare_call(environment, "true", user=user)  # the check run() makes; nothing runs
    return {"user": user}


def exec_streaming(
    environment: Environment,
    command: Command,
    on_output: Callable[[str, bytes], None],
    **kwargs: Any,
) -> ExecResult:
    """:func:`run` with ``on_output``: chunks as they arrive when the backend can stream;
    otherwise once, when the command has finished."""
    return run(environment, command, on_output=on_output, **kwargs)


def exec_with_output(
    environment: Environment,
    command: Command,
    on_output: Callable[[str, bytes], None],
    **kwargs: Any,
) -> StreamOutcome:
    """:func:`run_with_output` with ``on_output``."""
    return run_with_output(environment, command, on_output=on_output, **kwargs)


BackendSpec = tuple[type[Environment], BaseOptions]
"""A backend class and the options to use for its backend-level calls."""


def _sweep(
    backends: Iterable[BackendSpec],
    capability: Capability,
    call: Callable[[type[Environment], BaseOptions], list[SandboxInfo]],
    refuse: Callable[[type[Environment]], str] | None = None,
) -> list[SweepOutcome]:
    outcomes = []
    for cls, options in backends:
        name = backend_name(cls)
        if not supports(cls, capability):
            note = absence_note(cls, capability)
            log.debug(note)
            outcomes.append(SweepOutcome(name, supported=False, note=note))
            continue
        refusal = refuse(cls) if refuse is not None else None
        if refusal:
            log.debug(refusal)
            outcomes.append(SweepOutcome(name, supported=False, note=refusal))
            continue
        try:
            with plugin_call(cls, capability.value):
                sandboxes = list(call(cls, options))
            outcomes.append(SweepOutcome(name, supported=True, sandboxes=sandboxes))
        except Exception as exc:
            log.warning("%s on backend %r failed: %s", capability.value, name, exc)
            error = f"{type(exc).__name__}: {exc.message if isinstance(exc, EnvlayerError) else exc}"
            outcomes.append(
                SweepOutcome(
                    name,
                    supported=True,
                    error=error,
                    hint=exc.hint if isinstance(exc, EnvlayerError) else "",
                    plugin_failure=isinstance(exc, PluginError),
                    unavailable=isinstance(exc, BackendUnavailable),
                )
            )
    return outcomes


def reap_orphans(
    backends: Sequence[BackendSpec], *, profile: str, max_age: float, dry_run: bool = False
) -> list[SweepOutcome]:
    """Remove (or with ``dry_run``, list) sandboxes of ``profile`` left by dead
    processes, on every backend that has a reaper. What counts as an orphan is each
    backend's documented rule; ``max_age`` is in seconds.

    A reaper whose signature has no ``dry_run`` (an older plugin) can only reap: it is
    called without the keyword for a real reap, and a dry run on it is refused
    (``supported=False``, the note says why; nothing is removed)."""

    def call(cls: type[Environment], opts: BaseOptions) -> list[SandboxInfo]:
        kwargs: dict[str, Any] = {"profile": profile, "max_age": max_age, "options": opts}
        if accepts_keyword(cls, "reap_orphans", "dry_run"):
            kwargs["dry_run"] = dry_run
        return cls.reap_orphans(**kwargs)  # type: ignore[attr-defined,no-any-return]

    def refuse(cls: type[Environment]) -> str:
        if dry_run and not accepts_keyword(cls, "reap_orphans", "dry_run"):
            return (
                f"backend {backend_name(cls)!r} cannot do a dry run: its reap_orphans has no dry_run parameter; "
                "nothing was listed or removed"
            )
        return ""

    return _sweep(backends, Capability.REAP_ORPHANS, call, refuse)


def list_sandboxes(backends: Sequence[BackendSpec], *, profile: str | None) -> list[SweepOutcome]:
    """Managed sandboxes on every backend that can list them (``profile=None``: all)."""
    return _sweep(
        backends,
        Capability.LIST_SANDBOXES,
        lambda cls, opts: cls.list_sandboxes(profile=profile, options=opts),  # type: ignore[attr-defined]
    )


def remove_sandbox(
    backends: Sequence[BackendSpec], task_id: str, *, profile: str, force: bool = False, purge: bool = False
) -> list[SweepOutcome]:
    """Remove the sandbox(es) of ``task_id`` in ``profile`` on every backend that can.
    ``force`` also removes a running sandbox; ``purge`` also deletes the task's durable
    data (Docker workspaces), on backends whose ``remove_sandbox`` takes ``purge`` (the
    others have no data apart from the sandbox)."""

    def call(cls: type[Environment], opts: BaseOptions) -> list[SandboxInfo]:
        remove = cls.remove_sandbox  # type: ignore[attr-defined]
        extra = {"purge": True} if purge and accepts_keyword(cls, "remove_sandbox", "purge") else {}
        return remove(task_id, profile=profile, options=opts, force=force, **extra)  # type: ignore[no-any-return]

    return _sweep(backends, Capability.REMOVE_SANDBOX, call)


# --- snapshots (capability ``snapshot``, see envlayer.snapshot) ---------------------------


def backends_with(capability: Capability) -> list[str]:
    """The installed backends whose class has ``capability`` (a backend that cannot be
    loaded is left out)."""
    from envlayer.discovery.backend_registry import backend_names, load_backend

    names = []
    for name in backend_names():
        try:
            if supports(load_backend(name), capability):
                names.append(name)
        except EnvlayerError:
            continue
    return names


def snapshot_refused(backend: Any, doing: str) -> InvalidArgument:
    """The error for ``doing`` (e.g. "take a snapshot") on a backend without ``snapshot``:
    names the installed backends that have it."""
    having = backends_with(Capability.SNAPSHOT)
    return InvalidArgument(
        "backend",
        f"{absence_note(backend, Capability.SNAPSHOT)}: it cannot {doing}",
        hint=f"use a backend that has snapshot ({', '.join(having) or 'none is installed'}); docs/snapshots.md "
        "lists what each backend carries",
    )


def take_snapshot(env: Environment, name: str | None = None) -> Snapshot:
    """``env``'s sandbox as a :class:`~envlayer.snapshot.Snapshot` named ``name``.

    Raises :class:`InvalidArgument` for a bad name or a backend without ``snapshot``
    (naming those that have it); :class:`~envlayer.errors.EnvironmentClosed` after
    cleanup; the backend's errors as they are (others as :class:`PluginError`)."""
    from envlayer.snapshot import check_snapshot_name

    check_snapshot_name(name)
    if not supports(env, Capability.SNAPSHOT):
        raise snapshot_refused(env, "take a snapshot")
    env._ensure_open()
    with plugin_call(env, "create_snapshot"):
        return env.create_snapshot(name=name)  # type: ignore[attr-defined,no-any-return]


def open_forks(env: Environment, task_ids: Sequence[str], *, snapshot: Snapshot | None = None) -> list[Environment]:
    """New environments for ``task_ids`` (same backend, options and profile as ``env``),
    each started from ``snapshot``, or from a snapshot of ``env`` taken now and removed
    once the forks exist (they keep working; the backend frees its storage when the last
    fork is removed). Created concurrently; on a failure the forks already made are
    removed and the error raised. Raises like :func:`take_snapshot`, and
    :class:`InvalidArgument` for bad task ids."""
    from envlayer.snapshot import check_fork_tasks, create_forks

    tasks = check_fork_tasks(task_ids, env.task_id)
    if not supports(env, Capability.SNAPSHOT):
        raise snapshot_refused(env, "fork")
    cls = type(env)
    snap = snapshot if snapshot is not None else take_snapshot(env)

    def make(task: str) -> Environment:
        with plugin_call(cls, "constructor"):
            return cls(env.options, task_id=task, profile=env.profile, from_snapshot=snap)  # type: ignore[call-arg]

    def discard(fork: Environment) -> None:
        cleanup(fork, purge=True)
        wait_for_cleanup(fork, 60)

    try:
        return create_forks(make, tasks, discard)
    finally:
        if snapshot is None:
            remove_snapshot([(cls, env.options)], snap.id)


def list_snapshots(backends: Sequence[BackendSpec], *, profile: str | None) -> list[SweepOutcome]:
    """The snapshots on every backend that has ``snapshot`` (``profile=None``: all), as
    listing rows (status ``snapshot``)."""

    def call(cls: type[Environment], opts: BaseOptions) -> list[SandboxInfo]:
        return [s.info() for s in cls.list_snapshots(profile=profile, options=opts)]  # type: ignore[attr-defined]

    return _sweep(backends, Capability.SNAPSHOT, call)


def remove_snapshot(backends: Sequence[BackendSpec], snapshot_id: str) -> list[SweepOutcome]:
    """Remove snapshot ``snapshot_id`` from every backend that has it (environments
    already started from it keep working). Each outcome lists what was removed."""

    def call(cls: type[Environment], opts: BaseOptions) -> list[SandboxInfo]:
        return [s.info() for s in cls.remove_snapshot(snapshot_id, options=opts)]  # type: ignore[attr-defined]

    return _sweep(backends, Capability.SNAPSHOT, call)
