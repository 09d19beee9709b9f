"""The sandbox pod: its manifest, the race-free create-or-attach, waiting for it to run,
and deleting it.

Create-or-attach of (profile, task) (see :func:`ensure`): create the pod under its
deterministic name; the API server accepts exactly one create and answers the others
409 AlreadyExists, so racing processes (on any machine) all end on one pod. On 409 the
pod is read and, by its labels and phase:

* not labelled ``envlayer/managed=1``: :class:`BackendUnavailable`, never touched;
* being deleted, Succeeded or Failed (deadline reached, keep-alive died): deleted (grace 0),
  waited for until the API answers 404, then created again;
* another fingerprint: ``recreate`` deletes and creates again; ``error`` raises;
* otherwise attached, and waited for while Pending.

A Pending pod is polled (0.05 s, backing off to 1 s) up to ``startup_timeout``. On
clusters with an autoscaler ``Unschedulable`` is the normal state before a node is added,
and ``ContainerCreating``, ``ErrImagePull``/``ImagePullBackOff`` (the kubelet retries) and
``CreateContainerConfigError`` (a Secret not there yet) can recover: they are waited for,
with a WARNING naming each new reason and INFO progress every 5 s. Only what cannot recover
fails at once (``InvalidImageName``, ``ErrImageNeverPull``, a pod that ended). On failure
or timeout the error names the last reason and the cluster's message, and a pod this
process created is deleted so nothing is left behind.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.sandbox import recorded_options
from envlayer.sandbox.owner import owner_label
from envlayer_kubernetes import naming, sdk
from envlayer_kubernetes.client import Cluster, call, message_of
from envlayer_kubernetes.options import KubernetesOptions

log = logging.getLogger("envlayer.kubernetes")
KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
"""PID 1 of the sandbox container: sleeps, reaps orphans, exits on SIGTERM."""
FATAL_WAITING = frozenset({"ErrImageNeverPull", "InvalidImageName"})
"""Container waiting reasons that never recover without someone changing the pod."""
QUIET_WAITING = frozenset({"ContainerCreating", "PodInitializing", "Pending"})
"""Waiting reasons of every normal start: noted at INFO only."""
ENDED = frozenset({"Succeeded", "Failed"})
WORKSPACE_VOLUME = "envlayer-workspace"
PROGRESS_EVERY = 5.0
SHAPING_OPTIONS = (
    "image",
    "cwd",
    "shell",
    "requests",
    "limits",
    "node_selector",
    "tolerations",
    "service_account",
    "automount_service_account_token",
    "runtime_class",
    "image_pull_policy",
    "image_pull_secrets",
    "active_deadline",
    "security_preset",
    "run_as_user",
    "run_as_group",
    "fs_group",
    "workspace_volume",
    "pod_labels",
    "pod_annotations",
)
"""The options that shape the pod (its fingerprint's inputs), recorded in its
:data:`~envlayer_kubernetes.naming.OPTIONS` annotation (see
:mod:`envlayer.sandbox.recorded_options`)."""


@dataclass(frozen=True)
class PodSpec:
    """Everything needed to create the pod of one environment."""

    name: str
    manifest: dict[str, Any]
    fingerprint: str
    record: dict[str, Any]
    """The options it is created with, as its :data:`~envlayer_kubernetes.naming.OPTIONS` annotation records them."""


@dataclass(frozen=True)
class Attached:
    """The pod an environment uses."""

    name: str
    uid: str
    created: bool
    replaced: str = ""
    """When a pod with other options was replaced to make this one: the notice saying so."""


def build_spec(opts: KubernetesOptions, *, profile: str, task: str, persist: bool) -> PodSpec:
    """The pod manifest of (profile, task) and its fingerprint. A private pod (not
    ``persist``) gets a random name suffix and this process's owner label
    (:mod:`envlayer.sandbox.owner`); otherwise pure.

    The fingerprint covers every option that shapes the pod (image, workdir, keep-alive,
    resources, scheduling, service account, runtime class, pull settings, deadline, user
    labels and annotations); per-process settings and environment values are not in it
    (environment values never enter the pod spec at all)."""
    container: dict[str, Any] = {
        "name": naming.CONTAINER,
        "image": opts.image,
        "imagePullPolicy": opts.image_pull_policy,
        "command": [opts.shell, "-c", KEEPALIVE],
        "workingDir": opts.workdir,
    }
    limits = dict(opts.limits)
    if opts.gpus:
        limits[opts.gpu_resource] = str(opts.gpus)
    resources = {k: v for k, v in (("requests", dict(opts.requests)), ("limits", limits)) if v}
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "automountServiceAccountToken": opts.automount_service_account_token,
        "enableServiceLinks": False,
    }
    _apply_security(spec, container, opts)
    if opts.active_deadline:
        spec["activeDeadlineSeconds"] = opts.active_deadline
    if opts.node_selector:
        spec["nodeSelector"] = dict(opts.node_selector)
    if opts.tolerations:
        spec["tolerations"] = [dict(t) for t in opts.tolerations]
    if opts.service_account:
        spec["serviceAccountName"] = opts.service_account
    if opts.runtime_class:
        spec["runtimeClassName"] = opts.runtime_class
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in opts.image_pull_secrets]
    fingerprint = naming.fingerprint({"spec": spec, "labels": opts.pod_labels, "annotations": opts.pod_annotations})
    name = naming.pod_name(profile, task, private=not persist)
    labels = naming.managed_labels(
        profile=profile,
        task=task,
        fingerprint_value=fingerprint,
        persist=persist,
        extra=opts.pod_labels,
        owner=None if persist else owner_label(),
    )
    record = recorded_options.record_of(opts, SHAPING_OPTIONS)
    annotations = {**opts.pod_annotations, naming.OPTIONS: recorded_options.encode(record)}
    metadata: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    return PodSpec(name, manifest, fingerprint, record)


def _apply_security(spec: dict[str, Any], container: dict[str, Any], opts: KubernetesOptions) -> None:
    """The security context and the workspace volume of the pod (options
    ``security_preset``, ``run_as_user``, ``run_as_group``, ``fs_group``,
    ``workspace_volume``). The ``restricted`` preset is what the Pod Security ``restricted``
    level checks (k8s.io/pod-security-admission ``policy/check_*.go``). The workspace is an
    emptyDir at the working directory: the kubelet creates it mode 0777 (group-owned by
    ``fsGroup``, setgid, when one is set), so a non-root user can write where commands
    start, where a ``workingDir`` the runtime creates is root-owned 0755."""
    pod_ctx: dict[str, Any] = {}
    for key, value in (("runAsUser", opts.run_as_user), ("runAsGroup", opts.run_as_group), ("fsGroup", opts.fs_group)):
        if value is not None:
            pod_ctx[key] = value
    if opts.security_preset == "restricted":
        pod_ctx["runAsNonRoot"] = True
        pod_ctx["seccompProfile"] = {"type": "RuntimeDefault"}
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if pod_ctx:
        spec["securityContext"] = pod_ctx
    if opts.has_workspace_volume:
        spec["volumes"] = [{"name": WORKSPACE_VOLUME, "emptyDir": {}}]
        container["volumeMounts"] = [{"name": WORKSPACE_VOLUME, "mountPath": opts.workdir}]


def read(cluster: Cluster, name: str, opts: KubernetesOptions) -> Any | None:
    """The pod, or None when the API answers 404."""
    try:
        return call(
            cluster,
            lambda: cluster.core.read_namespaced_pod(name, cluster.namespace, _request_timeout=opts.api_timeout),
            f"reading pod {name}",
            passthrough=(404,),
        )
    except sdk.exceptions.ApiException:
        return None


def delete(cluster: Cluster, name: str, opts: KubernetesOptions) -> bool:
    """Delete the pod with grace period 0; False when it was already gone."""
    try:
        call(
            cluster,
            lambda: cluster.core.delete_namespaced_pod(
                name, cluster.namespace, grace_period_seconds=0, _request_timeout=opts.api_timeout
            ),
            f"deleting pod {name}",
            passthrough=(404,),
        )
        return True
    except sdk.exceptions.ApiException:
        return False


def wait_gone(cluster: Cluster, name: str, opts: KubernetesOptions, timeout: float) -> bool:
    """Poll until the API answers 404 for the pod; False if it still exists after ``timeout``."""
    end = time.monotonic() + timeout
    pause = 0.05
    while read(cluster, name, opts) is not None:
        if time.monotonic() >= end:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    return True


def _create(cluster: Cluster, spec: PodSpec, opts: KubernetesOptions) -> Any | None:
    """Create the pod; None when the name is taken (409)."""
    body = sdk.client.V1Pod.from_dict(spec.manifest)
    try:
        return call(
            cluster,
            lambda: cluster.core.create_namespaced_pod(cluster.namespace, body, _request_timeout=opts.api_timeout),
            f"creating pod {spec.name}",
            passthrough=(409,),
        )
    except sdk.exceptions.ApiException:
        return None


def ensure(cluster: Cluster, spec: PodSpec, opts: KubernetesOptions) -> Attached:
    """Create or attach to the pod of ``spec`` and wait until it runs (module rules).

    Raises :class:`BackendUnavailable` for a pod envlayer does not manage, a fingerprint
    mismatch under ``on_fingerprint_mismatch = "error"``, a pod that cannot start, or
    when the API cannot be reached."""
    replaced = ""
    for _ in range(5):
        pod = _create(cluster, spec, opts)
        created = pod is not None
        if pod is None:
            pod = read(cluster, spec.name, opts)
            if pod is None:
                continue  # deleted between our create and read: try again
            usable, notice = _usable(cluster, spec, opts, pod)
            replaced = notice or replaced
            if not usable:
                continue
        pod = wait_running(cluster, spec.name, opts, created=created)
        return Attached(spec.name, pod.metadata.uid or "", created, replaced)
    raise BackendUnavailable(
        f"pod {spec.name} in namespace {cluster.namespace!r} kept changing while attaching",
        hint="another process keeps deleting or recreating it (different options for the same task?)",
    )


def _usable(cluster: Cluster, spec: PodSpec, opts: KubernetesOptions, pod: Any) -> tuple[bool, str]:
    """(True, "") to attach to the existing ``pod``; (False, the notice of its replacement
    when its options differed, else "") after deleting it (create again). Raises
    :class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer` for other options
    under ``on_fingerprint_mismatch = "error"``."""
    notice = ""
    labels = pod.metadata.labels or {}
    if labels.get(naming.MANAGED) != "1":
        raise BackendUnavailable(
            f"a pod named {spec.name} exists in namespace {cluster.namespace!r} but envlayer did not create it",
            hint="delete or rename it, or use another profile or task id; envlayer never touches it",
        )
    phase = pod.status.phase if pod.status else None
    if pod.metadata.deletion_timestamp is None and phase not in ENDED:
        if labels.get(naming.FINGERPRINT) == spec.fingerprint:
            return True, ""
        notice = recorded_options.settle_mismatch(
            what=f"pod {spec.name}",
            mode=opts.on_fingerprint_mismatch,
            found=(pod.metadata.annotations or {}).get(naming.OPTIONS),
            requested=spec.record,
            logger=log,
        )
    else:
        log.info("pod %s is %s: replacing it", spec.name, "being deleted" if phase not in ENDED else phase)
    delete(cluster, spec.name, opts)
    if not wait_gone(cluster, spec.name, opts, opts.startup_timeout):
        raise BackendUnavailable(
            f"pod {spec.name} is still there {opts.startup_timeout:.0f} s after deleting it",
            hint="check the pod's finalizers and the kubelet (`kubectl describe pod`)",
        )
    return False, notice


@dataclass(frozen=True)
class Waiting:
    """Why a pod is not Running yet: the reason the cluster gives (``Unschedulable``,
    ``ContainerCreating``, ``ImagePullBackOff``, ...), its message, and whether it can
    never recover by itself (``final``)."""

    reason: str
    message: str
    final: bool = False

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def waiting_state(pod: Any) -> Waiting | None:
    """Why ``pod`` is not Running, or None once it runs. Final: a pod that ended, and the
    container waiting reasons in :data:`FATAL_WAITING`; everything else may recover (an
    autoscaler adds a node, a pull succeeds on retry, a Secret appears) and is waited for."""
    status = pod.status
    phase = status.phase if status else None
    if phase == "Running" and pod.metadata.deletion_timestamp is None:
        return None
    if phase in ENDED:
        return Waiting(phase, f"{status.reason or ''} {status.message or ''}".strip(), final=True)
    for cond in (status.conditions if status else None) or []:
        if cond.type == "PodScheduled" and cond.status == "False":
            return Waiting(cond.reason or "Unschedulable", cond.message or "no node fits")
    for cs in (status.container_statuses if status else None) or []:
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None:
            reason, message = waiting.reason or "Waiting", waiting.message or ""
            final = reason in FATAL_WAITING or (reason == "CreateContainerConfigError" and "runAsNonRoot" in message)
            return Waiting(reason, message, final=final)
    if pod.metadata.deletion_timestamp is not None:
        return Waiting("Terminating", "the pod is being deleted", final=True)
    return Waiting(phase or "Pending", "not scheduled yet")


def wait_running(cluster: Cluster, name: str, opts: KubernetesOptions, *, created: bool) -> Any:
    """Poll the pod until it is Running; return it. Recoverable states are waited for up
    to ``startup_timeout`` with a progress note naming the current reason (WARNING when
    the reason changes, INFO every :data:`PROGRESS_EVERY` s); a final state fails at once.
    A pod this process ``created`` is deleted when it cannot start. Raises
    :class:`BackendUnavailable` naming the last reason and its message."""
    start = time.monotonic()
    next_progress = start + PROGRESS_EVERY
    pause = 0.05
    noted: str | None = None
    while True:
        pod = read(cluster, name, opts)
        if pod is None:
            raise BackendUnavailable(
                f"pod {name} was deleted while starting", hint="another process or the reaper removed it; retry"
            )
        state = waiting_state(pod)
        if state is None:
            return pod
        waited = time.monotonic() - start
        if state.final or waited >= opts.startup_timeout:
            if created:
                delete(cluster, name, opts)
            problem = str(state) if state.final else f"still {state} after {opts.startup_timeout:.0f} s"
            raise BackendUnavailable(
                f"pod {name} in namespace {cluster.namespace!r} cannot start: {problem}",
                hint=_hint_for(state),
            )
        if state.reason not in QUIET_WAITING and state.reason != noted:
            log.warning("pod %s is %s; waiting up to %.0f s (startup_timeout)", name, state, opts.startup_timeout)
            noted = state.reason
        elif time.monotonic() >= next_progress:
            log.info("waiting for pod %s: %s, for %.0f s", name, state, waited)
            next_progress += PROGRESS_EVERY
        time.sleep(pause)
        pause = min(pause * 1.5, 1.0)


def _hint_for(state: Waiting) -> str:
    if state.reason in ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"):
        return "check the image name and that the cluster can pull it (image_pull_secrets, image_pull_policy)"
    if "runAsNonRoot" in state.message:
        return "set run_as_user to a non-root uid (e.g. 65534), or use an image whose USER is a numeric non-root uid"
    if state.reason == "Unschedulable" and "Insufficient " in state.message and "/gpu" in state.message:
        return (
            "no node offers the GPUs asked for (gpus, gpu_resource): add GPU nodes with the vendor's device "
            "plugin, tolerations for their taints and a node_selector for them, or unset gpus"
        )
    if state.reason in ("Unschedulable", "SchedulingGated"):
        return (
            "no node fits: relax node_selector/requests, add tolerations or nodes, or raise startup_timeout "
            "if an autoscaler is adding one"
        )
    if not state.final:
        return "raise startup_timeout, or look at `kubectl describe pod` and the cluster's events"
    return "look at `kubectl describe pod` and the cluster's events"


def describe_error(exc: BaseException) -> str:
    """Short text of an API error for logs."""
    return message_of(exc)
