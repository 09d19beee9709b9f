"""Listing, removing and reaping envlayer's pods: always by label selector, always in ONE
namespace and (except for listing every profile) ONE profile.

Reaper (:func:`reap`): among pods labelled ``envlayer/managed=1`` AND
``envlayer/profile=<profile>`` in the configured namespace, delete (grace 0):

* Succeeded or Failed pods (activeDeadlineSeconds reached, keep-alive ended) whose end
  (the container's ``finishedAt``; else the pod's ``creationTimestamp``) is older than
  ``max_age`` seconds;
* Pending pods created more than ``max(max_age, startup_timeout)`` seconds ago (stuck:
  image pull back-off, unschedulable, a creator killed while waiting).

* Running private pods (``envlayer/persist=0``) whose owner process, on this host, is gone
  (``envlayer/owner``, see :mod:`envlayer.sandbox.owner`): nobody can attach to them, so they are
  orphans whatever their age. Owners on other hosts are never judged.

Running persist-mode pods are never reaped: another process may attach to them at any
moment; the pod's ``activeDeadlineSeconds`` is their backstop. Pods of other profiles, other
namespaces, or without envlayer's labels are never touched. Deletions run on 8 threads;
one failure is logged and the sweep goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envlayer.environment import SandboxInfo
from envlayer.sandbox.owner import owner_is_dead
from envlayer_kubernetes import naming, pods
from envlayer_kubernetes.client import Cluster, call
from envlayer_kubernetes.options import KubernetesOptions

log = logging.getLogger("envlayer.kubernetes.sweep")
_WORKERS = 8


def list_managed(
    cluster: Cluster, opts: KubernetesOptions, *, profile: str | None, task: str | None = None
) -> list[Any]:
    """Managed pods of ``profile`` (None: every profile) in the cluster's namespace."""
    selector = naming.selector(profile=profile, task=task)
    result = call(
        cluster,
        lambda: cluster.core.list_namespaced_pod(
            cluster.namespace, label_selector=selector, _request_timeout=opts.api_timeout
        ),
        f"listing pods ({selector})",
    )
    return list(result.items or [])


def info_from(pod: Any, namespace: str) -> SandboxInfo:
    """A :class:`SandboxInfo` for one pod."""
    labels = pod.metadata.labels or {}
    created = pod.metadata.creation_timestamp
    status = (pod.status.phase if pod.status else None) or "Unknown"
    if pod.metadata.deletion_timestamp is not None:
        status = "Terminating"
    return SandboxInfo(
        backend="kubernetes",
        id=pod.metadata.name,
        task=labels.get(naming.TASK, ""),
        profile=labels.get(naming.PROFILE, ""),
        status=status,
        created=created.isoformat() if created is not None else "",
        detail={
            "name": pod.metadata.name,
            "namespace": namespace,
            "fingerprint": labels.get(naming.FINGERPRINT, ""),
            "persist": labels.get(naming.PERSIST, ""),
            "image": pod.spec.containers[0].image if pod.spec and pod.spec.containers else "",
        },
    )


def ended_at(pod: Any) -> float | None:
    """Epoch seconds when a finished pod's container ended (else its creation time)."""
    for cs in (pod.status.container_statuses if pod.status else None) or []:
        term = cs.state.terminated if cs.state else None
        if term is not None and term.finished_at is not None:
            return term.finished_at.timestamp()
    created = pod.metadata.creation_timestamp
    return created.timestamp() if created is not None else None


def is_stale(pod: Any, *, max_age: float, pending_age: float, now: float) -> bool:
    """The reaper's rule for one pod (module docstring). Pure apart from ``/proc``."""
    phase = pod.status.phase if pod.status else None
    labels = pod.metadata.labels or {}
    if phase == "Running":
        owner = labels.get(naming.OWNER)
        return labels.get(naming.PERSIST) == "0" and bool(owner) and owner_is_dead(owner)
    if phase in pods.ENDED:
        ended = ended_at(pod)
        return ended is not None and now - ended >= max_age
    if phase == "Pending":
        created = pod.metadata.creation_timestamp
        return created is not None and now - created.timestamp() >= pending_age
    return False


def _parallel(fn: Callable[[Any], SandboxInfo | None], items: list[Any]) -> list[SandboxInfo]:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items)), thread_name_prefix="envlayer-k8s-sweep") as pool:
        return [r for r in pool.map(fn, items) if r is not None]


def delete_all(cluster: Cluster, opts: KubernetesOptions, victims: list[Any], *, dry_run: bool) -> list[SandboxInfo]:
    """Delete ``victims`` (grace 0) in parallel; return the ones deleted (or, with
    ``dry_run``, that would be). A pod already gone is skipped; other failures are logged."""

    def one(pod: Any) -> SandboxInfo | None:
        info = info_from(pod, cluster.namespace)
        if dry_run:
            return info
        try:
            return info if pods.delete(cluster, pod.metadata.name, opts) else None
        except Exception as exc:
            log.warning("could not delete pod %s: %s", pod.metadata.name, exc)
            return None

    return _parallel(one, victims)


def reap(
    cluster: Cluster, opts: KubernetesOptions, *, profile: str, max_age: float, dry_run: bool
) -> list[SandboxInfo]:
    """Delete this profile's stale pods in this namespace (module rules)."""
    now = time.time()
    pending_age = max(max_age, opts.startup_timeout)
    victims = [
        p
        for p in list_managed(cluster, opts, profile=profile)
        if p.metadata.deletion_timestamp is None and is_stale(p, max_age=max_age, pending_age=pending_age, now=now)
    ]
    return delete_all(cluster, opts, victims, dry_run=dry_run)
