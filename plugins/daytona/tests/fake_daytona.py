"""A local fake of the Daytona API for envlayer's tests: control plane and toolbox on one port.

Run as its own process (the tests do this)::

    python fake_daytona.py --port-file PORTFILE --route-log ROUTES.jsonl [--minute-seconds 60]
                           [--max-cpu N] [--instance ID]

It serves the subset of the Daytona REST API (SDK ``daytona`` 0.226.x) that envlayer's plugin
uses, with bodies the SDK's strict pydantic models accept. Each sandbox is a Docker container
(label ``envlayer-fake-daytona=<instance>``) made from the local image named by the create
request (``buildInfo.dockerfileContent`` ``FROM <image>``, or ``snapshot`` read as an image
name). Every request is appended to ``--route-log`` as one JSON line
``{"method", "route", "status", "known"}``; unknown routes answer 404 and are logged with
``known: false``. On SIGTERM/SIGINT, or when the ``--parent-pid`` process is no longer its
parent (the test run that started it was killed), it removes every container it made and exits.

What it assumes about the real service is written down in ``fake_daytona.md`` next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import email.policy
import io
import json
import os
import re
import shutil
import signal
import socket
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker
import fake_daytona_builds
from docker.errors import APIError, ImageNotFound, NotFound
from fake_daytona_agent import AGENT_DIR, Agents
from fake_daytona_pty import PtyRefused, PtySessions
from fake_daytona_snapshots import SnapshotError, Snapshots
from fake_daytona_user import ROOT, OsUser, find_user, home_archive

ORG = "org-envlayer-fake"
KEEP_ALIVE = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ApiError(Exception):
    """An HTTP error answer in Daytona's envelope (``headers`` are sent with it)."""

    def __init__(self, status: int, message: str, code: str = "", headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}


UNSAFE_DISPLAY = re.compile(
    r"<[a-zA-Z/][^>]*>?|https?://|ftps?://|sftp://|ssh://|wss?://|file://|ldaps?://|javascript:|data:|mailto:|tel:"
    r"|www\.|[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]",
    re.I,
)
"""What the API's IsSafeDisplayString refuses in a sandbox name (CreateSandboxDto.name;
apps/api/src/common/validators/is-safe-string.validator.ts): HTML tags, URLs, control
characters."""
STATE_CHANGE_IN_PROGRESS = "Sandbox state change in progress"
"""The 409 the API answers while a state change is under way
(apps/api/src/exceptions/state-change-in-progress.exception.ts)."""
DESIRED_STATES = ("destroyed", "started", "stopped", "resized", "archived", "paused")
"""The API's SandboxDesiredState values (daytona_api_client/models/sandbox_desired_state.py)."""

TRANSIENT_MESSAGES = {
    # @nestjs/throttler's ThrottlerException default message (the API's rate-limit guards,
    # apps/api/src/common/guards/authenticated-rate-limit.guard.ts, throw it; the
    # Retry-After header is set by apps/api/src/common/utils/rate-limit-headers.util.ts).
    429: "ThrottlerException: Too Many Requests",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class Faults:
    """Answers queued by a test for the next requests of a route (``POST /fake/faults``):
    throttling (429 with ``Retry-After``) and a gateway or service that is briefly down
    (502/503/504), in the API's error envelope; or (``delay``) a request that is answered
    only after that many seconds, as over a stalled network or an overloaded proxy (the
    request is then served as usual; a client that gave up has closed the connection)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queued: dict[str, list[ApiError]] = {}
        self.delays: dict[str, list[float]] = {}

    def add_delay(self, route: str, count: int, seconds: float) -> None:
        if count < 0 or not 0 <= seconds <= 600:
            raise ApiError(400, "faults: count >= 0 and 0 <= delay <= 600 seconds")
        with self.lock:
            self.delays.setdefault(route, []).extend(float(seconds) for _ in range(count))

    def delay(self, route: str) -> float:
        """Seconds the next request of ``route`` waits before it is served (0: none)."""
        with self.lock:
            queue = self.delays.get(route)
            return queue.pop(0) if queue else 0.0

    def add(self, route: str, count: int, status: int, retry_after: float | None) -> None:
        if status not in TRANSIENT_MESSAGES or count < 0:
            raise ApiError(400, f"faults: status must be one of {sorted(TRANSIENT_MESSAGES)}, count >= 0")
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        with self.lock:
            self.queued.setdefault(route, []).extend(
                ApiError(status, TRANSIENT_MESSAGES[status], headers=headers) for _ in range(count)
            )

    def take(self, route: str) -> ApiError | None:
        """The queued answer for this request of ``route``, if any."""
        with self.lock:
            queue = self.queued.get(route)
            return queue.pop(0) if queue else None


def _archived_file(api: Any, container: str, path: str) -> bytes | None:
    """The content of file ``path`` in the container (None for a directory), through the
    archive API. Raises docker's ``NotFound`` when there is no such path."""
    stream, _ = api.get_archive(container, path)
    raw = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        member = tar.next()
        if member is None or member.isdir():
            return None
        fh = tar.extractfile(member)
        return fh.read() if fh else b""


class Fake:
    """The sandboxes, their containers and the lifecycle timers."""

    def __init__(self, *, instance: str, minute: float, max_cpu: int, base_url: str, manual_clock: bool) -> None:
        self.api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
        self.instance = instance
        self.minute = minute
        self.max_cpu = max_cpu
        self.base_url = base_url
        self.lock = threading.RLock()
        self.tick_lock = threading.Lock()
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self.manual_time: float | None = time.time() if manual_clock else None
        self.builds: list[float] = []
        self.agents = Agents(self.api, tempfile.mkdtemp(prefix=f"fake-daytona-{instance}-"))
        self.snapshots = Snapshots(self.api, instance, _now)
        self.ptys = PtySessions(self.api)

    def exec(
        self, sb: dict[str, Any], argv: list[str], timeout: float | None = None, stdin: bytes | None = None
    ) -> tuple[int | None, bytes]:
        """Run argv in the sandbox as its user through its toolbox agent
        (fake_daytona_agent.py): (exit status, merged stdout and stderr); ``None`` status:
        killed at ``timeout``."""
        user: OsUser | None = sb.get("osUser")
        as_user = (user.name, user.home) if user else (None, None)
        return self.agents.run(sb["container"], sb["spool"], argv, timeout, *as_user, stdin=stdin)

    def now(self) -> float:
        """The lifecycle clock (seconds): the wall clock, or with ``--manual-clock`` a clock
        that moves only through :meth:`advance`."""
        return time.time() if self.manual_time is None else self.manual_time

    def advance(self, minutes: float) -> float:
        """Move the manual clock ``minutes`` Daytona minutes forward, then apply the lifecycle
        rules at the new time before returning (so the caller sees their effect at once)."""
        if self.manual_time is None:
            raise ApiError(400, "the fake's clock is the wall clock; start it with --manual-clock")
        if not minutes >= 0:
            raise ApiError(400, f"advanceMinutes must be >= 0, got {minutes}")
        with self.lock:
            self.manual_time += minutes * self.minute
        self.lifecycle_tick()
        return self.manual_time

    # --- sandboxes ------------------------------------------------------------------

    def find(self, id_or_name: str) -> dict[str, Any]:
        with self.lock:
            sb = self.sandboxes.get(id_or_name)
            if sb is None:
                sb = next((s for s in self.sandboxes.values() if s["name"] == id_or_name), None)
        if sb is None:
            raise ApiError(404, f"Sandbox with ID or name {id_or_name} not found", "SANDBOX_NOT_FOUND")
        return sb

    def dto(self, sb: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": sb["id"],
            "organizationId": ORG,
            "name": sb["name"],
            "user": sb["osUser"].name if sb.get("osUser") else "root",
            "env": sb["env"],
            "labels": sb["labels"],
            "public": False,
            "networkBlockAll": False,
            "kvm": False,
            "target": sb["target"],
            "cpu": sb["cpu"],
            "gpu": sb["gpu"],
            "memory": sb["memory"],
            "disk": sb["disk"],
            "state": sb["state"],
            "desiredState": self.desired(sb) if self.desired(sb) in DESIRED_STATES else None,
            "recoverable": sb.get("recoverable", False),
            "errorReason": sb.get("errorReason"),
            "snapshot": sb["snapshot"],
            "autoStopInterval": sb["autoStopInterval"],
            "autoArchiveInterval": 10080,
            "autoDeleteInterval": sb["autoDeleteInterval"],
            "createdAt": sb["createdAt"],
            "updatedAt": sb["updatedAt"],
            "lastActivityAt": sb["lastActivityAt"],
            "toolboxProxyUrl": f"{self.base_url}/toolbox",
        }

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        image = body.get("snapshot") and (self.snapshots.image_of(body["snapshot"]) or body["snapshot"])
        build_info = body.get("buildInfo") or {}
        failure = ""
        if build_info.get("dockerfileContent"):
            image, failure = self._image_of(build_info)
        if failure:
            return self._build_failed(body, failure)
        if not image:
            raise ApiError(400, "a snapshot or an image is required (the fake has no default snapshot)")
        try:
            self.api.inspect_image(image)
        except ImageNotFound:
            what = "Snapshot" if body.get("snapshot") else "Image"
            raise ApiError(404 if body.get("snapshot") else 400, f"{what} {image} not found", "NOT_FOUND") from None
        cpu = int(body.get("cpu") or 1)
        name = body.get("name") or uuid.uuid4().hex
        if UNSAFE_DISPLAY.search(name):
            raise ApiError(400, "name must not contain HTML tags, URLs, or control characters", "BAD_REQUEST")
        with self.lock:
            if any(s["name"] == name for s in self.sandboxes.values()):
                raise ApiError(409, f"Sandbox with name {name} already exists", "CONFLICT")
            used = sum(s["cpu"] for s in self.sandboxes.values() if s["state"] == "started")
            if self.max_cpu and used + cpu > self.max_cpu:
                raise ApiError(403, f"Total CPU limit exceeded. Maximum allowed: {self.max_cpu}", "QUOTA_EXCEEDED")
            sid = str(uuid.uuid4())
            now = _now()
            sb = {
                "id": sid,
                "name": name,
                "env": body.get("env") or {},
                "labels": body.get("labels") or {},
                "target": body.get("target") or "local",
                "cpu": cpu,
                "gpu": int(body.get("gpu") or 0),
                "memory": int(body.get("memory") or 1),
                "disk": int(body.get("disk") or 3),
                "state": "creating",
                "user": body.get("user"),
                "snapshot": image,
                "autoStopInterval": 15 if body.get("autoStopInterval") is None else int(body["autoStopInterval"]),
                "autoDeleteInterval": -1 if body.get("autoDeleteInterval") is None else int(body["autoDeleteInterval"]),
                "ttlMinutes": int(body.get("ttlMinutes") or 0),
                "createdAt": now,
                "updatedAt": now,
                "lastActivityAt": now,
                "created": self.now(),
                "activity": self.now(),
                "stoppedAt": None,
                "container": None,
            }
            self.sandboxes[sid] = sb
        build = self.take_build() if build_info else None
        self._make_container(sb, image, start=build is None)
        if build is not None:
            # An image create answers at once in pending_build while the snapshot is built
            # (the SDK's Daytona._create waits from there: daytona/_sync/daytona.py); the
            # API lets a pending build be destroyed (SandboxService.destroy).
            self.hold(sb, {"state": "pending_build", "then": "started", "seconds": build})
            return sb
        self._state(sb, "started")
        return sb

    def _image_of(self, build_info: dict[str, Any]) -> tuple[str | None, str]:
        """(image, build failure) of a create's ``buildInfo`` (see ``fake_daytona_builds``)."""
        content = build_info["dockerfileContent"]
        plain = fake_daytona_builds.plain_image(content)
        if plain is not None:
            return plain, ""
        if build_info.get("contextHashes"):
            raise ApiError(
                400, "the fake Daytona server takes no build context (contextHashes): it has no object storage"
            )
        tag, failure = fake_daytona_builds.build(self.api, content, self.instance)
        return (tag or None), failure

    def _build_failed(self, body: dict[str, Any], reason: str) -> dict[str, Any]:
        """A sandbox whose snapshot build failed: state ``build_failed``, ``errorReason`` the
        build's failure, no container (what the SDK's ``wait_for_sandbox_start`` raises on)."""
        now = _now()
        sid = str(uuid.uuid4())
        sb = {
            "id": sid, "name": body.get("name") or sid, "env": body.get("env") or {},
            "labels": body.get("labels") or {}, "target": body.get("target") or "local", "cpu": 1, "gpu": 0,
            "memory": 1, "disk": 3, "state": "build_failed", "errorReason": reason, "recoverable": False,
            "user": body.get("user"), "snapshot": None, "autoStopInterval": 15, "autoDeleteInterval": -1,
            "ttlMinutes": 0, "createdAt": now, "updatedAt": now, "lastActivityAt": now, "created": self.now(),
            "activity": self.now(), "stoppedAt": None, "container": None,
        }  # fmt: skip
        with self.lock:
            if any(s["name"] == sb["name"] for s in self.sandboxes.values()):
                raise ApiError(409, f"Sandbox with name {sb['name']} already exists", "CONFLICT")
            self.sandboxes[sid] = sb
        return sb

    def _make_container(self, sb: dict[str, Any], image: str, *, start: bool) -> None:
        """Create (and, with ``start``, start) the sandbox's container; on failure forget the
        sandbox and answer 500."""
        sb["spool"] = self.agents.spool(sb["id"])
        try:
            container = self.api.create_container(
                image,
                command=KEEP_ALIVE,
                name=f"fake-daytona-{sb['id']}",
                labels={"envlayer-fake-daytona": self.instance},
                environment=sb["env"],
                # No network: nothing beyond this machine is reachable from a test, loopback
                # still works, and a networked container costs dockerd a bridge endpoint and a
                # libnetwork-setkey hook process (about 120 ms more CPU per sandbox).
                network_disabled=True,
                host_config=self.api.create_host_config(
                    init=True, binds={sb["spool"]: {"bind": AGENT_DIR, "mode": "rw"}}
                ),
            )
            sb["container"] = container["Id"]
            if sb["user"]:
                sb["osUser"] = self._prepare_user(container["Id"], sb["user"], image)
            if start:
                self.api.start(container["Id"])
        except (APIError, ApiError) as exc:
            with self.lock:
                self.sandboxes.pop(sb["id"], None)
            if sb["container"]:
                with contextlib.suppress(Exception):
                    self.api.remove_container(sb["container"], force=True)
            self.agents.forget(sb["container"] or "", sb["spool"])
            if isinstance(exc, ApiError):
                raise
            raise ApiError(500, f"could not start the sandbox: {exc.explanation or exc}") from exc

    def _prepare_user(self, container: str, name: str, image: str) -> OsUser:
        """The create request's ``user`` as the image defines it, its home directory made
        (owned by it) in the container before it starts; 400 when the image lacks the user
        (assumed behaviour: fake_daytona_user.py)."""
        try:
            passwd = _archived_file(self.api, container, "/etc/passwd")
        except NotFound:
            passwd = None
        user = find_user(passwd, name)
        if user is None:
            raise ApiError(
                400,
                f"user {name!r} does not exist in image {image} (no /etc/passwd entry): "
                "add the user to the image or leave os_user unset",
                "BAD_REQUEST",
            )
        if user != ROOT:
            self.api.put_archive(container, "/", home_archive(user))
        return user

    def add_builds(self, seconds: float, count: int) -> None:
        """Test switch (``POST /fake/build``): the next ``count`` creates from an image stay
        in ``pending_build`` for ``seconds`` before they start."""
        with self.lock:
            self.builds.extend([seconds] * count)

    def take_build(self) -> float | None:
        with self.lock:
            return self.builds.pop(0) if self.builds else None

    def _state(self, sb: dict[str, Any], state: str) -> None:
        sb["state"] = state
        sb["updatedAt"] = _now()
        if state == "started":
            self.touch(sb)
        if state in ("stopped", "archived"):
            sb["stoppedAt"] = self.now()

    def touch(self, sb: dict[str, Any]) -> None:
        sb["activity"] = self.now()
        sb["lastActivityAt"] = _now()

    # --- state changes as the API rules them (apps/api/src/sandbox/services/sandbox.service.ts) ---

    def desired(self, sb: dict[str, Any]) -> str:
        """The sandbox's ``desiredState``: what a state change in progress is heading to,
        else the state itself (the server's getDesiredStateForState)."""
        state = sb["state"]
        settled = state if state in (*DESIRED_STATES, "error", "build_failed") else "started"
        return sb.get("desiredState") or settled

    def transitioning(self, sb: dict[str, Any]) -> bool:
        """A state change is in progress: ``pending``, or the state is not the desired one."""
        return bool(sb.get("pending")) or sb["state"] != self.desired(sb)

    def check_start(self, sb: dict[str, Any]) -> bool:
        """``SandboxService.start``'s checks; False when it is already started."""
        if sb["state"] == "started" and self.desired(sb) == "started":
            return False
        if sb["state"] in ("error", "build_failed"):
            raise ApiError(400, "Sandbox is in an errored state")
        if self.transitioning(sb):
            raise self.refuse(sb)
        if sb["state"] not in ("stopped", "archived", "archiving", "paused"):
            raise ApiError(400, "Sandbox is not in valid state")
        return True

    def check_stop(self, sb: dict[str, Any]) -> None:
        """``SandboxService.stop``'s checks."""
        if sb["state"] in ("error", "build_failed"):
            raise ApiError(400, "Sandbox is in an errored state")
        if self.transitioning(sb):
            raise self.refuse(sb)
        if sb["state"] not in ("started", "paused"):
            raise ApiError(400, "Sandbox is not started")

    def check_destroy(self, sb: dict[str, Any]) -> None:
        """``SandboxService.destroy``: refused while pending, except a pending build."""
        if self.transitioning(sb) and sb["state"] != "pending_build":
            raise self.refuse(sb)

    def recover(self, sb: dict[str, Any]) -> None:
        """``SandboxService.recover`` (in place): only a recoverable sandbox in ``error``."""
        if not sb.get("recoverable"):
            raise ApiError(400, "Sandbox is not in a recoverable state")
        if sb["state"] != "error":
            raise ApiError(400, "Sandbox must be in error state to recover")
        sb.update(recoverable=False, errorReason=None, desiredState=None)
        self.settle(sb, "started")

    def hold(self, sb: dict[str, Any], spec: dict[str, Any]) -> None:
        """Test switch (``POST /fake/hold``): put the sandbox in ``state`` now (with
        ``recoverable``/``errorReason`` for ``error``); with ``then``, a state change to it is
        under way until ``seconds`` have passed or the API has refused ``refusals`` requests
        because of it (409), whichever comes first; then the sandbox reaches ``then`` (its
        container started, stopped, paused or removed accordingly). A later hold replaces it."""
        state, then = spec["state"], spec.get("then")
        with self.lock:
            generation = sb.get("holdGeneration", 0) + 1
            sb.update(
                recoverable=bool(spec.get("recoverable")),
                errorReason=spec.get("errorReason"),
                desiredState=then if then in DESIRED_STATES else None,
                pending=then is not None,
                holdGeneration=generation,
                holdThen=then,
                holdRefusals=int(spec.get("refusals") or 0),
            )
            self._state(sb, state)
        if then is not None and spec.get("seconds") is not None:
            self._settle_later(sb, generation, float(spec["seconds"]))

    def _settle_later(self, sb: dict[str, Any], generation: int, seconds: float) -> None:
        def finish() -> None:
            with self.lock:
                if sb.get("holdGeneration") != generation or not sb.get("pending") or sb["state"] == "destroyed":
                    return  # replaced by a later hold, ended, or the sandbox was deleted
                sb.update(pending=False, desiredState=None)
            self.settle(sb, sb["holdThen"])

        timer = threading.Timer(seconds, finish)
        timer.daemon = True
        timer.start()

    def refuse(self, sb: dict[str, Any]) -> ApiError:
        """The 409 for a request refused during a state change (counted for ``refusals``)."""
        with self.lock:
            left = sb.get("holdRefusals", 0)
            if left:
                sb["holdRefusals"] = left - 1
                if left == 1:
                    self._settle_later(sb, sb["holdGeneration"], 0)
        return ApiError(409, STATE_CHANGE_IN_PROGRESS)

    def settle(self, sb: dict[str, Any], state: str) -> None:
        """Bring the sandbox's container to ``state`` and record it."""
        container = sb["container"]
        if state == "destroyed":
            self.delete(sb)
            return
        if state == "started":
            status = self.api.inspect_container(container)["State"]
            if status.get("Paused"):
                self.api.unpause(container)
            elif not status.get("Running"):
                self.api.start(container)
        elif state in ("stopped", "archived"):
            self.api.stop(container, timeout=1)
        elif state == "paused":
            self.api.pause(container)
        with self.lock:
            self._state(sb, state)

    def start(self, sb: dict[str, Any]) -> None:
        if self.check_start(sb):
            self.settle(sb, "started")

    def stop(self, sb: dict[str, Any], state: str = "stopped") -> None:
        if sb["state"] == "started":
            self._state(sb, "stopping")
            self.api.stop(sb["container"], timeout=1)
        self._state(sb, state)

    def delete(self, sb: dict[str, Any]) -> None:
        with contextlib.suppress(NotFound):
            self.api.remove_container(sb["container"], force=True)
        self.agents.forget(sb["container"], sb["spool"])
        with self.lock:
            self.sandboxes.pop(sb["id"], None)
        self._state(sb, "destroyed")

    def running(self, sandbox_id: str) -> dict[str, Any]:
        sb = self.find(sandbox_id)
        if sb["state"] != "started":
            raise ApiError(400, f"Sandbox {sandbox_id} is not started (state: {sb['state']})", "SANDBOX_NOT_STARTED")
        return sb

    def lifecycle_tick(self) -> None:
        """Auto-stop after autoStopInterval minutes without API activity, auto-delete
        autoDeleteInterval minutes after stopping (0: at once), TTL from creation. Serialized:
        the timer thread and :meth:`advance` may call it at the same time."""
        with self.tick_lock:
            self._lifecycle_tick(self.now())

    def _lifecycle_tick(self, now: float) -> None:
        for sb in list(self.sandboxes.values()):
            try:
                if sb["ttlMinutes"] and now - sb["created"] > sb["ttlMinutes"] * self.minute:
                    self.delete(sb)
                    continue
                idle = now - sb["activity"]
                if sb["state"] == "started" and sb["autoStopInterval"] and idle > sb["autoStopInterval"] * self.minute:
                    self.stop(sb)
                stopped_for = now - (sb["stoppedAt"] or now)
                deletable = sb["state"] in ("stopped", "archived") and sb["autoDeleteInterval"] >= 0
                if deletable and stopped_for >= sb["autoDeleteInterval"] * self.minute:
                    self.delete(sb)
            except Exception as exc:  # keep the timer alive; the test sees the state
                print(f"lifecycle error for {sb['id']}: {exc}", file=sys.stderr)

    def remove_all(self) -> None:
        for summary in self.api.containers(all=True, filters={"label": f"envlayer-fake-daytona={self.instance}"}):
            with contextlib.suppress(Exception):
                self.api.remove_container(summary["Id"], force=True)
        self.snapshots.remove_all()
        shutil.rmtree(self.agents.root, ignore_errors=True)

    def take_snapshot(self, sb: dict[str, Any], name: str) -> None:
        """Snapshot a started sandbox (fake_daytona_snapshots.py): ``snapshotting`` while
        its container is committed in the background, then ``started`` again."""
        if sb["state"] != "started":
            raise ApiError(400, f"Sandbox {sb['id']} is not started (state: {sb['state']})", "BAD_REQUEST")
        record = self.snapshots.begin(name, sb)
        self._state(sb, "snapshotting")

        def commit() -> None:
            self.snapshots.commit(record)
            with self.lock:
                if sb["state"] == "snapshotting":
                    self._state(sb, "started")

        threading.Thread(target=commit, daemon=True).start()

    # --- toolbox: files ---------------------------------------------------------------

    def file_info(self, sb: dict[str, Any], path: str) -> dict[str, Any]:
        script = (
            'if [ -d "$1" ]; then echo d 0; elif [ -e "$1" ]; then echo f $(stat -L -c %s -- "$1"); else echo none; fi'
        )
        _, out = self.exec(sb, ["sh", "-c", script, "info", path])
        kind, *rest = out.decode().split() or ["none"]
        if kind == "none":
            raise ApiError(404, f"file not found: {path}", "FILE_NOT_FOUND")
        return {
            "name": os.path.basename(path.rstrip("/")) or "/",
            "isDir": kind == "d",
            "size": int(rest[0]),
            "mode": "0644",
            "modTime": _now(),
            "owner": sb["osUser"].name if sb.get("osUser") else "root",
            "group": sb["osUser"].name if sb.get("osUser") else "root",
            "permissions": "-rw-r--r--",
        }

    def upload(self, sb: dict[str, Any], path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` as the sandbox's user (missing parents made); 400 for a
        directory or a parent that cannot be made, 403 when the user may not write it."""
        parent = os.path.dirname(path) or "/"
        script = (
            'if [ -d "$1" ]; then echo dir; exit 0; fi; mkdir -p -- "$2" 2>/dev/null || { echo parent; exit 0; }; '
            'cat > "$1" 2>/dev/null || echo denied'
        )
        _, out = self.exec(sb, ["sh", "-c", script, "upload", path, parent], stdin=data)
        said = out.strip()
        if said == b"dir":
            raise ApiError(400, f"is a directory: {path}", "IS_DIRECTORY")
        if said == b"parent":
            raise ApiError(400, f"cannot create the parent directory of {path}", "INVALID_PATH")
        if said:
            raise ApiError(403, f"permission denied: {path}", "FORBIDDEN")

    def download(self, sb: dict[str, Any], path: str) -> tuple[bytes | None, dict[str, Any] | None]:
        """The content of ``path`` read as the sandbox's user, or the error part's body."""
        script = 'if [ -d "$1" ]; then exit 3; fi; [ -e "$1" ] || exit 4; exec cat -- "$1" 2>/dev/null'
        code, out = self.exec(sb, ["sh", "-c", script, "download", path])
        if code == 0:
            return out, None
        if code == 3:
            return None, {"message": f"is a directory: {path}", "statusCode": 400, "code": "IS_DIRECTORY"}
        if code == 4:
            return None, {"message": f"file not found: {path}", "statusCode": 404, "code": "FILE_NOT_FOUND"}
        return None, {"message": f"permission denied: {path}", "statusCode": 403, "code": "FORBIDDEN"}


def _error_body(status: int, message: str, code: str, path: str) -> dict[str, Any]:
    """The API's error envelope: ``error`` is the status's reason phrase, as the server's
    ``AllExceptionsFilter`` writes it (apps/api/src/filters/all-exceptions.filter.ts:
    ``STATUS_CODES[statusCode]``); ``code`` and ``source`` are what the SDK reads when present."""
    return {
        "statusCode": status,
        "message": message,
        "code": code or "ERROR",
        "error": HTTPStatus(status).phrase,
        "path": path,
        "timestamp": _now(),
        "source": "DAYTONA_API",
    }


class Handler(BaseHTTPRequestHandler):
    """Routes: see the ROUTES table. Anything else is 404 and logged as unknown."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    fake: Fake
    faults: Faults
    route_log: int

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self, method: str) -> None:
        """Serve one request. The route log entry is written before the answer is sent, so a
        test that reads the log after its call returned always finds that call in it."""
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        route = "unknown"
        try:
            for pattern, verb, name, handler in ROUTES:
                m = pattern.fullmatch(url.path)
                if m and verb == method:
                    route = name
                    if name != "socket.io" and self.headers.get("Authorization") != f"Bearer {API_KEY}":
                        raise ApiError(401, "Invalid credentials", "UNAUTHORIZED")
                    fault = None if name.startswith("fake.") else self.faults.take(name)
                    if fault is not None:
                        raise fault
                    if not name.startswith("fake."):
                        time.sleep(self.faults.delay(name))
                    status, payload, headers = handler(self, body, query, *m.groups())
                    break
            else:
                raise ApiError(404, f"Cannot {method} {url.path}", "NOT_FOUND")
        except (ApiError, SnapshotError, PtyRefused) as exc:
            status, headers = exc.status, getattr(exc, "headers", {})
            payload = _error_body(exc.status, exc.message, exc.code, url.path)
        except Exception as exc:
            status, headers = 500, {}
            payload = _error_body(500, f"{type(exc).__name__}: {exc}", "INTERNAL", url.path)
        self._log_route(method, route, status, url.path)
        if callable(payload):  # a WebSocket route: it answers the upgrade and serves the connection
            payload()
            return
        self._send(status, payload, headers)

    def _log_route(self, method: str, route: str, status: int, path: str) -> None:
        entry = {"method": method, "route": route, "status": status, "known": route != "unknown"}
        if route == "unknown":
            entry["path"] = path
        os.write(self.route_log, (json.dumps(entry) + "\n").encode())  # one write per line: threads, readers

    def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        if isinstance(payload, bytes):
            data = payload
        elif payload is None:
            data = b""
        else:
            data = json.dumps(payload).encode()
            headers = {"Content-Type": "application/json", **headers}
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --- control plane ------------------------------------------------------------------

    def create(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        return 200, self.fake.dto(self.fake.create(json.loads(body or b"{}"))), {}

    def get(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        return 200, self.fake.dto(self.fake.find(sid)), {}

    def list(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        wanted = json.loads(q.get("labels") or "{}")
        states = set(parse_qs(urlsplit(self.path).query).get("states", []))
        with self.fake.lock:
            items = [
                self.fake.dto(s)
                for s in self.fake.sandboxes.values()
                if all(s["labels"].get(k) == v for k, v in wanted.items()) and (not states or s["state"] in states)
            ]
        return 200, {"items": items, "nextCursor": None}, {}

    def delete(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        self.fake.check_destroy(sb)
        self.fake.delete(sb)
        return 200, self.fake.dto(sb), {}

    def start(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        self.fake.start(sb)
        return 200, self.fake.dto(sb), {}

    def stop(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        self.fake.check_stop(sb)
        self.fake.stop(sb)
        return 200, self.fake.dto(sb), {}

    def recover(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        self.fake.recover(sb)
        return 200, self.fake.dto(sb), {}

    def hold(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        spec = json.loads(body or b"{}")
        sb = self.fake.find(str(spec.get("sandbox")))
        self.fake.hold(sb, spec)
        return 200, self.fake.dto(sb), {}

    def archive(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        self.fake.stop(sb, "archived")
        return 200, self.fake.dto(sb), {}

    def labels(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        sb["labels"] = json.loads(body)["labels"]
        return 200, {"labels": sb["labels"]}, {}

    def autostop(self, body: bytes, q: dict[str, str], sid: str, n: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        sb["autoStopInterval"] = int(n)
        self.fake.touch(sb)
        return 200, self.fake.dto(sb), {}

    def activity(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        self.fake.touch(self.fake.find(sid))
        return 201, None, {}

    def proxy_url(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        self.fake.find(sid)
        return 200, {"url": f"{self.fake.base_url}/toolbox"}, {}

    def clock(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        minutes = json.loads(body or b"{}").get("advanceMinutes", 0)
        if not isinstance(minutes, (int, float)):
            raise ApiError(400, f"advanceMinutes must be a number, got {minutes!r}")
        return 200, {"now": self.fake.advance(float(minutes))}, {}

    def add_faults(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        spec = json.loads(body or b"{}")
        route, count = str(spec.get("route")), int(spec.get("count", 1))
        if spec.get("delay") is not None:
            self.faults.add_delay(route, count, float(spec["delay"]))
        else:
            self.faults.add(route, count, int(spec.get("status", 429)), spec.get("retryAfter"))
        return 200, {"queued": spec}, {}

    def add_builds(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        spec = json.loads(body or b"{}")
        self.fake.add_builds(float(spec["seconds"]), int(spec.get("count", 1)))
        return 200, {"queued": spec}, {}

    def socket_io(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        raise ApiError(404, "no event websocket in the fake: the SDK falls back to polling")

    def sandbox_snapshot(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.find(sid)
        self.fake.take_snapshot(sb, str(json.loads(body or b"{}").get("name") or ""))
        return 200, self.fake.dto(sb), {}

    def snapshot_get(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        snapshots = self.fake.snapshots
        return 200, snapshots.read(snapshots.find(sid)), {}

    def snapshot_list(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        page, limit = int(q.get("page") or 1), int(q.get("limit") or 100)
        return 200, self.fake.snapshots.listing(page, limit, q.get("name") or ""), {}

    def snapshot_created(self, body: bytes, q: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        spec = json.loads(body or b"{}")
        return 200, self.fake.snapshots.set_created(str(spec.get("snapshot")), spec.get("createdAt")), {}

    def snapshot_delete(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        snapshots = self.fake.snapshots
        snapshots.remove(snapshots.find(sid))
        return 200, None, {}

    # --- toolbox ------------------------------------------------------------------------

    def execute(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.running(sid)
        req = json.loads(body)
        argv = ["sh", "-c", req["command"]]
        if req.get("cwd"):
            argv = ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "cwd", req["cwd"], *argv]
        env = [f"{k}={v}" for k, v in (req.get("envs") or {}).items()]
        if env:
            argv = ["env", *env, *argv]
        code, out = self.fake.exec(sb, argv, timeout=req.get("timeout") or None)
        if code is None:
            raise ApiError(408, "command execution timeout", "PROCESS_EXECUTION_TIMEOUT")
        return 200, {"exitCode": code, "result": out.decode(errors="replace")}, {}

    def pty_connect(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.running(sid)
        return 101, self.fake.ptys.connect(self, sb, q), {}

    def pty_resize(self, body: bytes, q: dict[str, str], sid: str, session: str) -> tuple[int, Any, dict[str, str]]:
        return 200, self.fake.ptys.resize(self.fake.running(sid), session, json.loads(body or b"{}")), {}

    def files_info(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        return 200, self.fake.file_info(self.fake.running(sid), q["path"]), {}

    def files_folder(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.running(sid)
        code, out = self.fake.exec(sb, ["mkdir", "-p", "--", q["path"]])
        if code:
            raise ApiError(400, out.decode(errors="replace").strip(), "INVALID_PATH")
        return 201, None, {}

    def files_delete(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.running(sid)
        flag = "-rf" if q.get("recursive") == "true" else "-f"
        self.fake.exec(sb, ["rm", flag, "--", q["path"]])
        return 204, None, {}

    def bulk_upload(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.running(sid)
        head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        paths: dict[str, str] = {}
        files: dict[str, bytes] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition") or ""
            m = re.fullmatch(r"files\[(\d+)\]\.(path|file)", name)
            if not m:
                continue
            payload = part.get_payload(decode=True) or b""
            if m.group(2) == "path":
                paths[m.group(1)] = payload.decode()
            else:
                files[m.group(1)] = payload
        for index, path in paths.items():
            self.fake.upload(sb, path, files.get(index, b""))
        return 200, None, {}

    def bulk_download(self, body: bytes, q: dict[str, str], sid: str) -> tuple[int, Any, dict[str, str]]:
        sb = self.fake.running(sid)
        boundary = uuid.uuid4().hex
        out = io.BytesIO()
        for path in json.loads(body)["paths"]:
            data, error = self.fake.download(sb, path)
            quoted = path.replace("\\", "\\\\").replace('"', '\\"')
            out.write(f"--{boundary}\r\n".encode())
            if error is None:
                out.write(f'Content-Disposition: form-data; name="file"; filename="{quoted}"\r\n'.encode())
                out.write(b"Content-Type: application/octet-stream\r\n\r\n" + (data or b"") + b"\r\n")
            else:
                out.write(f'Content-Disposition: form-data; name="error"; filename="{quoted}"\r\n'.encode())
                out.write(b"Content-Type: application/json\r\n\r\n" + json.dumps(error).encode() + b"\r\n")
        out.write(f"--{boundary}--\r\n".encode())
        return 200, out.getvalue(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


_ID = r"([^/]+)"
ROUTES = [
    (re.compile(r"/api/socket\.io/?"), "GET", "socket.io", Handler.socket_io),
    (re.compile(r"/fake/clock"), "POST", "fake.clock", Handler.clock),
    (re.compile(r"/fake/faults"), "POST", "fake.faults", Handler.add_faults),
    (re.compile(r"/fake/hold"), "POST", "fake.hold", Handler.hold),
    (re.compile(r"/fake/build"), "POST", "fake.build", Handler.add_builds),
    (re.compile(r"/fake/snapshot-created"), "POST", "fake.snapshot-created", Handler.snapshot_created),
    (re.compile(r"/api/sandbox"), "POST", "create", Handler.create),
    (re.compile(r"/api/sandbox"), "GET", "list", Handler.list),
    (re.compile(rf"/api/sandbox/{_ID}"), "GET", "get", Handler.get),
    (re.compile(rf"/api/sandbox/{_ID}"), "DELETE", "delete", Handler.delete),
    (re.compile(rf"/api/sandbox/{_ID}/start"), "POST", "start", Handler.start),
    (re.compile(rf"/api/sandbox/{_ID}/stop"), "POST", "stop", Handler.stop),
    (re.compile(rf"/api/sandbox/{_ID}/archive"), "POST", "archive", Handler.archive),
    (re.compile(rf"/api/sandbox/{_ID}/recover"), "POST", "recover", Handler.recover),
    (re.compile(rf"/api/sandbox/{_ID}/labels"), "PUT", "labels", Handler.labels),
    (re.compile(rf"/api/sandbox/{_ID}/autostop/(\d+)"), "POST", "autostop", Handler.autostop),
    (re.compile(rf"/api/sandbox/{_ID}/last-activity"), "POST", "last-activity", Handler.activity),
    (re.compile(rf"/api/sandbox/{_ID}/toolbox-proxy-url"), "GET", "toolbox-proxy-url", Handler.proxy_url),
    (re.compile(rf"/api/sandbox/{_ID}/snapshot"), "POST", "sandbox.snapshot", Handler.sandbox_snapshot),
    (re.compile(r"/api/snapshots"), "GET", "snapshots.list", Handler.snapshot_list),
    (re.compile(rf"/api/snapshots/{_ID}"), "GET", "snapshots.get", Handler.snapshot_get),
    (re.compile(rf"/api/snapshots/{_ID}"), "DELETE", "snapshots.delete", Handler.snapshot_delete),
    (re.compile(rf"/toolbox/{_ID}/process/execute"), "POST", "process.execute", Handler.execute),
    (
        re.compile(rf"/toolbox/{_ID}/process/pty/create-connect"),
        "GET",
        "process.pty.create-connect",
        Handler.pty_connect,
    ),
    (re.compile(rf"/toolbox/{_ID}/process/pty/{_ID}/resize"), "POST", "process.pty.resize", Handler.pty_resize),
    (re.compile(rf"/toolbox/{_ID}/files/info"), "GET", "files.info", Handler.files_info),
    (re.compile(rf"/toolbox/{_ID}/files/folder"), "POST", "files.folder", Handler.files_folder),
    (re.compile(rf"/toolbox/{_ID}/files"), "DELETE", "files.delete", Handler.files_delete),
    (re.compile(rf"/toolbox/{_ID}/files/bulk-upload"), "POST", "files.bulk-upload", Handler.bulk_upload),
    (re.compile(rf"/toolbox/{_ID}/files/bulk-download"), "POST", "files.bulk-download", Handler.bulk_download),
]

API_KEY = os.environ.get("ENVLAYER_FAKE_DAYTONA_KEY", "envlayer-fake-key")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--route-log", required=True)
    parser.add_argument("--minute-seconds", type=float, default=60.0, help="real seconds in one Daytona minute")
    parser.add_argument(
        "--manual-clock",
        action="store_true",
        help="lifecycle time moves only on POST /fake/clock {advanceMinutes} (test-controlled auto-stop)",
    )
    parser.add_argument("--max-cpu", type=int, default=0, help="total CPU quota of started sandboxes (0: none)")
    parser.add_argument("--instance", default=uuid.uuid4().hex[:12])
    parser.add_argument("--parent-pid", type=int, default=0, help="exit (removing its containers) when it dies")
    args = parser.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    fake = Fake(
        instance=args.instance,
        minute=args.minute_seconds,
        max_cpu=args.max_cpu,
        base_url=f"http://127.0.0.1:{port}",
        manual_clock=args.manual_clock,
    )
    Handler.fake = fake
    Handler.faults = Faults()
    Handler.route_log = os.open(args.route_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def tick() -> None:
        while not stopping.wait(min(1.0, args.minute_seconds / 4)):
            fake.lifecycle_tick()

    threading.Thread(target=tick, daemon=True).start()

    def watch_parent() -> None:
        while not stopping.wait(1.0):
            if os.getppid() != args.parent_pid:  # the test run that started us is gone (killed)
                stop(0, None)
                return

    if args.parent_pid:
        threading.Thread(target=watch_parent, daemon=True).start()
    tmp = f"{args.port_file}.tmp"
    with open(tmp, "w") as fh:
        fh.write(str(port))
    os.replace(tmp, args.port_file)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        fake.remove_all()


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    main()
