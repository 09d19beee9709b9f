"""The Daytona SDK client, and turning SDK failures into envlayer errors with a hint.

The SDK (``daytona``, ~1 s to import) is read through :mod:`envlayer_daytona.sdk`, which
imports it on first use. One ``Daytona`` client per
:func:`client_identity` (API URL, target, and a digest of the credential, the
organization and the ``.env`` files the SDK reads) is shared by every environment of
the process; the credential itself comes only from where the SDK reads it
(``DAYTONA_API_KEY``, or ``DAYTONA_JWT_TOKEN`` + ``DAYTONA_ORGANIZATION_ID``) and is
never stored in clear, logged or put in a message.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from envlayer.errors import BackendUnavailable
from envlayer.sandbox import teardown_threads
from envlayer.sandbox.client_identity import ClientIdentity, files_digest
from envlayer.sandbox.retry import RETRYABLE_STATUSES, Transient, call_with_retries, retry_after_from_headers
from envlayer_daytona import sdk
from envlayer_daytona.options import DaytonaOptions

log = logging.getLogger("envlayer.daytona")
T = TypeVar("T")
_CLIENTS: dict[ClientIdentity, Any] = {}
_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child must not share pooled connections
    os.register_at_fork(after_in_child=_CLIENTS.clear)

KEY_HINT = "set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID) in the environment"


DEFAULT_API_URL = "https://app.daytona.io/api"
IDENTITY_VARIABLES = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_TARGET")
"""What ``Daytona()`` reads besides the URL (``daytona/_sync/daytona.py`` ``Daytona.__init__``:
the process environment, then ``.env.local`` and ``.env`` in the working directory)."""


def api_url(options: DaytonaOptions, environ: Mapping[str, str] | None = None) -> str:
    """The API URL the SDK will use for ``options`` (``environ``: the process's by default;
    the SDK reads ``DAYTONA_API_URL``, then the deprecated ``DAYTONA_SERVER_URL``, from the
    process environment only)."""
    env = os.environ if environ is None else environ
    return options.api_url or env.get("DAYTONA_API_URL") or env.get("DAYTONA_SERVER_URL") or DEFAULT_API_URL


def client_identity(options: DaytonaOptions, environ: Mapping[str, str], cwd: str) -> ClientIdentity:
    """The API URL, and a digest of the target, the credential variables and the
    ``.env.local`` / ``.env`` files of ``cwd`` (where ``Daytona()`` also looks)."""
    return ClientIdentity.of(
        api_url(options, environ),
        target=options.target,
        variables={name: environ.get(name) for name in IDENTITY_VARIABLES},
        dotenv=files_digest(os.path.join(cwd, name) for name in (".env.local", ".env")),
    )


def has_credential() -> bool:
    """Whether the SDK will find a credential, looked up where ``Daytona()`` looks
    (``daytona/_utils/env.py`` ``DaytonaEnvReader``: the process environment, then
    ``.env.local`` and ``.env`` in the working directory), without importing the SDK (about
    3 s of CPU): ``envlayer ls`` and ``doctor`` ask every installed backend."""
    names = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN")
    if any(os.environ.get(name) for name in names):
        return True
    return any(sdk.dotenv.dotenv_values(path).get(name) for path in (".env.local", ".env") for name in names)


def get_client(options: DaytonaOptions) -> Any:
    """The ``daytona.Daytona`` client for ``options`` and this process's environment and
    directory, shared by every caller with the same :func:`client_identity`.

    Raises :class:`BackendUnavailable` when no credential is set."""
    key = client_identity(options, os.environ, os.getcwd())
    client = _CLIENTS.get(key)
    if client is not None:
        return client
    if not has_credential():
        raise BackendUnavailable("no Daytona credentials while connecting to Daytona", hint=KEY_HINT)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            try:
                client = sdk.daytona.Daytona(sdk.daytona.DaytonaConfig(api_url=api_url(options), target=options.target))
            except Exception as exc:
                raise translate(exc, "connecting to Daytona", options) from exc
            _CLIENTS[key] = client
    return client


def close_all() -> None:
    """Stop the event threads of every client made here (called once, at interpreter exit,
    after the teardown threads: :func:`envlayer.sandbox.teardown_threads.after_teardowns`,
    registered when this module is imported), and wait a moment for each to end. Never raises.

    The 0.226 sync client has no ``close()``, yet it starts a Socket.IO connection
    (``internal/event_dispatcher.py`` ``SyncEventDispatcher.ensure_connected``), a shared
    ``daytona-subscription-expiry`` thread (``internal/event_subscription_manager.py``
    ``SyncEventSubscriptionManager``), and on each last unsubscribe a 30 s
    ``_disconnect_timer``: daemon threads that would still be alive at shutdown.
    ``shutdown()`` and ``disconnect()`` are what those classes offer to end them."""
    with _LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        manager = getattr(client, "_subscription_manager", None)
        dispatcher = getattr(client, "_event_dispatcher", None)
        _quietly(getattr(manager, "shutdown", None))  # unsubscribing all may start the disconnect timer
        threads = [getattr(manager, "_worker", None), getattr(dispatcher, "_disconnect_timer", None)]
        _quietly(getattr(dispatcher, "disconnect", None))  # cancels that timer, ends the connection
        for thread in threads:
            if isinstance(thread, threading.Thread):
                thread.join(1.0)


teardown_threads.after_teardowns(close_all)


def _quietly(method: Callable[[], Any] | None) -> None:
    try:
        if method is not None:
            method()
    except Exception as exc:
        log.debug("closing the Daytona client: %s", exc)


def classify(exc: BaseException) -> Transient | None:
    """:class:`~envlayer.sandbox.retry.Transient` for an SDK error worth retrying: HTTP 429, 502, 503
    or 504 from Daytona, with the server's ``Retry-After``. The SDK keeps both on every error
    it translates from a response (``daytona/common/errors.py`` ``DaytonaError.status_code``
    and ``.headers``; 429 is ``DaytonaRateLimitError``). Anything else: None."""
    if not isinstance(exc, sdk.errors.DaytonaError) or exc.status_code not in RETRYABLE_STATUSES:
        return None
    return Transient(f"HTTP {exc.status_code} ({exc.message[:120]})", retry_after_from_headers(exc.headers))


def retrying(fn: Callable[[], T], doing: str) -> T:
    """``fn()``, retried with backoff while Daytona throttles or is briefly unavailable
    (:func:`classify`). Only for calls that are safe to repeat: reads, a create by unique
    name, start, stop, delete, activity refreshes; never a command's exec."""
    return call_with_retries(fn, classify, doing=doing, logger=log)


def _transport_failure(exc: BaseException) -> bool:
    """True when ``exc`` was caused by the connection itself (refused, reset, DNS, TLS)."""
    errors = sdk.urllib3.exceptions
    transport = (ConnectionError, errors.NewConnectionError, errors.MaxRetryError)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, transport):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _busy(status: int | None, text: str, doing: str) -> BackendUnavailable | None:
    """The error for a service that stayed busy: throttling or an outage that outlasted the
    retries, or a state change that outlasted the wait for it; None for anything else."""
    if status in RETRYABLE_STATUSES:
        return BackendUnavailable(
            f"Daytona answered HTTP {status} while {doing}, also after retrying with backoff: {text}",
            hint="Daytona is throttling this organization or is briefly unavailable; retry in a minute, "
            "and run fewer sandbox operations in parallel",
        )
    if status == 409 and "state change" in text.lower():
        return BackendUnavailable(
            f"the sandbox's state change did not end in time while {doing}: {text}",
            hint="Daytona is still starting, stopping or moving it; retry in a minute, or raise create_timeout",
        )
    return None


def translate(exc: BaseException, doing: str, options: DaytonaOptions) -> BackendUnavailable:
    """The :class:`BackendUnavailable` for an SDK failure while ``doing`` something: what went
    wrong, and in the hint what to set or do about it."""
    status = getattr(exc, "status_code", None)
    text = getattr(exc, "message", None) or str(exc)
    where = api_url(options)
    if isinstance(exc, sdk.errors.DaytonaAuthenticationError) or status == 401:
        if "not found" in text.lower() or status is None:
            return BackendUnavailable(f"no Daytona credentials while {doing}", hint=KEY_HINT)
        return BackendUnavailable(
            f"Daytona at {where} refused the credentials while {doing}: {text}",
            hint="check DAYTONA_API_KEY (a key of this organization, not expired) and api_url / DAYTONA_API_URL",
        )
    if isinstance(exc, sdk.errors.DaytonaConnectionError) or _transport_failure(exc):
        return BackendUnavailable(
            f"cannot reach the Daytona API at {where} while {doing}: {text}",
            hint="check the network and api_url / DAYTONA_API_URL",
        )
    lowered = text.lower()
    busy = _busy(status, text, doing)
    if busy is not None:
        return busy
    if isinstance(exc, sdk.errors.DaytonaForbiddenError) or status == 403:
        if "quota" in lowered or "limit" in lowered or "exceeded" in lowered:
            return BackendUnavailable(
                f"Daytona quota reached while {doing}: {text}",
                hint="remove sandboxes you no longer need (`envlayer rm`, `envlayer reap`), lower cpu / "
                "memory_gib / disk_gib, or raise the organization's limits",
            )
        return BackendUnavailable(
            f"Daytona refused {doing}: {text}", hint="check the API key's permissions (sandboxes: write, delete)"
        )
    if "snapshot" in lowered and ("not found" in lowered or isinstance(exc, sdk.errors.DaytonaNotFoundError)):
        return BackendUnavailable(
            f"Daytona has no snapshot {options.snapshot!r}: {text}",
            hint="create it (`daytona snapshot create`), fix `snapshot`, or set `image` instead",
        )
    if "image" in lowered and "not found" in lowered:
        return BackendUnavailable(
            f"Daytona cannot build from image {options.image!r}: {text}",
            hint="check the image name and that the registry is reachable from Daytona, or use `snapshot`",
        )
    if isinstance(exc, sdk.errors.DaytonaError):
        return BackendUnavailable(
            f"Daytona failed while {doing}: {text}", hint="retry; if it persists, check the sandbox in the dashboard"
        )
    return BackendUnavailable(
        f"unexpected failure while {doing}: {type(exc).__name__}: {text}", hint="retry; report it if it persists"
    )
