"""Creating, attaching to and replacing the sandbox of an environment.

Rules (see docs/backends/modal.md, "Lifecycle"):

* Persist mode: the sandbox is named ``naming.sandbox_name(profile, task)`` in the App.
  ``Sandbox.from_name`` finds a running one; otherwise ``Sandbox.create(name=...)`` is the
  atomic step: ``AlreadyExistsError`` means another process won, and the next round attaches
  to its sandbox. A sandbox found terminated is replaced (its name is free again). One
  found with a different fingerprint tag -> ``recreate`` (terminate it, create ours) or
  ``error``, per ``on_fingerprint_mismatch``; never ``recreate`` for a sandbox another user
  or host created (:func:`refuse_mismatch`).
* Opt-out mode: a private, uniquely named sandbox per environment, tagged with its owner
  process so the reaper can end it when that process dies without cleanup.
* Every tag is passed to ``Sandbox.create`` (see :mod:`envlayer_modal.tags`).
* A name held by a sandbox without envlayer's tags is never touched.

"Is it gone" (:func:`sandbox_ended`) is asked of the control plane, never read from one
error code: after an exec or file error of the kinds the SDK's own filesystem helpers treat
as "sandbox unavailable" (``modal/_utils/sandbox_fs_utils.py``,
``_EXEC_SANDBOX_UNAVAILABLE_ERROR_TYPES``: NotFound, ServiceError, ConnectionError; plus
FAILED_PRECONDITION, ``SandboxTerminatedError`` and the bare ``SandboxFilesystemError`` those
helpers raise for an exec failure they do not expect), ``sb.poll()`` (``SandboxWaitV2`` with
timeout 0) says whether the sandbox has ended. The command router's answer for an ended
sandbox depends on whether its worker is still there (NOT_FOUND) or not (UNAVAILABLE,
retried by the client for about 10 s and then raised as ``ServiceError``): see the comment
in ``exec_wait`` of ``modal/sandbox/_task_command_router_client.py``. :func:`recover`
then replaces it (persist mode) or raises (a private environment).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

from envlayer.errors import BackendUnavailable, InvalidArgument
from envlayer.sandbox import recorded_options
from envlayer.sandbox.owner import owner_label
from envlayer_modal import sdk
from envlayer_modal import tags as T
from envlayer_modal.client import Connection, control, translate
from envlayer_modal.naming import private_name, sandbox_name

SETTLE_TIMEOUT = 120.0
"""How long racing processes may take to settle on one sandbox (a winner's sandbox can be
named before it is ready: its tags are not readable yet)."""
_SETTLE = 0.2
RECREATED = "sandbox recreated"
"""``ExecResult.recovered`` of the call that replaced an ended sandbox."""
log = logging.getLogger("envlayer.modal")


class NotStarted(Exception):
    """The sandbox had ended when a command was to start (the exec or the write of its
    script was refused and the control plane reports the sandbox ended): the command did
    not run, so replacing the sandbox and running it there runs it once."""

    def __init__(self, sandbox_id: str, code: int) -> None:
        super().__init__(f"sandbox {sandbox_id} has ended (exit code {code})")
        self.sandbox_id = sandbox_id
        self.code = code


def ended_error(error: BaseException, conn: Connection, attached: Attached) -> NotStarted | None:
    """After the SDK error ``error`` on ``attached``: :class:`NotStarted` when it may mean
    "gone" (:func:`maybe_gone`) and the control plane confirms the sandbox ended, else None."""
    if not maybe_gone(error):
        return None
    code = sandbox_ended(attached.sandbox)
    return None if code is None else NotStarted(attached.id, code)


@dataclass
class Attached:
    """A running sandbox ready for commands."""

    sandbox: Any
    id: str
    name: str
    created: bool
    replaced: str = ""
    """When a sandbox with other options was replaced to make this one: the notice saying so."""


def image_for(conn: Connection) -> Any:
    """The SDK image object: the snapshot a fork starts from, else the one built from
    ``dockerfile``, else the ``image`` option (a registry tag or an ``im-`` id)."""
    if conn.snapshot_image is not None:
        return conn.snapshot_image
    if conn.built_image is not None:
        return conn.built_image
    image = conn.options.image
    if image.startswith("im-"):
        return sdk.modal.Image.from_id(image, client=conn.client)
    return sdk.modal.Image.from_registry(image)


def _create(conn: Connection, name: str, tags: dict[str, str]) -> Any:
    """``Sandbox.create`` with every option (retried when throttled: the name makes it
    idempotent); raises the SDK's ``AlreadyExistsError`` as is."""
    opts = conn.options
    kwargs: dict[str, Any] = {
        "app": conn.app,
        "image": image_for(conn),
        "name": name,
        "tags": tags,
        "timeout": opts.sandbox_timeout,
        "idle_timeout": opts.idle_timeout,
        "workdir": opts.workdir,
        "client": conn.client,
    }
    for key in ("cpu", "memory", "gpu", "cloud"):
        if getattr(opts, key) is not None:
            kwargs[key] = getattr(opts, key)
    if opts.region:
        kwargs["region"] = [r.strip() for r in opts.region.split(",") if r.strip()]
    if opts.block_network:
        kwargs["block_network"] = True
    if opts.secrets:
        kwargs["secrets"] = [
            sdk.modal.Secret.from_name(n, environment_name=opts.environment_name) for n in opts.secrets
        ]
    try:
        return control(lambda: sdk.modal.Sandbox.create(**kwargs), f"creating sandbox {name}")
    except sdk.exception.NotFoundError as exc:
        if conn.snapshot_image is None:
            raise
        raise InvalidArgument(
            "from_snapshot",
            f"snapshot {conn.snapshot_image.object_id} no longer exists ({exc})",
            hint="list them with `envlayer snapshots ls`",
        ) from None


def _lookup(conn: Connection, name: str) -> Any | None:
    """The running sandbox called ``name`` in the App, or None."""
    try:
        return control(
            lambda: sdk.modal.Sandbox.from_name(
                conn.options.app_name, name, environment_name=conn.options.environment_name, client=conn.client
            ),
            f"looking up sandbox {name}",
        )
    except sdk.exception.NotFoundError:
        return None


def ensure(conn: Connection, *, profile: str, task: str, persist: bool) -> Attached:
    """Attach to, replace or create the sandbox of (profile, task) (module rules).

    Raises :class:`BackendUnavailable`: SDK failures (mapped by
    :func:`envlayer_modal.client.translate`), a name held by a sandbox envlayer did not tag,
    a fingerprint mismatch with ``on_fingerprint_mismatch = "error"``, or a race that does
    not settle.
    """
    exc_mod = sdk.exception
    fingerprint = T.sandbox_fingerprint(conn.options)
    if not persist:
        name = private_name(profile, task)
        tags = T.create_tags(profile=profile, task=task, options=conn.options, persist=False, owner=owner_label())
        try:
            try:
                sb = _create(conn, name, tags)
            except exc_mod.AlreadyExistsError:
                sb = _lookup(conn, name)  # a retried create whose first attempt went through
                if sb is None:
                    raise
        except Exception as exc:
            raise translate(exc, f"creating sandbox {name}") from exc
        return Attached(sb, sb.object_id, name, created=True)
    name = sandbox_name(profile, task)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    replaced = ""
    while time.monotonic() < deadline:
        try:
            sb = _lookup(conn, name)
            if sb is None:
                tags = T.create_tags(profile=profile, task=task, options=conn.options, persist=True, owner=None)
                try:
                    sb = _create(conn, name, tags)
                except exc_mod.AlreadyExistsError:
                    time.sleep(_SETTLE)
                    continue  # lost the race: attach to the winner on the next round
                return Attached(sb, sb.object_id, name, created=True, replaced=replaced)
            found = control(sb.get_tags, f"reading the tags of {name}")
            if control(sb.poll, f"polling {name}") is not None:
                time.sleep(_SETTLE)  # terminated; its name is released shortly
                continue
        except exc_mod.NotFoundError:
            time.sleep(_SETTLE)
            continue  # not ready yet, or terminated between lookup and inspection
        except Exception as exc:
            raise translate(exc, f"creating or attaching to sandbox {name}") from exc
        if found.get(T.MANAGED) != "1":
            raise BackendUnavailable(
                f"a sandbox named {name} exists in app {conn.options.app_name!r} but is not managed by envlayer",
                hint=f"terminate it (`modal sandbox terminate {sb.object_id}`) or set another app_name",
            )
        if found.get(T.FINGERPRINT) != fingerprint:
            replaced = refuse_mismatch(conn, name, sb.object_id, found, fingerprint)
            terminate_quietly(sb)
            time.sleep(_SETTLE)
            continue
        return Attached(sb, sb.object_id, name, created=False)
    raise BackendUnavailable(
        f"could not settle on one sandbox named {name} within {SETTLE_TIMEOUT:.0f} s",
        hint="another process may be recreating it with different options; make their options agree",
    )


def refuse_mismatch(conn: Connection, name: str, sandbox_id: str, found: dict[str, str], fingerprint: str) -> str:
    """Raise :class:`BackendUnavailable` unless the running sandbox ``name``, made with
    other options, may be replaced: ``on_fingerprint_mismatch = "recreate"`` AND this user
    on this host created it (tag ``envlayer.creator``; names are shared by the whole Modal
    workspace, so another user's or machine's sandbox is never terminated). Returns the
    notice of its replacement (logged); raises
    :class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer` under ``"error"``."""
    theirs = found.get(T.FINGERPRINT)
    differs = f"sandbox {name} was created with different options (fingerprint {theirs}, now {fingerprint})"
    requested = recorded_options.record_of(conn.options, T.SHAPING_OPTIONS)
    settle = functools.partial(
        recorded_options.settle_mismatch,
        what=f"sandbox {name}",
        found=found.get(T.OPTIONS),
        requested=requested,
        logger=log,
    )
    if conn.options.on_fingerprint_mismatch == "error":
        settle(mode="error")
    creator, me = found.get(T.CREATOR), T.creator_label()
    if creator != me:
        raise BackendUnavailable(
            f"{differs} by {creator or 'an unknown user (no envlayer.creator tag)'}, not by {me}: "
            "it is not terminated, since sandbox names are shared by everyone in the Modal workspace",
            hint="use the same options as its creator, another profile or app_name, or, if it is yours, "
            f"remove it (`envlayer rm TASK --force`, `modal sandbox terminate {sandbox_id}`)",
        )
    return settle(mode="recreate")


def terminate_quietly(sb: Any) -> bool:
    """Terminate ``sb``; True when the call went through. Never raises."""
    try:
        control(sb.terminate, f"terminating {sb.object_id}")
        return True
    except Exception:
        return False


def maybe_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is an SDK error that can mean "the sandbox is gone" (module
    docstring); only :func:`sandbox_ended` decides."""
    E = sdk.exception
    kinds = (E.NotFoundError, E.ConflictError, E.SandboxTerminatedError, E.ServiceError, E.ConnectionError)
    # The filesystem helpers turn an exec failure they do not expect (FAILED_PRECONDITION
    # among them) into a bare SandboxFilesystemError ("An unexpected error occurred"):
    # ``translate_exec_unexpected_error`` in ``modal/_utils/sandbox_fs_utils.py``.
    return isinstance(exc, kinds) or type(exc) is E.SandboxFilesystemError


def sandbox_ended(sb: Any) -> int | None:
    """The exit code of ``sb`` when the control plane reports it ended (``sb.poll()``:
    ``SandboxWaitV2`` with timeout 0; a sandbox id it no longer knows counts as ended,
    code -1); None while it runs or when the control plane cannot be asked. Never raises."""
    try:
        return control(sb.poll, f"polling {sb.object_id}")  # type: ignore[no-any-return]
    except sdk.exception.NotFoundError:
        return -1
    except Exception:
        return None


def detach_quietly(sb: Any) -> None:
    """Release this process's connection to ``sb`` (its command-router channel and the
    SDK's retry loops still waiting on it). Never raises."""
    try:
        sb.detach()
    except Exception:
        pass


def recover(
    conn: Connection, gone: Attached, code: int, *, profile: str, task: str, persist: bool
) -> tuple[Attached, str]:
    """Replace the ended sandbox ``gone`` (exit ``code``): persist mode attaches again,
    which creates a new sandbox under the same name, with a WARNING saying what was lost;
    returns it and what was done (``"sandbox recreated"``, for ``ExecResult.recovered``).
    A private environment raises :class:`BackendUnavailable`: its sandbox was its whole
    state, and a new one would be another environment."""
    detach_quietly(gone.sandbox)
    if not persist:
        raise BackendUnavailable(
            f"the private sandbox {gone.id} of task {task!r} has ended (exit code {code}); "
            "it is not recreated (persist_across_processes = false)",
            hint="create a new environment; its files and processes are gone",
        )
    fresh = ensure(conn, profile=profile, task=task, persist=True)
    log.warning(
        "sandbox %s of task %r had ended (exit code %s); replaced by %s: files and processes of the old one are gone",
        gone.id,
        task,
        code,
        fresh.id,
    )
    return fresh, RECREATED
