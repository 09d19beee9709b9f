"""Creating, attaching to and replacing the sandbox of an environment.

Rules (see docs/backends/modal.md, "Lifecycle"):

* Persist mode: the sandbox is named ``naming.sandbox_name(profile, task)`` in the App.
  ``Sandbox.from_name`` finds a running one; otherwise ``Sandbox.create(name=...)`` is the
  atomic step: ``AlreadyExistsError`` means another process won, and the next round attaches
  to its sandbox. A sandbox found terminated is replaced (its name is free again). One
  found with a different fingerprint tag -> ``recreate`` (terminate it, create ours) or
  ``error``, per ``on_fingerprint_mismatch``.
* Opt-out mode: a private, uniquely named sandbox per environment, tagged with its owner
  process so the reaper can end it when that process dies without cleanup.
* Every tag is passed to ``Sandbox.create`` (see :mod:`envlayer_modal.tags`).
* A name held by a sandbox without envlayer's tags is never touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.owner import owner_label
from envlayer_modal import tags as T
from envlayer_modal.client import Connection, translate
from envlayer_modal.naming import private_name, sandbox_name

SETTLE_TIMEOUT = 120.0
"""How long racing processes may take to settle on one sandbox (a winner's sandbox can be
named before it is ready: its tags are not readable yet)."""
_SETTLE = 0.2


@dataclass
class Attached:
    """A running sandbox ready for commands."""

    sandbox: Any
    id: str
    name: str
    created: bool


def image_for(conn: Connection) -> Any:
    """The SDK image object for the ``image`` option (a registry tag or an ``im-`` id)."""
    image = conn.options.image
    if image.startswith("im-"):
        return conn.modal.Image.from_id(image, client=conn.client)
    return conn.modal.Image.from_registry(image)


def _create(conn: Connection, name: str, tags: dict[str, str]) -> Any:
    """``Sandbox.create`` with every option; raises the SDK's ``AlreadyExistsError`` as is."""
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
            conn.modal.Secret.from_name(n, environment_name=opts.environment_name) for n in opts.secrets
        ]
    return conn.modal.Sandbox.create(**kwargs)


def _lookup(conn: Connection, name: str) -> Any | None:
    """The running sandbox called ``name`` in the App, or None."""
    try:
        return conn.modal.Sandbox.from_name(
            conn.options.app_name, name, environment_name=conn.options.environment_name, client=conn.client
        )
    except conn.modal.exception.NotFoundError:
        return None


def ensure(conn: Connection, *, profile: str, task: str, persist: bool) -> Attached:
    """Attach to, replace or create the sandbox of (profile, task) (module rules).

    Raises :class:`BackendUnavailable`: SDK failures (mapped by
    :func:`envlayer_modal.client.translate`), a name held by a sandbox envlayer did not tag,
    a fingerprint mismatch with ``on_fingerprint_mismatch = "error"``, or a race that does
    not settle.
    """
    exc_mod = conn.modal.exception
    fingerprint = T.sandbox_fingerprint(conn.options)
    if not persist:
        name = private_name(profile, task)
        tags = T.create_tags(profile=profile, task=task, options=conn.options, persist=False, owner=owner_label())
        try:
            sb = _create(conn, name, tags)
        except Exception as exc:
            raise translate(exc, f"creating sandbox {name}") from exc
        return Attached(sb, sb.object_id, name, created=True)
    name = sandbox_name(profile, task)
    deadline = time.monotonic() + SETTLE_TIMEOUT
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
                return Attached(sb, sb.object_id, name, created=True)
            found = sb.get_tags()
            if sb.poll() is not None:
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
            if conn.options.on_fingerprint_mismatch == "error":
                raise BackendUnavailable(
                    f"sandbox {name} was created with different options "
                    f"(fingerprint {found.get(T.FINGERPRINT)}, now {fingerprint})",
                    hint='remove it (`envlayer rm`), or set on_fingerprint_mismatch = "recreate"',
                )
            terminate_quietly(sb)
            time.sleep(_SETTLE)
            continue
        return Attached(sb, sb.object_id, name, created=False)
    raise BackendUnavailable(
        f"could not settle on one sandbox named {name} within {SETTLE_TIMEOUT:.0f} s",
        hint="another process may be recreating it with different options; make their options agree",
    )


def terminate_quietly(sb: Any) -> bool:
    """Terminate ``sb``; True when the call went through. Never raises."""
    try:
        sb.terminate()
        return True
    except Exception:
        return False
