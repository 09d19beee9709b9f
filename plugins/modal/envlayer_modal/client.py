"""Connect to Modal and turn SDK errors into envlayer's.

The SDK is read through :mod:`envlayer_modal.sdk`, which imports it on first use:
``import envlayer_modal`` and listing backends import no part of it. :func:`connect` is
called by the environment's constructor and by the class-level lifecycle methods.

One SDK client per :func:`client_identity` (the server URL, and a digest of the credential
variables, the config file and profile), made by :func:`sdk_client` from this process's
variables: never the SDK's process-wide ``Client.from_env()`` singleton, which would serve
every later caller of a session broker with the first caller's server and token.

Error mapping (:func:`translate`), each with a hint naming what to do:

* no credentials / refused credentials -> :class:`BackendUnavailable` (``modal token new``,
  ``MODAL_TOKEN_ID`` / ``MODAL_TOKEN_SECRET``); when no credential can be there at all
  (:func:`may_have_credential`) this is said without importing the SDK;
* the API unreachable -> :class:`BackendUnavailable`, found by a TCP probe bounded by
  ``connect_timeout`` before the SDK's own minute-long retries;
* an image Modal cannot build or pull -> :class:`BackendUnavailable` naming the image;
* quota and rate limits (``RESOURCE_EXHAUSTED``) -> :class:`BackendUnavailable` saying to wait
  or free sandboxes (``envlayer reap`` / ``envlayer rm``).

Throttling and transient failures of the control plane (:func:`control`): the SDK retries
DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED, INTERNAL and UNKNOWN 3 times within about 0.7 s,
and RESOURCE_EXHAUSTED only when the server attaches a retry policy
(``modal/_utils/grpc_utils.py``, ``RETRYABLE_GRPC_STATUS_CODES``, ``DEFAULT_MAX_RETRIES`` and
``_retry_transient_errors``). What it then raises (``ResourceExhaustedError``,
``ServiceError``, ``InternalError``, ``ConnectionError``) is retried once more with backoff by
:func:`envlayer.sandbox.retry.call_with_retries`, bounded by :data:`CONTROL_POLICY` and logged, for
calls that are safe to repeat (lookups, listing, tags, polls, terminate, a create by unique
name). Starting a command is retried only when throttled (:func:`throttled`): the router
refused it before running anything, so it still runs once. So a call never fails on the
first throttle, and a quota that stays exhausted still fails within about 10 s.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from envlayer.errors import BackendUnavailable, EnvlayerError
from envlayer.sandbox.client_identity import ClientIdentity, file_digest
from envlayer.sandbox.retry import RetryPolicy, Transient, call_with_retries
from envlayer_modal import sdk
from envlayer_modal.options import ModalOptions

DEFAULT_SERVER_URL = "https://api.modal.com"
CREDENTIALS_HINT = (
    "run `modal token new`, or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (a token from modal.com/settings/tokens)"
)
CONTROL_POLICY = RetryPolicy(attempts=5, base_delay=0.5, max_delay=4.0, budget=10.0)
"""Retries of a control-plane call after the SDK's own (module docstring)."""
_LOCK = threading.Lock()
T = TypeVar("T")
log = logging.getLogger("envlayer.modal")
_PROBED: set[str] = set()
_CLIENTS: dict[ClientIdentity, Any] = {}
_FROM_ENV: list[ClientIdentity] = []
"""The identity the SDK's ``Client.from_env()`` singleton was made for, once made."""


@dataclass
class Connection:
    """An SDK client and the App envlayer's sandboxes live in."""

    client: Any
    app: Any
    options: ModalOptions
    snapshot_image: Any = None
    """The Image of the snapshot new sandboxes start from (a fork), else None."""
    built_image: Any = None
    """The Image built from the ``dockerfile`` option (:mod:`envlayer_modal.image`), else None."""

    @property
    def app_id(self) -> str:
        return str(self.app.app_id)


def server_urls() -> list[str]:
    """The control-plane URLs the SDK will use (``MODAL_SERVER_URL`` or its config)."""
    raw = os.environ.get("MODAL_SERVER_URL")
    if raw is None:
        try:
            raw = str(sdk.modal.config.config.get("server_url"))
        except Exception:
            raw = DEFAULT_SERVER_URL
    return [u.strip() for u in raw.split(",") if u.strip()]


def probe(urls: list[str], timeout: float) -> None:
    """Raise :class:`BackendUnavailable` unless one of ``urls`` accepts a TCP connection
    within ``timeout`` seconds. Each URL is probed once per process."""
    errors = []
    for url in urls:
        if url in _PROBED:
            return
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == "unix":
            return
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname or "", port), timeout=timeout).close()
        except OSError as exc:
            errors.append(f"{url}: {exc}")
            continue
        _PROBED.add(url)
        return
    raise BackendUnavailable(
        "the Modal API is unreachable (" + "; ".join(errors) + ")",
        hint="check the network or proxy; MODAL_SERVER_URL overrides the address",
    )


CREDENTIAL_VARIABLES = (
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "MODAL_OAUTH_REFRESH_TOKEN",
    "MODAL_OAUTH_CLIENT_ID",
    "MODAL_OAUTH_CLIENT_SECRET",
    "MODAL_OAUTH_JWT_KEY",
)
"""The variables the SDK reads a credential from (``modal/client.py`` ``_Client.from_env``)."""


def may_have_credential() -> bool:
    """False only when the SDK is sure to find no credential, decided without importing it
    (0.4-0.8 s of CPU: ``envlayer ls``, ``reap`` and ``doctor`` ask every installed backend).

    ``_Client.from_env`` (``modal/client.py``) reads the token or OAuth settings from the
    variables in :data:`CREDENTIAL_VARIABLES`, else from the active profile of the config file
    (``modal/config.py``: ``MODAL_CONFIG_PATH``, else ``~/.modal.toml``), and inside a Modal
    container (``MODAL_IS_REMOTE=1``) needs none. With none of these it raises ``AuthError``
    ("Token missing"). Whenever one of them is there, the SDK decides."""
    if os.environ.get("MODAL_IS_REMOTE") == "1" or any(os.environ.get(name) for name in CREDENTIAL_VARIABLES):
        return True
    return os.path.exists(os.environ.get("MODAL_CONFIG_PATH") or os.path.expanduser("~/.modal.toml"))


def client_identity(environ: Mapping[str, str]) -> ClientIdentity:
    """The server URL (``MODAL_SERVER_URL``, else the config file's or the default), and a
    digest of the credential variables, ``MODAL_IS_REMOTE``, the profile and the config
    file (path and content): what ``_Client.from_env`` reads (``modal/client.py``,
    ``modal/config.py``)."""
    config_path = environ.get("MODAL_CONFIG_PATH") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".modal.toml"
    )
    return ClientIdentity.of(
        environ.get("MODAL_SERVER_URL") or "(config file or default)",
        variables={name: environ.get(name) for name in (*CREDENTIAL_VARIABLES, "MODAL_IS_REMOTE", "MODAL_PROFILE")},
        config=(config_path, file_digest(config_path)),
    )


def sdk_client() -> Any:
    """The SDK client for this process's variables, one per :func:`client_identity`.

    A token (``MODAL_TOKEN_ID`` / ``MODAL_TOKEN_SECRET``, else the active profile of the
    config file) gets a client of its own, made as ``Client.from_env`` makes one
    (``Client.from_credentials``: the server URL from the same config). OAuth settings and
    a Modal container's own identity exist only through ``Client.from_env()``, a
    process-wide singleton: it serves the first identity that asks; another one is refused.
    A config file or profile other than the one the SDK read at import is refused too (the
    SDK reads the file once per process). Raises :class:`BackendUnavailable`, or the SDK's
    errors."""
    identity = client_identity(os.environ)
    with _LOCK:
        client = _CLIENTS.get(identity)
        if client is None:
            client = _CLIENTS[identity] = _new_client(identity)
    return client


def _new_client(identity: ClientIdentity) -> Any:
    config = sdk.modal.config
    if not any(os.environ.get(name) for name in CREDENTIAL_VARIABLES):
        path = os.environ.get("MODAL_CONFIG_PATH") or os.path.expanduser("~/.modal.toml")
        profile = os.environ.get("MODAL_PROFILE") or config._profile
        if (path, profile) != (config.user_config_path, config._profile):
            raise BackendUnavailable(
                f"this process read Modal's config file {config.user_config_path} (profile {config._profile}), "
                f"not {path} (profile {profile}); the SDK reads it once per process",
                hint="set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or run with --no-broker",
            )
    token_id, token_secret = config.config.get("token_id"), config.config.get("token_secret")
    if token_id and token_secret and os.environ.get("MODAL_IS_REMOTE") != "1":
        return sdk.modal.Client.from_credentials(token_id, token_secret)
    if _FROM_ENV:
        raise BackendUnavailable(
            "Modal's OAuth or in-container credentials have one client per process, and this process "
            "(a session broker) already serves other credentials",
            hint="run with --no-broker, or use a token (MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)",
        )
    _FROM_ENV.append(identity)
    return sdk.modal.Client.from_env()


def connect(options: ModalOptions) -> Connection:
    """Check for a credential, probe the API, build the SDK client from the environment,
    look up (or create) the App. Raises :class:`BackendUnavailable` (see the module
    docstring)."""
    if not may_have_credential():
        raise BackendUnavailable("no Modal credentials while connecting to Modal", hint=CREDENTIALS_HINT)
    probe(server_urls(), options.connect_timeout)
    modal = sdk.modal
    try:
        client = sdk_client()
        app = control(
            lambda: modal.App.lookup(
                options.app_name, create_if_missing=True, environment_name=options.environment_name, client=client
            ),
            f"looking up app {options.app_name!r}",
        )
    except Exception as exc:
        raise translate(exc, f"connecting to Modal (app {options.app_name!r})") from exc
    return Connection(client, app, options)


def transient(exc: BaseException) -> Transient | None:
    """A control-plane error worth another try after the SDK's own retries, or None."""
    if isinstance(exc, sdk.exception.ResourceExhaustedError):
        return Transient(f"throttled (RESOURCE_EXHAUSTED: {exc})")
    if isinstance(exc, (sdk.exception.ServiceError, sdk.exception.InternalError, sdk.exception.ConnectionError)):
        return Transient(f"{type(exc).__name__}: {exc}")
    return None


def throttled(exc: BaseException) -> Transient | None:
    """Only a throttle (``RESOURCE_EXHAUSTED``): a refusal before any work was done."""
    return transient(exc) if isinstance(exc, sdk.exception.ResourceExhaustedError) else None


def control(fn: Callable[[], T], doing: str, classify: Callable[[BaseException], Transient | None] = transient) -> T:
    """``fn()``, an idempotent control-plane call, retried while ``classify`` (by default
    :func:`transient`) says so (module docstring); the last error is raised unchanged.
    Starting a command, which is not idempotent, passes :func:`throttled`."""
    return call_with_retries(fn, classify, doing=f"modal: {doing}", policy=CONTROL_POLICY, logger=log)


def translate(exc: BaseException, doing: str) -> Exception:
    """The envlayer error for an SDK exception raised while ``doing`` something (an
    envlayer error, such as a fork's missing snapshot, as it is)."""
    if isinstance(exc, EnvlayerError):
        return exc

    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, sdk.exception.AuthError):
        return BackendUnavailable(f"Modal refused the credentials while {doing}: {text}", hint=CREDENTIALS_HINT)
    if isinstance(exc, sdk.exception.PermissionDeniedError):
        return BackendUnavailable(
            f"Modal denied permission while {doing}: {text}",
            hint="check that the token's workspace may create sandboxes in this App and Environment",
        )
    if isinstance(exc, sdk.exception.ResourceExhaustedError):
        return BackendUnavailable(
            f"Modal quota or rate limit reached while {doing}: {text}",
            hint="wait and retry, or free sandboxes (`envlayer reap --backend modal`, `envlayer rm`)",
        )
    if isinstance(exc, (sdk.exception.ImageBuildError, sdk.exception.RemoteError)) and "image" in text.lower():
        return BackendUnavailable(
            f"Modal could not provide the image while {doing}: {text}",
            hint="check the `image` option: a public registry tag (e.g. python:3.11-slim) or an `im-...` id",
        )
    if isinstance(exc, (sdk.exception.ConnectionError, OSError)):
        return BackendUnavailable(
            f"lost the connection to Modal while {doing}: {text}",
            hint="check the network; the command may not have run",
        )
    return BackendUnavailable(f"Modal failed while {doing}: {type(exc).__name__}: {text}", hint="retry; see the log")
