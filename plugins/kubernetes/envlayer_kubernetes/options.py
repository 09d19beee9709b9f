"""``KubernetesOptions``: the Kubernetes backend's option schema and its validation.

Importable without the ``kubernetes`` client (the configuration loader and ``envlayer
doctor`` read it). Every field shapes the pod and is part of its fingerprint unless its
doc says it is a per-process setting (see :func:`envlayer_kubernetes.pods.build_manifest`);
the snapshot retention options (``snapshot_keep``, ``snapshot_max_age``, from
:class:`envlayer.snapshot.SnapshotRetentionOptions`) shape no pod either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from envlayer.options import OptionError, option
from envlayer.sandbox.options import ContainerOptions, HostVariablesOptions
from envlayer.snapshot import SnapshotRetentionOptions

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
RESERVED_PREFIX = "envlayer/"
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
RESOURCE_NAMES = re.compile(r"^([a-z0-9.-]+/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")


def valid_label_key(key: str) -> bool:
    """True for a Kubernetes label/annotation key: ``[prefix/]name`` (prefix a DNS
    subdomain of at most 253 characters, name at most 63)."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_NAME.match(name))


@dataclass(kw_only=True)
class KubernetesOptions(ContainerOptions, HostVariablesOptions, SnapshotRetentionOptions):
    """Options of the Kubernetes backend. ``cwd`` defaults to ``/workspace``."""

    where: ClassVar[str] = "container"

    image: str = option("python:3.11-slim", doc="Container image of the sandbox pod.")
    dockerfile: str | None = option(
        None,
        doc="Not available on Kubernetes: a pod runs an image its nodes pull from a registry. Setting it is an "
        "error that says so; build and push the image (`docker build -t REGISTRY/NAME .`, `docker push`) and set "
        "`image`.",
    )
    build_context: str | None = option(None, doc="Not available on Kubernetes (see `dockerfile`).")
    namespace: str | None = option(
        None,
        doc="Namespace of the pods; the kubeconfig context's namespace (or the service account's, "
        "in-cluster) when unset, else `default`. Per-process setting.",
    )
    context: str | None = option(
        None, doc="kubeconfig context to use; the current context when unset. Per-process setting."
    )
    kubeconfig: str | None = option(
        None, doc="Path of the kubeconfig file; $KUBECONFIG or ~/.kube/config when unset. Per-process setting."
    )
    config_source: Literal["auto", "kubeconfig", "in_cluster"] = option(
        "auto",
        doc="`kubeconfig`: read the kubeconfig; `in_cluster`: use the pod's service account; `auto`: the "
        "kubeconfig when one exists, else in-cluster when running in a pod. Per-process setting.",
    )
    requests: dict[str, str] = option(doc='Resource requests, e.g. {"cpu" = "500m", "memory" = "1Gi"}.', factory=dict)
    limits: dict[str, str] = option(doc='Resource limits, e.g. {"cpu" = "2", "memory" = "4Gi"}.', factory=dict)
    gpus: int = option(
        0,
        doc="GPUs the pod asks for, as a limit on `gpu_resource` (extended resources are whole and their "
        "request equals the limit). A cluster with no node offering them leaves the pod Unschedulable: "
        "it fails at `startup_timeout` naming the resource, never runs without its GPUs. 0: none.",
    )
    gpu_resource: str = option(
        "nvidia.com/gpu",
        doc="The extended resource `gpus` counts, as the cluster's device plugin names it "
        "(`nvidia.com/gpu`, `amd.com/gpu`, `gpu.intel.com/i915`).",
    )
    node_selector: dict[str, str] = option(doc="Node labels the pod must be scheduled on.", factory=dict)
    tolerations: list[dict[str, Any]] = option(
        doc="Tolerations, each a table with key, operator, value, effect, tolerationSeconds.", factory=list
    )
    service_account: str | None = option(None, doc="Service account of the pod; the namespace's default when unset.")
    automount_service_account_token: bool = option(
        False, doc="Mount the service account's API token in the sandbox. Off: commands get no cluster credentials."
    )
    runtime_class: str | None = option(None, doc="RuntimeClass of the pod (e.g. gvisor, kata), for stronger isolation.")
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = option(
        "IfNotPresent", doc="When the kubelet pulls `image`."
    )
    image_pull_secrets: list[str] = option(doc="Names of Secrets used to pull `image`.", factory=list)
    active_deadline: int = option(
        86400,
        doc="activeDeadlineSeconds: the cluster stops the pod this many seconds after it started, whatever "
        "happens to the client (a server-side backstop against leaks). 0 = none.",
    )
    security_preset: Literal["none", "restricted"] = option(
        "none",
        doc="`restricted`: the pod meets the Pod Security `restricted` level (runAsNonRoot, seccomp "
        "RuntimeDefault, allowPrivilegeEscalation false, all capabilities dropped); set run_as_user too unless "
        "the image's USER is a numeric non-root uid or the platform assigns one (OpenShift).",
    )
    run_as_user: int | None = option(None, doc="uid the sandbox's processes run as (securityContext.runAsUser).")
    run_as_group: int | None = option(None, doc="Primary gid of the sandbox's processes (runAsGroup).")
    fs_group: int | None = option(
        None, doc="Supplementary gid that owns the workspace volume, group-writable (securityContext.fsGroup)."
    )
    workspace_volume: Literal["auto", "emptyDir", "none"] = option(
        "auto",
        doc="`emptyDir`: an emptyDir volume at the working directory, writable by any user (group-owned by "
        "fs_group when set); `auto`: that when run_as_user, run_as_group, fs_group or security_preset is set; "
        "`none`: the working directory is the image's (created root-owned by the runtime when missing).",
    )
    pod_labels: dict[str, str] = option(doc="Extra pod labels (keys under `envlayer/` are reserved).", factory=dict)
    pod_annotations: dict[str, str] = option(doc="Extra pod annotations.", factory=dict)
    startup_timeout: float = option(
        300.0, doc="How long to wait for a Pending pod to run, in seconds. Per-process setting."
    )
    api_timeout: float = option(30.0, doc="Timeout of one API request, in seconds. Per-process setting.")
    snapshot_dir: str | None = option(
        None,
        doc="Directory on this machine where snapshots (tars of the working directory) are kept; "
        "$XDG_STATE_HOME/envlayer/kubernetes-snapshots when unset. Per-process setting.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("dockerfile", "build_context"):
            if getattr(self, key):
                raise OptionError(
                    key,
                    "a Kubernetes pod needs an image in a registry its nodes can pull from; envlayer does not build "
                    "images for Kubernetes. Build and push the image (docker build -t REGISTRY/NAME DIR; docker push "
                    "REGISTRY/NAME), then set image = REGISTRY/NAME and remove " + key,
                )
        if not self.image.strip():
            raise OptionError("image", "must not be empty")
        if self.namespace is not None and (len(self.namespace) > 63 or not DNS_LABEL.match(self.namespace)):
            raise OptionError("namespace", f"{self.namespace!r} is not a namespace name (lowercase, digits, -)")
        for key in ("requests", "limits"):
            for name, quantity in getattr(self, key).items():
                if not RESOURCE_NAMES.match(name):
                    raise OptionError(key, f"{name!r} is not a resource name (e.g. cpu, memory)")
                if not QUANTITY.match(quantity):
                    raise OptionError(key, f"{name} = {quantity!r} is not a quantity (e.g. 500m, 2, 1Gi)")
        if self.gpus < 0:
            raise OptionError("gpus", "must be >= 0")
        if not RESOURCE_NAMES.match(self.gpu_resource) or "/" not in self.gpu_resource:
            raise OptionError("gpu_resource", f"{self.gpu_resource!r} is not an extended resource name (vendor/name)")
        if self.gpus and self.gpu_resource in self.limits:
            raise OptionError("gpus", f"set either gpus or limits[{self.gpu_resource!r}], not both")
        for key in ("node_selector", "pod_labels"):
            for name, value in getattr(self, key).items():
                if not valid_label_key(name) or len(value) > 63 or not LABEL_VALUE.match(value):
                    raise OptionError(key, f"{name}={value!r} is not a valid Kubernetes label")
        for name in self.pod_labels:
            if name.startswith(RESERVED_PREFIX):
                raise OptionError("pod_labels", f"{name!r}: keys under `envlayer/` are reserved")
        for name in self.pod_annotations:
            if not valid_label_key(name):
                raise OptionError("pod_annotations", f"{name!r} is not a valid annotation key")
        for tol in self.tolerations:
            unknown = set(tol) - TOLERATION_KEYS
            if unknown:
                raise OptionError("tolerations", f"unknown keys {sorted(unknown)}; allowed: {sorted(TOLERATION_KEYS)}")
            if tol.get("operator", "Equal") not in ("Equal", "Exists"):
                raise OptionError("tolerations", "operator must be Equal or Exists")
            if tol.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise OptionError("tolerations", "effect must be NoSchedule, PreferNoSchedule or NoExecute")
        for key in ("service_account", "runtime_class"):
            value = getattr(self, key)
            if value is not None and not DNS_SUBDOMAIN.match(value):
                raise OptionError(key, f"{value!r} is not a valid object name")
        for name in self.image_pull_secrets:
            if not DNS_SUBDOMAIN.match(name):
                raise OptionError("image_pull_secrets", f"{name!r} is not a valid Secret name")
        for key in ("run_as_user", "run_as_group", "fs_group"):
            value = getattr(self, key)
            if value is not None and not 0 <= value <= 2147483647:
                raise OptionError(key, f"{value} is not a uid/gid (0 to 2147483647)")
        if self.security_preset == "restricted" and self.run_as_user == 0:
            raise OptionError("run_as_user", 'must not be 0 with security_preset = "restricted" (runAsNonRoot)')
        if self.active_deadline < 0:
            raise OptionError("active_deadline", "must be >= 0 (0 = no deadline)")
        if self.startup_timeout <= 0:
            raise OptionError("startup_timeout", "must be > 0")
        if self.api_timeout <= 0:
            raise OptionError("api_timeout", "must be > 0")

    @property
    def has_workspace_volume(self) -> bool:
        """Whether the pod mounts an emptyDir at the working directory (``workspace_volume``)."""
        if self.workspace_volume != "auto":
            return self.workspace_volume == "emptyDir"
        chosen = (self.run_as_user, self.run_as_group, self.fs_group)
        return self.security_preset != "none" or any(v is not None for v in chosen)
