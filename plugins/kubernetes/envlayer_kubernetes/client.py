"""Connecting to the cluster: kubeconfig or in-cluster config, the API handle, error mapping.

The ``kubernetes`` client is read through :mod:`envlayer_kubernetes.sdk` (imported on first use).
One :class:`Cluster` per :func:`client_identity` (config source, kubeconfig files and a
digest of their content, context, namespace; in a pod, the service account's token) is
kept per process, so callers of one broker with different clusters or users never share
one, and dropped in a forked child (the urllib3 pool must not be shared across ``fork``).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from envlayer.errors import BackendUnavailable
from envlayer.sandbox.client_identity import ClientIdentity, file_digest, files_digest
from envlayer.sandbox.retry import RETRYABLE_STATUSES, Transient, call_with_retries, retry_after_from_headers
from envlayer_kubernetes import kubeconfig, sdk
from envlayer_kubernetes.options import KubernetesOptions

T = TypeVar("T")
log = logging.getLogger("envlayer.kubernetes")
SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
RBAC_HINT = "grant the Role in docs/backends/kubernetes.md (pods: create/get/list/delete, pods/exec: create, get)"


@dataclass
class Cluster:
    """An API client bound to one cluster and namespace."""

    core: Any
    """``kubernetes.client.CoreV1Api``."""
    namespace: str
    where: str
    """Human-readable origin, for messages: ``kubeconfig <path> context <name>`` or ``in-cluster``."""
    protocol: str | None = None
    """The exec subprotocol the server chose last (``v5.channel.k8s.io`` or ``v4...``);
    None until the first exec."""


_CACHE: dict[tuple[Any, ...], tuple[int, Cluster]] = {}
_CACHE_LOCK = threading.Lock()


def _kubeconfig_paths(opts: KubernetesOptions, environ: Mapping[str, str]) -> list[str]:
    """The kubeconfig files to merge: the ``kubeconfig`` option (one file, even when it
    does not exist, so the error names it), else every existing file of ``$KUBECONFIG``,
    else ``~/.kube/config`` if it exists."""
    if opts.kubeconfig:
        return [os.path.expanduser(opts.kubeconfig)]
    listed = kubeconfig.split_paths(environ.get("KUBECONFIG", ""))
    if listed:
        return listed
    default = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".kube", "config")
    return [default] if os.path.exists(default) else []


def _source(opts: KubernetesOptions, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(``kubeconfig`` or ``in_cluster``, the kubeconfig files joined by ``os.pathsep``)
    per ``config_source`` (``environ``: the process's by default)."""
    environ = os.environ if environ is None else environ
    paths = _kubeconfig_paths(opts, environ)
    path = os.pathsep.join(paths) or None
    if opts.config_source == "in_cluster":
        return "in_cluster", None
    if opts.config_source == "kubeconfig" or path is not None:
        if path is None:
            raise BackendUnavailable(
                "no kubeconfig found (option kubeconfig, $KUBECONFIG, ~/.kube/config)",
                hint="point KUBECONFIG at your cluster's kubeconfig, or set config_source = in_cluster inside a pod",
            )
        return "kubeconfig", path
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "in_cluster", None
    raise BackendUnavailable(
        "no Kubernetes configuration: no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a pod",
        hint="set KUBECONFIG (or the kubeconfig option) to your cluster's kubeconfig",
    )


def _build(opts: KubernetesOptions, source: str, path: str | None) -> Cluster:
    try:
        if source == "in_cluster":
            configuration = sdk.client.Configuration()
            sdk.config.load_incluster_config(client_configuration=configuration)
            api_client = sdk.client.ApiClient(configuration)
            namespace = opts.namespace or _read(SA_NAMESPACE) or "default"
            where = "in-cluster service account"
        else:
            loaded = kubeconfig.load((path or "").split(os.pathsep), opts.context)
            api_client = loaded.api_client
            namespace = opts.namespace or (loaded.context.get("context") or {}).get("namespace") or "default"
            where = f"kubeconfig {path} context {loaded.context.get('name', '?')}"
    except (sdk.config_exception.ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise BackendUnavailable(
            f"cannot load the Kubernetes configuration ({source}{' ' + path if path else ''}): {exc}",
            hint="check the kubeconfig file and the context name (`kubectl config get-contexts`)",
        ) from exc
    return Cluster(core=sdk.client.CoreV1Api(api_client), namespace=namespace, where=where)


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def client_identity(opts: KubernetesOptions, environ: Mapping[str, str]) -> ClientIdentity:
    """Where the configuration comes from (the kubeconfig files and context, or the pod's
    service account), and a digest of the files' content and the namespace. Raises
    :class:`BackendUnavailable` when there is no configuration."""
    source, path = _source(opts, environ)
    if source == "in_cluster":
        host = f"{environ.get('KUBERNETES_SERVICE_HOST', '?')}:{environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        return ClientIdentity.of(f"in-cluster {host}", token=file_digest(SA_TOKEN), namespace=opts.namespace)
    files = (path or "").split(os.pathsep)
    where = f"kubeconfig {path}" + (f" context {opts.context}" if opts.context else "")
    return ClientIdentity.of(where, content=files_digest(files), context=opts.context, namespace=opts.namespace)


def connect(opts: KubernetesOptions) -> Cluster:
    """The :class:`Cluster` for ``opts`` and this process's environment, shared by every
    caller with the same :func:`client_identity` (cached per process). Raises
    :class:`BackendUnavailable` when no configuration is found or it cannot be loaded."""
    source, path = _source(opts)
    key = (source, path, client_identity(opts, os.environ))
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached[0] == os.getpid():
            return cached[1]
        cluster = _build(opts, source, path)
        _CACHE[key] = (os.getpid(), cluster)
        return cluster


def status_of(exc: BaseException) -> int:
    """The HTTP status of a client exception (0 when it never got an answer)."""
    return int(getattr(exc, "status", 0) or 0)


def message_of(exc: BaseException) -> str:
    """The API server's message from an ``ApiException`` body, else ``str(exc)``."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)[:500]
        except (ValueError, AttributeError):
            return str(body)[:500]
    return str(getattr(exc, "reason", None) or exc)[:500]


ADMISSION_REJECTIONS: tuple[tuple[str, str, str], ...] = (
    (
        "violates PodSecurity",
        "the namespace's Pod Security admission",
        'set security_preset = "restricted" and run_as_user (e.g. 65534), or use a namespace whose '
        "pod-security.kubernetes.io/enforce level allows the pod",
    ),
    (
        "quota",
        "the namespace's ResourceQuota",
        "remove sandboxes you no longer need (`envlayer ls`, `envlayer rm TASK --force`), set requests/limits "
        "if the quota requires them, or ask for a larger quota (`kubectl describe resourcequota`)",
    ),
    (
        "per Container",
        "the namespace's LimitRange",
        "set requests/limits within the LimitRange (`kubectl describe limitrange`)",
    ),
    (
        "denied the request",
        "an admission webhook or policy",
        "change the options the policy objects to (its message above), or ask the cluster admin",
    ),
)
"""(text in the API server's message, who rejected the pod, what to do) for 403/422
answers that are admission or quota rejections, not missing permissions. Texts from
k8s.io/pod-security-admission (``violates PodSecurity "restricted:latest"``),
plugin/pkg/admission/resourcequota (``exceeded quota``, ``failed quota``),
plugin/pkg/admission/limitranger (``maximum cpu usage per Container is``) and
the admission webhooks (``admission webhook "x" denied the request``)."""


def rejection(exc: BaseException, cluster: Cluster, doing: str) -> BackendUnavailable | None:
    """The error for a 403/422 that an admission controller or a quota gave, or None."""
    status = status_of(exc)
    if status not in (403, 422):
        return None
    message = message_of(exc)
    for needle, who, hint in ADMISSION_REJECTIONS:
        if needle in message:
            return BackendUnavailable(
                f"{who} rejected {doing} in namespace {cluster.namespace!r} ({status}): {message}", hint=hint
            )
    return None


def certificate_refusal(exc: BaseException) -> str | None:
    """Why TLS verification refused the server's certificate, when that is what ``exc``
    (an urllib3 ``MaxRetryError`` wrapping an ``SSLError``, or a chained exception)
    comes from; None otherwise."""
    seen: set[int] = set()
    pending: list[object] = [exc]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return str(current.verify_message or current.reason or current)
        pending += [getattr(current, "reason", None), current.__cause__, current.__context__, *current.args]
    return None


def unavailable(exc: BaseException, cluster: Cluster, doing: str) -> BackendUnavailable:
    """A :class:`BackendUnavailable` for a failed API call, with what to do about it."""
    status = status_of(exc)
    rejected = rejection(exc, cluster, doing)
    if rejected is not None:
        return rejected
    if status in (401, 403):
        return BackendUnavailable(
            f"the Kubernetes API refused {doing} in namespace {cluster.namespace!r} ({status}): {message_of(exc)}",
            hint=RBAC_HINT if status == 403 else "refresh the kubeconfig's credentials",
        )
    if status in RETRYABLE_STATUSES:
        return BackendUnavailable(
            f"the Kubernetes API answered {status} to {doing}, also after retrying: {message_of(exc)}",
            hint="the API server is throttling this client or overloaded (or a proxy in front of it fails); "
            "retry later, or ask the cluster admin about API priority and fairness limits",
        )
    if status:
        return BackendUnavailable(
            f"the Kubernetes API answered {status} to {doing}: {message_of(exc)}",
            hint="check the pod and the cluster's events (`kubectl get events -n " + cluster.namespace + "`)",
        )
    untrusted = certificate_refusal(exc)
    if untrusted is not None:
        return BackendUnavailable(
            f"the Kubernetes API ({cluster.where}) answered, but its certificate is not signed by the CA the "
            f"kubeconfig trusts ({untrusted}) while {doing}",
            hint="the kubeconfig's certificate-authority(-data) is stale (the cluster was re-created or its CA "
            "rotated) or belongs to another cluster: fetch a fresh kubeconfig (your provider's get-credentials, "
            "`kind export kubeconfig`, ...)",
        )
    return BackendUnavailable(
        f"cannot reach the Kubernetes API ({cluster.where}) while {doing}: {type(exc).__name__}: {str(exc)[:300]}",
        hint="check that the cluster is up and the kubeconfig's server address is right (`kubectl cluster-info`)",
    )


def transient(exc: BaseException) -> Transient | None:
    """A throttle (429, with its ``Retry-After``) or a gateway's or the API server's
    momentary failure (502/503/504) from an ``ApiException`` or a refused exec handshake;
    None for anything else."""
    status = status_of(exc)
    if status not in RETRYABLE_STATUSES:
        return None
    reason = str(getattr(exc, "reason", "") or "")
    return Transient(f"{status} {reason}".strip(), retry_after_from_headers(getattr(exc, "headers", None)))


def call(cluster: Cluster, fn: Callable[[], T], doing: str, *, passthrough: tuple[int, ...] = ()) -> T:
    """Run one API call that is safe to repeat (a read, a list, a delete, a create by
    unique name: a repeated create answers 409, which callers handle). A throttle or a
    momentary 502/503/504 is retried with backoff (:func:`envlayer.sandbox.retry.call_with_retries`:
    bounded, ``Retry-After`` honoured, each retry logged). A client exception whose status
    is in ``passthrough`` is re-raised as is (the caller handles it, e.g. 404/409); any
    other failure becomes :class:`BackendUnavailable`."""
    try:
        return call_with_retries(fn, transient, doing=doing, logger=log)
    except sdk.exceptions.ApiException as exc:
        if exc.status in passthrough:
            raise
        raise unavailable(exc, cluster, doing) from exc
    except (sdk.urllib3.exceptions.HTTPError, OSError) as exc:
        raise unavailable(exc, cluster, doing) from exc
