"""A fake Kubernetes API server: the pod subset envlayer uses, each pod a Docker container.

Test code only. Run as a separate process (the tests' conftest starts one per session)::

    python fake_apiserver.py --instance ID --port-file PATH --log PATH [--protocols v4.channel.k8s.io]
        [--parent-pid PID]

It serves, on 127.0.0.1 and a free port (written to ``--port-file`` once listening):

* ``GET /version``;
* ``POST/GET /api/v1/namespaces/{ns}/pods`` (create; list with ``labelSelector``);
* ``GET/DELETE /api/v1/namespaces/{ns}/pods/{name}``;
* ``GET /api/v1/namespaces/{ns}/pods/{name}/exec`` as a websocket speaking
  ``v5.channel.k8s.io`` and ``v4.channel.k8s.io`` (``--protocols`` restricts the list).

Every request is appended to ``--log`` as one JSON line ``{"method", "route", "status",
"path", "query"}`` where ``route`` is the route template, or ``"UNKNOWN"`` for a route it does not
serve (answered 404), so tests can assert exactly which routes a client used.

Its assumptions (where a real cluster differs) are written in ``FAKE_APISERVER.md`` next
to this file. Docker containers it makes carry the label ``envlayer-fake-apiserver=<ID>``;
it removes them on SIGTERM, and when ``--parent-pid`` is gone (the test run was killed
before it could stop the server); the conftest removes any left over by label as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import docker
from aiohttp import WSMsgType, web
from docker.errors import ImageNotFound, NotFound
from envlayer_docker.transport import buffered_bytes, raw_socket

FAKE_LABEL = "envlayer-fake-apiserver"
MAX_HEADER_BYTES = 1 << 20
CONTROL_PREFIX = "/_fake/"
"""Routes under this prefix are the tests' controls of the fake (not logged)."""
UNSCHEDULABLE_FOR = "fake.envlayer/unschedulable-seconds"
"""Pod annotation: seconds the pod stays Unschedulable before it is scheduled."""
_IMAGE_REF = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
"""A Docker image reference (distribution/reference's grammar, simplified; the kubelet rejects others)."""
NODE_NAME = "fake-node"
NODE_ALLOCATABLE = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "hugepages-2Mi", "hugepages-1Gi"})
"""What the fake's one node offers (a node's status.allocatable without a device plugin): no GPUs."""
NODE_LABELS = {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
RESIZE = 4
"""The resize channel (kubelet's remotecommand/websocket.go: stdin 0, stdout 1, stderr 2,
error 3, resize 4)."""


@dataclass(frozen=True)
class Bridged:
    """The exec a websocket is bridged to: its Docker id, whether stdin was asked for,
    whether it has a tty."""

    eid: str
    stdin: bool
    tty: bool


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def now_rfc3339(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def error(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    return web.json_response(status_body(code, reason, message, details), status=code)


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def labels_problem(labels: dict[str, Any]) -> str | None:
    for key, value in labels.items():
        if not valid_label_key(key):
            return f"metadata.labels: Invalid value: {key!r}: name part must consist of alphanumeric characters"
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            return f"metadata.labels: Invalid value: {value!r}: a valid label must be 63 characters or less"
    return None


# --- label selectors ----------------------------------------------------------------


def split_selector(text: str) -> list[str]:
    """Split a selector on commas that are not inside ``( )``."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality (``=``, ``==``, ``!=``), existence (``k``, ``!k``) and set (``in``,
    ``notin``) requirements, all of which must hold. Raises ValueError on bad syntax."""
    for req in split_selector(selector):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", req)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            inside = key in labels and labels[key] in values
            if (op == "in") != inside:
                return False
            continue
        m = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", req)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                if labels.get(key) == value:
                    return False
            elif labels.get(key) != value:
                return False
            continue
        if req.startswith("!") and valid_label_key(req[1:]):
            if req[1:] in labels:
                return False
            continue
        if valid_label_key(req):
            if req not in labels:
                return False
            continue
        raise ValueError(f"unable to parse requirement: {req!r}")
    return True


# --- pods -------------------------------------------------------------------------------


@dataclass
class Pod:
    namespace: str
    manifest: dict[str, Any]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: float = field(default_factory=time.time)
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    unschedulable: str = ""
    container_id: str | None = None
    started: float | None = None
    finished: float | None = None
    exit_code: int | None = None
    deleting: float | None = None
    resource_version: int = 1
    aged: float = 0.0
    """Seconds the tests moved this pod's clock forward (``POST /_fake/pods/{ns}/{name}/age``)."""
    clock_moved: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        return self.manifest["metadata"]["name"]

    @property
    def spec(self) -> dict[str, Any]:
        return self.manifest["spec"]

    def container(self) -> dict[str, Any]:
        return self.spec["containers"][0]

    def to_json(self) -> dict[str, Any]:
        meta = dict(self.manifest.get("metadata") or {})
        meta.update(
            {
                "namespace": self.namespace,
                "uid": self.uid,
                "resourceVersion": str(self.resource_version),
                "creationTimestamp": now_rfc3339(self.created),
            }
        )
        if self.deleting is not None:
            meta["deletionTimestamp"] = now_rfc3339(self.deleting)
            meta["deletionGracePeriodSeconds"] = 0
        spec = dict(self.spec)
        if not self.unschedulable:
            spec["nodeName"] = NODE_NAME
        c = self.container()
        state: dict[str, Any]
        if self.phase == "Running":
            state = {"running": {"startedAt": now_rfc3339(self.started)}}
        elif self.phase in ("Succeeded", "Failed") and self.started is not None:
            state = {
                "terminated": {
                    "exitCode": self.exit_code if self.exit_code is not None else 137,
                    "reason": self.reason or ("Completed" if self.exit_code == 0 else "Error"),
                    "startedAt": now_rfc3339(self.started),
                    "finishedAt": now_rfc3339(self.finished),
                }
            }
        else:
            state = {"waiting": {"reason": self.waiting_reason, "message": self.waiting_message}}
        status: dict[str, Any] = {"phase": self.phase, "startTime": now_rfc3339(self.created)}
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        if self.unschedulable:
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": self.unschedulable,
                    "lastTransitionTime": now_rfc3339(self.created),
                }
            ]
        else:
            status["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(self.created)},
                {
                    "type": "Ready",
                    "status": "True" if self.phase == "Running" else "False",
                    "lastTransitionTime": now_rfc3339(self.started or self.created),
                },
            ]
            status["containerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": self.phase == "Running",
                    "restartCount": 0,
                    "started": self.phase == "Running",
                    "state": state,
                }
            ]
        return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": status}


@dataclass
class Faults:
    """Failures the fake injects, set by tests through ``POST /_fake/faults`` (a JSON
    object of these fields; the route is not logged)."""

    status: int = 0
    """429 (throttled) or 502/503/504 (gateway, server briefly unavailable)."""
    count: int = 0
    """How many of the next matching requests get ``status``."""
    retry_after: str | None = None
    """``Retry-After`` header value sent with ``status``."""
    routes: str = "rest"
    """Which requests: ``rest`` (every route but exec), ``exec``, or ``all``."""
    stall: float = 0.0
    """Instead of ``status``: hold each matching request this many seconds before serving
    it (a stalled handshake: the connection is accepted and nothing is answered)."""

    def take(self, request: web.Request) -> web.Response | float | None:
        """The injected answer for ``request``, seconds to stall it, or None."""
        is_exec = request.path.endswith("/exec")
        if self.count <= 0 or self.routes not in ("all", "exec" if is_exec else "rest"):
            return None
        self.count -= 1
        if self.stall:
            return float(self.stall)
        headers = {"Retry-After": self.retry_after} if self.retry_after else {}
        # 429 as k8s.io/apiserver pkg/server/filters/maxinflight.go tooManyRequests writes it (also
        # used by priority-and-fairness): Retry-After and a plain-text body, not a Status object.
        text = {
            429: "Too many requests, please try again later.",
            502: "502 Bad Gateway",
            503: "503 Service Unavailable",
            504: "504 Gateway Timeout",
        }.get(self.status, "injected failure")
        return web.Response(status=self.status, text=text + "\n", headers=headers)


class FakeCluster:
    """Pods in memory, containers in Docker. All state changes happen on the event loop."""

    def __init__(self, instance: str, protocols: list[str], log_path: str) -> None:
        self.instance = instance
        self.protocols = protocols
        self.pods: dict[tuple[str, str], Pod] = {}
        self.faults = Faults()
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.open_bridges: set[web.WebSocketResponse] = set()
        self.blackholed: set[web.WebSocketResponse] = set()
        self.docker = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
        self.log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # lives as long as the server

    async def blocking(self, fn: Any, *args: Any, **kw: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kw))

    # --- lifecycle of one pod ----------------------------------------------------

    async def start_pod(self, pod: Pod) -> None:
        c = pod.container()
        if not await self.schedule(pod):
            return
        if not _IMAGE_REF.match(c["image"]):
            # kubelet pkg/kubelet/images/image_manager.go EnsureImageExists: applyDefaultImageTag fails
            pod.waiting_reason = "InvalidImageName"
            pod.waiting_message = f'Failed to apply default image tag "{c["image"]}": couldn\'t parse image reference'
            pod.waiting_message += f' "{c["image"]}": invalid reference format'
            pod.resource_version += 1
            return
        if pod.spec.get("nodeSelector"):
            wrong = {k: v for k, v in pod.spec["nodeSelector"].items() if NODE_LABELS.get(k) != v}
            if wrong:
                pod.unschedulable = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
                pod.resource_version += 1
                return
        missing = sorted(set((c.get("resources") or {}).get("limits") or {}) - NODE_ALLOCATABLE)
        if missing:
            # kube-scheduler noderesources/fit.go: one "Insufficient <resource>" reason per resource the
            # node lacks; framework/types.go FitError.Error(): "0/N nodes are available: <reasons>." and
            # the preemption postfilter's own sentence after it.
            reasons = ", ".join(f"1 Insufficient {name}" for name in missing)
            pod.unschedulable = (
                f"0/1 nodes are available: {reasons}. preemption: 0/1 nodes are available: "
                "1 No preemption victims found for incoming pod.."
            )
            pod.resource_version += 1
            return
        try:
            await self.blocking(self.docker.inspect_image, c["image"])
        except ImageNotFound:
            if c.get("imagePullPolicy") == "Never":
                # kubelet image_manager.go: ErrImageNeverPull, message "Container image ... is not present
                # with pull policy of Never"
                pod.waiting_reason = "ErrImageNeverPull"
                pod.waiting_message = f'Container image "{c["image"]}" is not present with pull policy of Never'
                pod.resource_version += 1
                return
            pod.waiting_reason = "ErrImagePull"
            pod.waiting_message = f'rpc error: code = NotFound desc = failed to pull image "{c["image"]}": not found'
            pod.resource_version += 1
            await asyncio.sleep(0.5)
            if pod.deleting is None:
                pod.waiting_reason = "ImagePullBackOff"
                pod.waiting_message = f'Back-off pulling image "{c["image"]}"'
                pod.resource_version += 1
            return
        delay = float((pod.manifest["metadata"].get("annotations") or {}).get("fake.envlayer/pending-seconds", 0))
        if delay:
            await asyncio.sleep(delay)
        env = {e["name"]: e.get("value", "") for e in c.get("env") or []}
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        user, config_error = await self.process_user(pod)
        if config_error:
            pod.waiting_reason, pod.waiting_message = "CreateContainerConfigError", config_error
            pod.resource_version += 1
            return
        fs_group = (pod.spec.get("securityContext") or {}).get("fsGroup")
        try:
            created = await self.blocking(
                self.docker.create_container,
                c["image"],
                command=argv or None,
                environment=env,
                working_dir=c.get("workingDir") or None,
                user=user,
                labels={FAKE_LABEL: self.instance, "envlayer-fake-pod": f"{pod.namespace}.{pod.name}"},
                # unique per pod object: a pod re-created under the same name must not
                # collide with its predecessor's container while that is still being removed
                name=f"fakek8s-{self.instance}-{pod.namespace}-{pod.name}-{pod.uid[:8]}"[:200],
                # no network (as in the Daytona fake): about 120 ms less dockerd CPU per pod
                network_disabled=True,
                host_config=self.docker.create_host_config(group_add=[str(fs_group)] if fs_group is not None else None),
            )
            pod.container_id = created["Id"]
            if pod.deleting is not None:
                return
            await self.blocking(self.docker.start, created["Id"])
            await self.prepare_empty_dirs(pod, fs_group)
        except Exception as exc:
            pod.waiting_reason = "CreateContainerError"
            pod.waiting_message = str(exc)[:300]
            pod.resource_version += 1
            return
        pod.phase, pod.started = "Running", time.time()
        pod.resource_version += 1
        deadline = pod.spec.get("activeDeadlineSeconds")
        if deadline:
            asyncio.get_running_loop().create_task(self.enforce_deadline(pod, float(deadline)))

    async def process_user(self, pod: Pod) -> tuple[str | None, str]:
        """(Docker ``user`` for the container, CreateContainerConfigError message or "").
        ``runAsUser``/``runAsGroup`` (container over pod) override the image's USER; with
        ``runAsNonRoot`` a root or non-numeric effective user is refused, in the kubelet's
        words (pkg/kubelet/kuberuntime/security_context_others.go ``verifyRunAsNonRoot``)."""
        pod_ctx = pod.spec.get("securityContext") or {}
        ctx = {**pod_ctx, **(pod.container().get("securityContext") or {})}
        uid, gid = ctx.get("runAsUser"), ctx.get("runAsGroup")
        image_user = ""
        if uid is None and (ctx.get("runAsNonRoot") or gid is not None):
            info = await self.blocking(self.docker.inspect_image, pod.container()["image"])
            image_user = ((info.get("Config") or {}).get("User") or "").split(":")[0]
        if ctx.get("runAsNonRoot"):
            where = f'(pod: "{pod.name}_{pod.namespace}({pod.uid})", container: {pod.container()["name"]})'
            if uid == 0 or (uid is None and image_user in ("", "0", "root")):
                return None, f"container has runAsNonRoot and image will run as root {where}"
            if uid is None and not image_user.isdigit():
                return None, (
                    f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
                    f"cannot verify user is non-root {where}"
                )
        if uid is None and gid is None:
            return None, ""
        # Docker, as the kubelet: no runAsGroup means the primary group of the uid in the
        # image's /etc/passwd (0 when it has none)
        user = str(uid if uid is not None else image_user or 0)
        return (user if gid is None else f"{user}:{gid}"), ""

    async def prepare_empty_dirs(self, pod: Pod, fs_group: int | None) -> None:
        """Give every emptyDir mount the kubelet's ownership and mode
        (pkg/volume/emptydir/empty_dir.go ``setupDir``: mode 0777; with ``fsGroup``,
        pkg/volume/volume_linux.go ``SetVolumeOwnership``: group fsGroup, setgid, group rwx).
        The fake does this on the container's own file system (as root, before the pod
        reports Running) rather than mounting a fresh volume: content the image has at
        that path stays visible, where a real emptyDir hides it."""
        volumes = {v["name"] for v in pod.spec.get("volumes") or [] if "emptyDir" in v}
        paths = [m["mountPath"] for m in pod.container().get("volumeMounts") or [] if m.get("name") in volumes]
        for path in paths:
            script = 'mkdir -p "$1" && chmod 0777 "$1"'
            if fs_group is not None:
                script += ' && chgrp "$2" "$1" && chmod 2777 "$1"'
            eid = (
                await self.blocking(
                    self.docker.exec_create, pod.container_id, ["sh", "-c", script, "sh", path, str(fs_group)], user="0"
                )
            )["Id"]
            await self.blocking(self.docker.exec_start, eid)

    async def schedule(self, pod: Pod) -> bool:
        """Hold the pod Unschedulable for ``fake.envlayer/unschedulable-seconds`` (as while
        a cluster autoscaler adds a node), then schedule it. While held it has what the
        scheduler writes (pkg/scheduler/schedule_one.go, ``handleSchedulingFailure``):
        phase Pending, no nodeName, no containerStatuses, and the condition
        ``PodScheduled=False, reason=Unschedulable`` with the FailedScheduling message.
        False when the pod was deleted meanwhile."""
        held = float((pod.manifest["metadata"].get("annotations") or {}).get(UNSCHEDULABLE_FOR, 0))
        if not held:
            return True
        pod.unschedulable = (
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
            "1 No preemption victims found for incoming pod."
        )
        pod.resource_version += 1
        await asyncio.sleep(held)
        pod.unschedulable = ""
        pod.resource_version += 1
        return pod.deleting is None

    async def enforce_deadline(self, pod: Pod, seconds: float) -> None:
        """End the pod once ``activeDeadlineSeconds`` passed since its ``startTime``, as the
        kubelet's ``pastActiveDeadline`` (pkg/kubelet/active_deadline.go) counts it, on the
        pod's clock: real time plus what a test added (:meth:`age_pod`)."""
        while (remaining := pod.created + seconds - (time.time() + pod.aged)) > 0:
            pod.clock_moved.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pod.clock_moved.wait(), remaining)
        if self.pods.get((pod.namespace, pod.name)) is not pod or pod.phase != "Running":
            return
        pod.phase, pod.reason = "Failed", "DeadlineExceeded"
        pod.message = f"Pod was active on the node longer than the specified deadline ({int(seconds)}s)"
        pod.finished, pod.exit_code = time.time(), 137
        pod.resource_version += 1
        await self.remove_container(pod)

    async def refresh(self, pod: Pod) -> None:
        """A Running pod whose container stopped becomes Succeeded/Failed (restartPolicy Never)."""
        if pod.phase != "Running" or pod.container_id is None:
            return
        try:
            info = await self.blocking(self.docker.inspect_container, pod.container_id)
            state = info.get("State") or {}
        except NotFound:
            state = {"Running": False, "ExitCode": 137}
        if not state.get("Running", False) and pod.phase == "Running":
            code = int(state.get("ExitCode", 137))
            pod.phase = "Succeeded" if code == 0 else "Failed"
            pod.finished, pod.exit_code = time.time(), code
            pod.resource_version += 1

    async def remove_container(self, pod: Pod) -> None:
        if pod.container_id is None:
            return
        try:
            await self.blocking(self.docker.remove_container, pod.container_id, force=True, v=True)
        except NotFound:
            pass
        except Exception as exc:
            print(f"fake-apiserver: removing {pod.container_id[:12]}: {exc!r}", file=sys.stderr)

    async def delete_pod(self, pod: Pod) -> None:
        await self.remove_container(pod)
        await asyncio.sleep(0.05)
        if self.pods.get((pod.namespace, pod.name)) is pod:
            del self.pods[(pod.namespace, pod.name)]

    def remove_all_containers(self) -> None:
        for summary in self.docker.containers(all=True, filters={"label": f"{FAKE_LABEL}={self.instance}"}):
            try:
                self.docker.remove_container(summary["Id"], force=True, v=True)
            except Exception:
                pass

    # --- HTTP handlers -------------------------------------------------------------------

    def admit(self, ns: str, name: str, body: dict[str, Any]) -> str | None:
        """Why the namespace's validating admission rejects the pod (Pod Security, then
        the pod-count quota), or None. The API server answers 403 ``Forbidden`` with
        ``pods "NAME" is forbidden: <this>`` in a Status object."""
        policy = self.namespaces.get(ns) or {}
        if policy.get("pod_security") == "restricted":
            problems = restricted_violations(body.get("spec") or {})
            if problems:
                return 'violates PodSecurity "restricted:latest": ' + ", ".join(problems)
        max_pods = policy.get("max_pods")
        if max_pods is not None:
            used = sum(1 for (pod_ns, _), pod in self.pods.items() if pod_ns == ns and pod.deleting is None)
            if used + 1 > max_pods:
                # plugin/pkg/admission/resourcequota/controller.go: the "exceeded quota" message
                return f"exceeded quota: pod-count, requested: pods=1, used: pods={used}, limited: pods={max_pods}"
        return None

    async def set_namespace(self, request: web.Request) -> web.Response:
        """Test control: the admission policy of namespace ``ns``: ``{"pod_security":
        "restricted"}`` (the namespace label ``pod-security.kubernetes.io/enforce``) and/or
        ``{"max_pods": N}`` (a ResourceQuota on ``pods``); ``{}`` clears it."""
        self.namespaces[request.match_info["ns"]] = await request.json()
        return web.json_response({"ok": True})

    async def set_faults(self, request: web.Request) -> web.Response:
        """Test control: replace :class:`Faults` with the posted fields."""
        self.faults = Faults(**(await request.json()))
        return web.json_response({"ok": True})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"major": "1", "minor": "31", "gitVersion": "v1.31.0-envlayer-fake", "platform": "linux/amd64"}
        )

    async def create(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        try:
            body = await request.json()
        except ValueError:
            return error(400, "BadRequest", "the request body is not JSON")
        meta = body.get("metadata") or {}
        name = meta.get("name") or ""
        if not name or len(name) > 63 or not _DNS_LABEL.match(name):
            return error(422, "Invalid", f'Pod "{name}" is invalid: metadata.name: Invalid value: "{name}"')
        problem = labels_problem(meta.get("labels") or {})
        if problem:
            return error(422, "Invalid", f'Pod "{name}" is invalid: {problem}')
        containers = (body.get("spec") or {}).get("containers") or []
        if not containers or not containers[0].get("image") or not containers[0].get("name"):
            return error(422, "Invalid", f'Pod "{name}" is invalid: spec.containers: Required value')
        rejected = self.admit(ns, name, body)
        if rejected is not None:
            return error(403, "Forbidden", f'pods "{name}" is forbidden: {rejected}', {"name": name, "kind": "pods"})
        if (ns, name) in self.pods:
            return error(409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"})
        pod = Pod(namespace=ns, manifest=body)
        self.pods[(ns, name)] = pod
        asyncio.get_running_loop().create_task(self.start_pod(pod))
        return web.json_response(pod.to_json(), status=201)

    async def read(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        pod = self.pods.get((ns, name))
        if pod is None:
            return error(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        await self.refresh(pod)
        return web.json_response(pod.to_json())

    async def list(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector", "")
        items = []
        try:
            for (pod_ns, _), pod in list(self.pods.items()):
                labels = pod.manifest["metadata"].get("labels") or {}
                if pod_ns == ns and (not selector or selector_matches(selector, labels)):
                    items.append(pod)
        except ValueError as exc:
            return error(400, "BadRequest", str(exc))
        for pod in items:
            await self.refresh(pod)
        limit = int(request.query.get("limit", "0") or 0)
        if limit:
            items = items[:limit]
        return web.json_response(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "1"},
                "items": [p.to_json() for p in items],
            }
        )

    async def delete(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        pod = self.pods.get((ns, name))
        if pod is None or pod.deleting is not None:
            return error(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        pod.deleting = time.time()
        pod.resource_version += 1
        asyncio.get_running_loop().create_task(self.delete_pod(pod))
        return web.json_response(pod.to_json())

    async def exec(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        pod = self.pods.get((ns, name))
        if pod is None:
            return error(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        await self.refresh(pod)
        if pod.phase != "Running" or pod.container_id is None or pod.deleting is not None:
            return error(400, "BadRequest", f"container sandbox is not valid for pod {name}: pod is {pod.phase}")
        command = request.query.getall("command", [])
        if not command:
            return error(400, "BadRequest", "you must specify at least 1 command")
        want_stdin = request.query.get("stdin") == "true"
        # kubelet drops stderr under a tty (staging/src/k8s.io/kubelet/pkg/cri/streaming/
        # remotecommand/httpstream.go, NewOptions); Docker then sends one raw stream
        tty = request.query.get("tty") == "true"
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        if not any(p in self.protocols for p in offered):
            return error(400, "BadRequest", f"none of the offered subprotocols {offered} is supported")
        try:
            eid = (
                await self.blocking(
                    self.docker.exec_create,
                    pod.container_id,
                    command,
                    stdin=want_stdin,
                    stdout=True,
                    stderr=not tty,
                    tty=tty,
                )
            )["Id"]
            attached = await self.blocking(self.docker.exec_start, eid, socket=True, tty=tty)
        except Exception as exc:
            return error(500, "InternalError", f"exec failed: {exc}")
        sock: socket.socket = raw_socket(attached)
        early = buffered_bytes(attached)  # the stream's first bytes, read with the headers
        # autoping off: pings are answered in bridge() (as golang.org/x/net/websocket answers
        # them), so that a blackholed bridge can stop answering
        ws = web.WebSocketResponse(
            protocols=[p for p in self.protocols if p in offered], max_msg_size=0, autoping=False
        )
        await ws.prepare(request)
        self.open_bridges.add(ws)
        try:
            await self.bridge(ws, sock, Bridged(eid, want_stdin, tty), pod, early)
        finally:
            self.open_bridges.discard(ws)
            self.blackholed.discard(ws)
            sock.close()
            attached.close()
        return ws

    async def age_pod(self, request: web.Request) -> web.Response:
        """Test control: move pod ``name``'s clock ``{"seconds": N}`` forward, as if it had
        been running N seconds longer: an ``activeDeadlineSeconds`` it passes ends it now,
        so a test controls when the deadline comes, whatever the machine's load. 404 for a
        missing pod."""
        pod = self.pods.get((request.match_info["ns"], request.match_info["name"]))
        if pod is None:
            return error(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        pod.aged += float((await request.json())["seconds"])
        pod.clock_moved.set()
        return web.json_response({"aged": pod.aged})

    async def blackhole(self, request: web.Request) -> web.Response:
        """Test control: every exec websocket open now goes silent both ways, as a
        connection that a load balancer or NAT forgot: TCP stays open, nothing is
        forwarded, pings are not answered. New exec websockets are not affected."""
        self.blackholed.update(self.open_bridges)
        return web.json_response({"blackholed": len(self.open_bridges)})

    async def bridge(self, ws: web.WebSocketResponse, sock: socket.socket, ex: Bridged, pod: Pod, early: bytes) -> None:
        """Docker's exec stream (starting with ``early``, the bytes that came with the
        response headers; multiplexed, or raw under a tty) <-> the channel websocket.
        Closing the websocket closes the exec's streams only: the process is not killed."""
        loop = asyncio.get_running_loop()
        eid, want_stdin = ex.eid, ex.stdin
        sock.setblocking(False)
        v5 = ws.ws_protocol == V5

        async def from_client() -> None:
            async for msg in ws:
                if ws in self.blackholed:
                    continue
                if msg.type == WSMsgType.PING:
                    await ws.pong(msg.data)
                    continue
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                channel, payload = msg.data[0], msg.data[1:]
                if channel == 0 and want_stdin and payload:
                    # Backpressure, as the API server's: wsstream's Conn.handle reads one
                    # message, then writes it to the channel's io.Pipe (DataFromSocket), which
                    # returns only once the stream to the kubelet took it, and reads nothing
                    # more meanwhile (k8s.io/apimachinery/pkg/util/httpstream/wsstream/conn.go;
                    # the exec handler copies that pipe into the SPDY stdin stream,
                    # k8s.io/apiserver/pkg/util/proxy/streamtranslator.go). Here the next
                    # message waits for Docker to take this one, and aiohttp stops reading the
                    # socket once 512 KiB of messages are queued: a process that stops reading
                    # its stdin closes the client's TCP window (FAKE_APISERVER.md).
                    await loop.sock_sendall(sock, payload)
                elif channel == RESIZE and ex.tty:
                    await self.resize(eid, payload)
                elif channel == 255 and v5 and payload[:1] == b"\x00":
                    try:
                        sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass

        reader = loop.create_task(from_client())
        buf = bytearray()
        data = early
        try:
            while True:
                data = data or await loop.sock_recv(sock, 262144)
                if not data:
                    break
                buf += data
                data = b""
                if ex.tty:  # one raw stream: all of it is stdout
                    if not ws.closed and ws not in self.blackholed:
                        await ws.send_bytes(b"\x01" + bytes(buf))
                    buf.clear()
                while len(buf) >= 8:
                    size = int.from_bytes(buf[4:8], "big")
                    if len(buf) < 8 + size:
                        break
                    stream, payload = buf[0], bytes(buf[8 : 8 + size])
                    del buf[: 8 + size]
                    if stream in (1, 2) and payload and not ws.closed and ws not in self.blackholed:
                        await ws.send_bytes(bytes([stream]) + payload)
        except (ConnectionError, OSError):
            pass
        while ws in self.blackholed and not ws.closed:
            await asyncio.sleep(0.2)  # a forgotten connection never delivers the end either
        if not ws.closed:
            code = await self.exec_exit_code(eid, pod)
            if code is not None:
                await ws.send_bytes(b"\x03" + json.dumps(exit_status(code)).encode())
            await ws.close()
        reader.cancel()

    async def resize(self, eid: str, payload: bytes) -> None:
        """A resize channel message: JSON ``TerminalSize`` objects (``{"Width": w,
        "Height": h}``, the field names of client-go's remotecommand.TerminalSize, which
        has no json tags), decoded one after another as kubelet's ``handleResizeEvents``
        (httpstream.go) does; the tty gets the last size (Docker's exec resize)."""
        size = None
        decoder, text = json.JSONDecoder(), payload.decode(errors="replace").strip()
        while text:
            try:
                size, end = decoder.raw_decode(text)
            except ValueError:
                break  # kubelet stops reading the resize stream at the first bad object
            text = text[end:].lstrip()
        if isinstance(size, dict):
            await self.blocking(self.docker.exec_resize, eid, height=size.get("Height"), width=size.get("Width"))

    async def exec_exit_code(self, eid: str, pod: Pod) -> int | None:
        """The exec's exit code; None (no status: the stream just closes, as when a
        kubelet loses the container) when the container is gone or was stopped. An exec
        killed by a signal may end before Docker marks its killed container exited: then
        the container is watched for up to a second before the code is trusted."""
        for _ in range(200):
            try:
                info = await self.blocking(self.docker.exec_inspect, eid)
            except NotFound:
                return None
            if not info.get("Running"):
                code = info.get("ExitCode")
                settle = time.monotonic() + (1.0 if code is None or code >= 128 else 0.0)
                while True:
                    await self.refresh(pod)
                    if pod.phase != "Running" or pod.deleting is not None:
                        return None
                    if time.monotonic() >= settle:
                        return code
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)
        return None


def exit_status(code: int) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What the Pod Security ``restricted`` level finds wrong with a pod spec, in the
    messages of k8s.io/pod-security-admission ``policy/check_allowPrivilegeEscalation.go``,
    ``check_capabilities_restricted.go``, ``check_runAsNonRoot.go``, ``check_runAsUser.go``,
    ``check_seccompProfile_restricted.go`` and ``check_restrictedVolumes.go`` (containers
    named one by one; the fake's pods have one)."""
    pod_ctx = spec.get("securityContext") or {}
    problems = []
    for c in spec.get("containers") or []:
        ctx, cname = c.get("securityContext") or {}, c.get("name", "")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(
                f'allowPrivilegeEscalation != false (container "{cname}" must set '
                "securityContext.allowPrivilegeEscalation=false)"
            )
        if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
            problems.append(
                f'unrestricted capabilities (container "{cname}" must set securityContext.capabilities.drop=["ALL"])'
            )
        if ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is not True:
            problems.append(
                f'runAsNonRoot != true (pod or container "{cname}" must set securityContext.runAsNonRoot=true)'
            )
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f'runAsUser=0 (pod or container "{cname}" must not set runAsUser=0)')
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(
                f'seccompProfile (pod or container "{cname}" must set securityContext.seccompProfile.type to '
                '"RuntimeDefault" or "Localhost")'
            )
    allowed = {"emptyDir", "configMap", "secret", "projected", "downwardAPI", "persistentVolumeClaim", "ephemeral"}
    for vol in spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if kinds - allowed:
            problems.append(f'restricted volume types (volume "{vol.get("name")}" uses {sorted(kinds)})')
    return problems


FORBIDDEN_TOKEN = "forbidden"
"""A bearer token this server answers 403 to, on every served route (RBAC denial)."""


def forbidden(request: web.Request) -> web.Response:
    verb = {"GET": "get", "POST": "create", "DELETE": "delete"}.get(request.method, request.method.lower())
    ns = request.match_info.get("ns", "")
    if request.path.endswith("/pods") and request.method == "GET":
        verb = "list"
    resource = "pods/exec" if request.path.endswith("/exec") else "pods"
    return error(
        403,
        "Forbidden",
        f'{resource} is forbidden: User "system:serviceaccount:{ns}:agent" cannot {verb} resource '
        f'"{resource}" in API group "" in the namespace "{ns}"',
    )


def wants_upgrade(request: web.Request) -> bool:
    """The request asks to switch to a websocket (``Upgrade: websocket``).

    Only the ``connect`` subresources (exec, attach, portforward, proxy) of a real API
    server switch protocols (k8s.io/apiserver ``pkg/endpoints/handlers/rest.go``,
    ``ConnectResource`` -> ``proxy.UpgradeAwareHandler``); every REST route ignores the
    header and answers as plain HTTP, so a websocket client that sent a REST call there
    fails with "Handshake status 200 OK". This fake does the same (aiohttp routes the
    request to the ordinary handler and never upgrades it) and logs the attempt as
    ``"upgrade": true`` so tests can assert that no REST call went out as a websocket."""
    return request.headers.get("Upgrade", "").lower() == "websocket"


def build_app(cluster: FakeCluster) -> web.Application:
    routes = [
        ("GET", "/version", cluster.version),
        ("GET", "/api/v1/namespaces/{ns}/pods", cluster.list),
        ("POST", "/api/v1/namespaces/{ns}/pods", cluster.create),
        ("GET", "/api/v1/namespaces/{ns}/pods/{name}", cluster.read),
        ("DELETE", "/api/v1/namespaces/{ns}/pods/{name}", cluster.delete),
        ("GET", "/api/v1/namespaces/{ns}/pods/{name}/exec", cluster.exec),
        ("POST", CONTROL_PREFIX + "faults", cluster.set_faults),
        ("POST", CONTROL_PREFIX + "namespaces/{ns}", cluster.set_namespace),
        ("POST", CONTROL_PREFIX + "blackhole", cluster.blackhole),
        ("POST", CONTROL_PREFIX + "pods/{ns}/{name}/age", cluster.age_pod),
    ]

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else "UNKNOWN"
        if template.startswith(CONTROL_PREFIX):
            return await handler(request)
        injected = cluster.faults.take(request) if resource is not None else None
        if isinstance(injected, float):
            await asyncio.sleep(injected)
            injected = None
        if injected is not None:
            response: web.StreamResponse = injected
        elif resource is None:
            response = error(404, "NotFound", f"the server could not find the requested resource ({request.path})")
            print(f"fake-apiserver: UNKNOWN route {request.method} {request.path_qs}", file=sys.stderr, flush=True)
        elif request.headers.get("Authorization", "") == f"Bearer {FORBIDDEN_TOKEN}":
            response = forbidden(request)
        else:
            response = await handler(request)
        entry = {
            "method": request.method,
            "route": template,
            "status": response.status,
            "path": request.path,
            "query": request.query_string,
            "upgrade": wants_upgrade(request),
        }
        os.write(cluster.log_fd, (json.dumps(entry) + "\n").encode())  # one write per line: read while written
        return response

    app = web.Application(middlewares=[record], client_max_size=1 << 26)
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    return app


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=48, thread_name_prefix="fake-docker"))
    cluster = FakeCluster(args.instance, args.protocols.split(","), args.log)
    # A request line (the exec's argv is in its query string) and headers of up to 1 MiB, as
    # the API server's http.Server allows (k8s.io/apiserver pkg/server/secure_serving.go:
    # MaxHeaderBytes 1 << 20); longer ones are refused (400 here, 431 there).
    limits = {"max_line_size": MAX_HEADER_BYTES, "max_field_size": MAX_HEADER_BYTES}
    runner = web.AppRunner(build_app(cluster), handle_signals=False, access_log=None, **limits)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=_tls_context(args.tls_cert, args.tls_key))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(port))
    os.replace(tmp, args.port_file)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchdog = loop.create_task(stop_when_orphaned(stop, args.parent_pid))
    await stop.wait()
    watchdog.cancel()
    await cluster.blocking(cluster.remove_all_containers)
    await runner.cleanup()


def _tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """HTTPS with this certificate (as the API server serves, `--tls-cert-file`), or None: HTTP."""
    if not cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def stop_when_orphaned(stop: asyncio.Event, parent: int) -> None:
    """Set ``stop`` once the process that started this server is gone (it was killed
    before it could stop us): the server then removes its containers and exits."""
    if not parent:
        return
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    print("fake-apiserver: parent process gone; shutting down", file=sys.stderr, flush=True)
    stop.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instance", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--protocols", default=f"{V5},{V4}")
    parser.add_argument("--parent-pid", type=int, default=0, help="exit (removing containers) when it is gone")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="the certificate's private key (PEM)")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
