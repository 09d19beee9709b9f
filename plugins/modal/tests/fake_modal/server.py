"""A fake Modal API server for the envlayer-modal tests: the real, unmodified ``modal`` SDK
talks to it over plain HTTP/2 gRPC on 127.0.0.1, and its sandboxes are Docker containers.

Run as a script (the tests and the benchmark start it as a separate process)::

    python server.py --port-file PATH --log PATH [--page-size N]

It serves two gRPC services on one port: the control plane (``modal.client.ModalClient``,
subclassing ``modal_proto.api_grpc.ModalClientBase``) and the task command router
(``TaskCommandRouterBase``); the router URL it hands out is the same address. Every RPC it
does not implement answers ``UNIMPLEMENTED``. Every RPC received is appended to the log
(one JSON object a line: ``who`` = the caller's token id, ``rpc``, ``unimplemented``), so
tests can assert which RPCs a scenario used.

It drives Docker through the Engine API on the daemon's socket (``docker_api.py``), with no
``docker`` CLI process per call, and learns that a container stopped from one event stream.
On SIGTERM/SIGINT, or when the ``--parent-pid`` process is gone (a killed test run), it
removes every container and snapshot image it made (label ``envlayer-fake-modal=<run id>``)
and exits. What it
assumes about Modal is written in ``ASSUMPTIONS.md`` beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import docker_api
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream
from image_builds import ImageBuilds
from modal_proto import api_grpc, api_pb2, task_command_router_grpc
from modal_proto import task_command_router_pb2 as sr_pb2

FS_TOOLS = "/__modal/.bin/modal-sandbox-fs-tools"
CONTAINER_LABEL = "envlayer-fake-modal"
IMAGE_BUILDER_VERSION = "2025.06"
SNAPSHOT_REPOSITORY = "fake-modal-snapshot"
SNAPSHOT_LABEL = "envlayer-fake-modal.image-id"
R = api_pb2.GenericResult
STDIO_SLOW_CHUNK = 65536


async def remove_container(name: str) -> None:
    """``docker rm -f``; a container already gone is no error."""
    with contextlib.suppress(docker_api.DockerError):
        await docker_api.call("DELETE", f"/containers/{name}", query={"force": "1"})


async def run_to_end(container: str, argv: list[str]) -> None:
    """Run ``argv`` in ``container`` and wait for it (output discarded), like ``docker exec``."""

    async def discard(fd: int, chunk: bytes) -> None:
        return None

    with contextlib.suppress(docker_api.DockerError, OSError):
        session = await docker_api.ExecSession.start(container, argv, workdir=None, env={})
        session.stdin.write_eof()
        await session.pump(discard)
        await session.exit_code()


# --- state --------------------------------------------------------------------------------


@dataclass
class Exec:
    """One process started by ``TaskExecStart``: a Docker exec attached with stdin."""

    exec_id: str
    session: docker_api.ExecSession
    output: dict[int, bytearray] = field(default_factory=lambda: {1: bytearray(), 2: bytearray()})
    closed: dict[int, bool] = field(default_factory=lambda: {1: False, 2: False})
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    stdin_written: int = 0
    stdin_closed: bool = False
    returncode: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def take(self, fd: int, chunk: bytes) -> None:
        async with self.changed:
            self.output[fd] += chunk
            self.changed.notify_all()

    async def run(self) -> None:
        """Collect the output until the daemon ends the streams, then the exit code."""
        await self.session.pump(self.take)
        async with self.changed:
            self.closed = {1: True, 2: True}
            self.changed.notify_all()
        self.returncode = await self.session.exit_code()
        self.done.set()

    async def write_stdin(self, offset: int, data: bytes, eof: bool) -> None:
        """Apply a write at ``offset``; bytes already written (a retried write) are skipped."""
        if self.stdin_closed:
            if data[max(self.stdin_written - offset, 0) :]:
                raise GRPCError(Status.FAILED_PRECONDITION, "stdin is closed")
            return
        fresh = data[max(self.stdin_written - offset, 0) :]
        stdin = self.session.stdin
        try:
            if stdin.is_closing():
                raise BrokenPipeError("the exec's connection is closed")
            if fresh:
                stdin.write(fresh)
                await stdin.drain()
                self.stdin_written += len(fresh)
            if eof:
                stdin.write_eof()
                self.stdin_closed = True
        except (ConnectionError, BrokenPipeError) as exc:
            raise GRPCError(Status.FAILED_PRECONDITION, f"the process no longer reads stdin: {exc}") from None


@dataclass
class Sandbox:
    sandbox_id: str
    task_id: str
    app_id: str
    name: str
    tags: dict[str, str]
    container: str
    created_at: float
    timeout_secs: int
    idle_timeout_secs: int
    workdir: str
    image_id: str
    result: api_pb2.GenericResult | None = None
    execs: dict[str, Exec] = field(default_factory=dict)
    last_active: float = field(default_factory=time.monotonic)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    busy_rpcs: int = 0

    def running_execs(self) -> int:
        return sum(1 for e in self.execs.values() if e.returncode is None)


class Faults:
    """Failure modes a test switches on while the fake runs, by writing a JSON file
    (:meth:`modal_fake_launcher.FakeModal.set_faults`); it is re-read whenever its text
    changes, and each new text resets the counters:

    * ``ended_router_status``: the gRPC status name the router answers for an ended
      sandbox's task, or ``SILENT`` for no answer at all (see :meth:`State.refuse_if_ended`);
    * ``fail_next``: ``{rpc: [status, n]}``: the next ``n`` calls of ``rpc`` answer
      ``status`` (e.g. ``RESOURCE_EXHAUSTED`` for a throttled caller, ``UNAVAILABLE`` for
      a gateway that could not serve it) before reaching the handler. Plain statuses,
      without the ``RPCRetryPolicy`` detail the SDK would honour on its own
      (``modal/_utils/grpc_utils.py``, ``_retry_transient_errors``), so the caller sees
      the error as Modal's gateway sends it when it gives no retry hint;
    * ``stdio_delay``: seconds before each ``TaskExecStdioRead`` message, and messages of
      at most ``STDIO_SLOW_CHUNK`` bytes: output that is still in flight when the exit code
      has already arrived. The SDK reads the output and the exit code over separate RPCs
      (``exec_stdio_read`` and ``exec_wait`` in ``modal/sandbox/_task_command_router_client.py``),
      so nothing orders one before the other; a loaded client sees exactly this.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._text = ""
        self._data: dict[str, Any] = {}
        self._left: dict[str, list[Any]] = {}

    def current(self) -> dict[str, Any]:
        if not self.path:
            return {}
        try:
            with open(self.path) as fh:
                text = fh.read()
        except FileNotFoundError:
            text = ""
        if text != self._text:
            self._text = text
            self._data = json.loads(text) if text.strip() else {}
            self._left = {rpc: list(spec) for rpc, spec in self._data.get("fail_next", {}).items()}
        return self._data

    def take(self, rpc: str) -> Status | None:
        """The status the next call of ``rpc`` must fail with, or None (counts it)."""
        self.current()
        spec = self._left.get(rpc)
        if not spec or spec[1] <= 0:
            return None
        spec[1] -= 1
        return Status[spec[0]]


class State:
    """Everything the fake knows; all mutation happens on the event loop thread."""

    def __init__(self, run_id: str, page_size: int, log_path: str, faults_path: str = "") -> None:
        self.run_id = run_id
        self.faults = Faults(faults_path)
        self.page_size = page_size
        self.apps: dict[tuple[str, str], str] = {}
        self.app_names: dict[str, str] = {}
        self.images: dict[str, str] = {}
        self.image_builds = ImageBuilds({CONTAINER_LABEL: run_id})
        self.sandboxes: dict[str, Sandbox] = {}
        self.by_task: dict[str, Sandbox] = {}
        self.names: dict[tuple[str, str], str] = {}
        self.url = ""
        self.dead_containers: set[str] = set()
        self.deleted_images: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._log = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the server

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run ``coro`` as a task, keeping a reference until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def log(self, who: str, rpc: str, *, unimplemented: bool = False, note: str = "") -> None:
        record = {"t": round(time.time(), 4), "who": who, "rpc": rpc, "unimplemented": unimplemented}
        if note:
            record["note"] = note
        self._log.write(json.dumps(record) + "\n")

    def sandbox(self, sandbox_id: str) -> Sandbox:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox {sandbox_id} not found")
        return sb

    def task(self, task_id: str) -> Sandbox:
        sb = self.by_task.get(task_id)
        if sb is None:
            raise GRPCError(Status.NOT_FOUND, f"task {task_id} not found")
        self.refuse_if_ended(sb)
        if sb.result is not None:
            raise GRPCError(Status.NOT_FOUND, f"task {task_id} has finished")
        sb.last_active = time.monotonic()
        return sb

    def refuse_if_ended(self, sb: Sandbox) -> None:
        """With ``ended_router_status`` switched on, every router call for an ended sandbox's
        task (also one in flight when it ended) answers that status. By default a new exec
        gets NOT_FOUND (:meth:`task`; the task is gone while its worker still answers:
        ``modal/sandbox/_task_command_router_client.py``, ``exec_wait``: "If just the task
        shuts down, the task command router will return a NOT_FOUND error") and streams in
        flight end. UNAVAILABLE is the task AND its worker gone (same comment: the client
        then retries, ``call_with_retries_on_transient_errors``, and raises ServiceError).
        ``SILENT`` is a worker that vanished without a word: the call is never answered
        (:class:`Unanswered`); the SDK sets no deadline on ``TaskExecStart`` or
        ``TaskExecStdinWrite`` (``exec_start``, ``exec_stdin_write`` in the same file)."""
        name = self.faults.current().get("ended_router_status")
        if sb.result is not None and name == "SILENT":
            raise Unanswered(sb.task_id)
        if sb.result is not None and name:
            raise GRPCError(Status[name], f"task {sb.task_id} has finished (its worker is gone)")

    async def finish(self, sb: Sandbox, status: int, exitcode: int = 0, reason: str = "") -> None:
        """End a sandbox: record the result, free its name, remove its container."""
        if sb.result is not None:
            return
        sb.result = R(status=status, exitcode=exitcode, exception=reason)  # type: ignore[arg-type]
        if self.names.get((sb.app_id, sb.name)) == sb.sandbox_id:
            del self.names[(sb.app_id, sb.name)]
        sb.finished.set()
        await remove_container(sb.container)
        for ex in sb.execs.values():
            ex.session.kill()
        await self.free_deleted_images()

    async def free_deleted_images(self) -> None:
        """Delete the Docker images of deleted snapshot Images that no container uses."""
        for ref in list(self.deleted_images):
            try:
                await docker_api.call("DELETE", f"/images/{ref}")
            except docker_api.DockerError as exc:
                if exc.status != 404:
                    continue  # 409: a sandbox made from it still runs
            self.deleted_images.discard(ref)

    async def container_event(self, event: dict[str, Any]) -> None:
        """A container of this fake died or was removed: its sandbox ends (TERMINATED)."""
        name = str(event.get("Actor", {}).get("Attributes", {}).get("name", ""))
        sb = next((s for s in self.sandboxes.values() if s.container == name), None)
        if sb is None:
            self.dead_containers.add(name)  # died before its create returned: see SandboxCreateV2
        else:
            await self.finish(sb, R.GENERIC_STATUS_TERMINATED, reason="container is gone")

    async def watch(self, sb: Sandbox) -> None:
        """Enforce ``timeout_secs`` (hard lifetime) and ``idle_timeout_secs`` (in-process
        timers; a container that stops is reported by :meth:`container_event`)."""
        deadline = time.monotonic() + sb.timeout_secs if sb.timeout_secs else None
        while sb.result is None:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                await self.finish(sb, R.GENERIC_STATUS_TIMEOUT, reason="Sandbox timed out")
            elif (
                sb.idle_timeout_secs
                and sb.running_execs() == 0
                and sb.busy_rpcs == 0
                and now - sb.last_active >= sb.idle_timeout_secs
            ):
                await self.finish(sb, R.GENERIC_STATUS_IDLE_TIMEOUT, reason="Sandbox idle timeout")


def _jwt(subject: str) -> str:
    def b64(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64({'sub': subject, 'exp': int(time.time()) + 3600})}.fake"


def _jwt_subject(metadata: Mapping[str, Any]) -> str:
    auth = str(metadata.get("authorization", ""))
    try:
        payload = auth.removeprefix("Bearer ").split(".")[1]
        return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"])
    except (IndexError, KeyError, ValueError):
        return ""


def caller(stream: Stream[Any, Any]) -> str:
    md = stream.metadata or {}
    return str(md.get("x-modal-token-id") or _jwt_subject(md) or "?")


class Unanswered(Exception):
    """Raised by a handler whose call must never be answered (see :func:`serving`)."""


def serving(cls: type, base: type) -> type:
    """``cls`` with every RPC of the service ``base`` answerable: an RPC ``cls`` does not
    implement logs and answers UNIMPLEMENTED, and every RPC first answers the failure a
    test switched on for it (:class:`Faults`, ``fail_next``)."""

    def unimplemented(name: str) -> Callable[..., Any]:
        async def handler(self: Any, stream: Stream[Any, Any]) -> None:
            self.state.log(caller(stream), name, unimplemented=True)
            raise GRPCError(Status.UNIMPLEMENTED, f"the envlayer fake Modal server does not implement {name}")

        return handler

    def faulty(name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        async def handler(self: Any, stream: Stream[Any, Any]) -> None:
            status = self.state.faults.take(name)
            if status is not None:
                self.state.log(caller(stream), name, note=f"fault {status.name}")
                raise GRPCError(status, f"fake fault: {status.name} for {name}")
            try:
                await inner(self, stream)
            except Unanswered:
                await asyncio.Event().wait()  # until the client gives up or the server stops

        handler.__name__ = name
        return handler

    names = getattr(base, "__abstractmethods__", ())
    methods = {name: faulty(name, cls.__dict__.get(name) or unimplemented(name)) for name in names}
    return type(cls.__name__, (cls,), methods)


# --- control plane ------------------------------------------------------------------------


class _Control(api_grpc.ModalClientBase):
    def __init__(self, state: State) -> None:
        self.state = state

    async def AuthTokenGet(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=_jwt(caller(stream))))

    async def ClientHello(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        await stream.send_message(api_pb2.ClientHelloResponse(image_builder_version=IMAGE_BUILDER_VERSION))

    async def AppGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        key = (req.environment_name, req.app_name)
        if key not in self.state.apps:
            if req.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
                raise GRPCError(Status.NOT_FOUND, f"App '{req.app_name}' not found")
            app_id = "ap-" + uuid.uuid4().hex[:22]
            self.state.apps[key] = app_id
            self.state.app_names[app_id] = req.app_name
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=self.state.apps[key]))

    async def EnvironmentGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        settings = api_pb2.EnvironmentSettings(image_builder_version=IMAGE_BUILDER_VERSION)
        meta = api_pb2.EnvironmentMetadata(name="main", settings=settings)
        await stream.send_message(api_pb2.EnvironmentGetOrCreateResponse(environment_id="en-fake", metadata=meta))

    async def MountBatchedCheckExistence(self, stream: Stream[Any, Any]) -> None:
        """Which context files the fake lacks (see ``image_builds``)."""
        req = await stream.recv_message()
        assert req is not None
        missing = self.state.image_builds.missing(list(req.sha256_hex_hashes))
        await stream.send_message(api_pb2.MountBatchedCheckExistenceResponse(missing_sha256_hex_hashes=missing))

    async def MountPutFile(self, stream: Stream[Any, Any]) -> None:
        """One context file, inline; a blob (over 4 MiB) is refused: the fake has no blob store."""
        req = await stream.recv_message()
        assert req is not None
        if req.data_blob_id:
            raise GRPCError(Status.UNIMPLEMENTED, "the fake Modal server takes context files up to 4 MiB (no blobs)")
        stored = self.state.image_builds.put(req.sha256_hex, req.data)
        await stream.send_message(api_pb2.MountPutFileResponse(exists=stored))

    async def MountGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        """A mount of the files put before (``_Mount._load_mount``'s last call)."""
        req = await stream.recv_message()
        assert req is not None
        builds = self.state.image_builds
        files = [(f.filename, f.sha256_hex, f.mode) for f in req.files]
        if missing := builds.missing([sha for _, sha, _ in files]):
            raise GRPCError(Status.FAILED_PRECONDITION, f"mount files not uploaded: {missing}")
        await stream.send_message(api_pb2.MountGetOrCreateResponse(mount_id=builds.mount(files)))

    async def ImageGetOrCreate(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        commands = list(req.image.dockerfile_commands)
        if req.image.context_mount_id or req.image.base_images or len(commands) > 1:
            await self._dockerfile_image(stream, req.image, commands)
            return
        tag = commands[0].split(None, 1)[1].strip() if commands and commands[0].startswith("FROM ") else ""
        if len(commands) != 1 or not tag:
            result = R(status=R.GENERIC_STATUS_FAILURE, exception=f"the fake only serves `FROM tag` images: {commands}")
            await stream.send_message(api_pb2.ImageGetOrCreateResponse(image_id="", result=result))
            return
        try:
            await docker_api.call("GET", f"/images/{tag}/json")
        except docker_api.DockerError:
            result = R(status=R.GENERIC_STATUS_FAILURE, exception=f"Image build failed: pull access denied for {tag}")
            await stream.send_message(api_pb2.ImageGetOrCreateResponse(image_id="", result=result))
            return
        image_id = "im-" + uuid.uuid5(uuid.NAMESPACE_URL, tag).hex[:22]
        self.state.images[image_id] = tag
        await stream.send_message(
            api_pb2.ImageGetOrCreateResponse(image_id=image_id, result=R(status=R.GENERIC_STATUS_SUCCESS))
        )

    async def _dockerfile_image(self, stream: Stream[Any, Any], image: Any, commands: list[str]) -> None:
        """``Image.from_dockerfile``: the definition's id, with ``result`` SUCCESS when it was
        built before (a cache hit), else none: the SDK then joins the build
        (:meth:`ImageJoinStreaming`). See ``image_builds``."""
        builds = self.state.image_builds
        base_refs = [(b.docker_tag, b.image_id) for b in image.base_images]
        for _, base_id in base_refs:
            if base_id not in self.state.images:
                raise GRPCError(Status.NOT_FOUND, f"Image {base_id} not found")
        image_id = builds.image_id(commands, image.context_mount_id, base_refs)
        bases = {tag: self.state.images[base_id] for tag, base_id in base_refs}
        build = builds.start(image_id, commands, image.context_mount_id, bases, self.state.spawn)
        if build.done.is_set() and not build.error:
            self.state.images[image_id] = build.tag
            meta = api_pb2.ImageMetadata(workdir=build.workdir)
            result = R(status=R.GENERIC_STATUS_SUCCESS)
            await stream.send_message(api_pb2.ImageGetOrCreateResponse(image_id=image_id, result=result, metadata=meta))
            return
        await stream.send_message(api_pb2.ImageGetOrCreateResponse(image_id=image_id))

    async def ImageJoinStreaming(self, stream: Stream[Any, Any]) -> None:
        """The build's log lines, then its result (``_image_await_build_result`` reads
        ``task_logs`` and keeps joining until a response carries ``result.status``). A
        failed step: FAILURE with no exception, the reason only in the logs."""
        req = await stream.recv_message()
        assert req is not None
        builds = self.state.image_builds
        build = builds.builds.get(req.image_id)
        if build is None:
            raise GRPCError(Status.NOT_FOUND, f"Image {req.image_id} not found")
        try:
            await asyncio.wait_for(build.done.wait(), req.timeout or 55)
        except TimeoutError:
            await stream.send_message(api_pb2.ImageJoinStreamingResponse())  # still building: join again
            return
        lines = [*build.logs, *([f"ERROR: {build.error}"] if build.error else [])]
        logs = [api_pb2.TaskLogs(data=line + "\n", file_descriptor=api_pb2.FILE_DESCRIPTOR_STDOUT) for line in lines]
        await stream.send_message(api_pb2.ImageJoinStreamingResponse(task_logs=logs, entry_id=str(len(lines))))
        if build.error:
            builds.builds.pop(req.image_id, None)  # a later request builds again
            result = R(status=R.GENERIC_STATUS_FAILURE)
            await stream.send_message(api_pb2.ImageJoinStreamingResponse(result=result, eof=True))
            return
        self.state.images[req.image_id] = build.tag
        meta = api_pb2.ImageMetadata(workdir=build.workdir)
        result = R(status=R.GENERIC_STATUS_SUCCESS)
        await stream.send_message(api_pb2.ImageJoinStreamingResponse(result=result, metadata=meta, eof=True))

    async def ImageFromId(self, stream: Stream[Any, Any]) -> None:
        """``Image.from_id``: the Image's id back (``_Image.from_id`` in ``modal/_image.py``
        hydrates with ``resp.image_id`` and ``resp.metadata``); NOT_FOUND for an Image the
        fake does not have (never made, or deleted)."""
        req = await stream.recv_message()
        assert req is not None
        if req.image_id not in self.state.images:
            raise GRPCError(Status.NOT_FOUND, f"Image {req.image_id} not found")
        await stream.send_message(api_pb2.ImageFromIdResponse(image_id=req.image_id))

    async def ImageDelete(self, stream: Stream[Any, Any]) -> None:
        """``modal.experimental.image_delete``: the Image can no longer be used to create a
        sandbox; sandboxes already made from it run on (its Docker image is deleted with
        the last of them, :meth:`State.free_deleted_images`)."""
        req = await stream.recv_message()
        assert req is not None
        ref = self.state.images.pop(req.image_id, None)
        if ref is None:
            raise GRPCError(Status.NOT_FOUND, f"Image {req.image_id} not found")
        if ref.startswith(f"{SNAPSHOT_REPOSITORY}:"):
            self.state.deleted_images.add(ref)
            await self.state.free_deleted_images()
        await stream.send_message(empty_pb2.Empty())

    async def SandboxCreateV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        st = self.state
        d = req.definition
        image = st.images.get(d.image_id)
        if image is None:
            raise GRPCError(Status.NOT_FOUND, f"Image {d.image_id} not found")
        if d.name and (req.app_id, d.name) in st.names:
            raise GRPCError(Status.ALREADY_EXISTS, f"Sandbox with name '{d.name}' already exists in this app")
        if os.environ.get("FAKE_MODAL_QUOTA_TAG") in {t.tag_value for t in req.tags}:
            raise GRPCError(Status.RESOURCE_EXHAUSTED, "Sandbox quota exceeded: too many running sandboxes")
        sandbox_id = "sb-fake" + uuid.uuid4().hex
        task_id = "ta-" + uuid.uuid4().hex[:22]
        if d.name:
            st.names[(req.app_id, d.name)] = sandbox_id  # reserved before any await: names are race-free
        env: dict[str, str] = {}
        for source in req.secret_sources:
            env.update(source.env.contents)
        workdir = d.workdir or "/"
        argv = list(d.entrypoint_args) or ["sh", "-c", "exec tail -f /dev/null"]
        container = f"fake-modal-{sandbox_id}"
        # what ``docker run -d --init --network none --label --name -w -e [--memory] IMAGE ARGV``
        # sends, but with the network disabled outright (no namespace setup hook at all)
        spec: dict[str, Any] = {
            "Image": image,
            "Cmd": argv,
            "WorkingDir": workdir,
            "Env": [f"{k}={v}" for k, v in env.items()],
            "Labels": {CONTAINER_LABEL: st.run_id},
            "NetworkDisabled": True,  # no network (as in the Daytona fake): ~120 ms less dockerd CPU
            "HostConfig": {"Init": True, "Memory": d.resources.memory_mb * 2**20},
        }
        try:
            await docker_api.call("POST", "/containers/create", spec, query={"name": container})
            await docker_api.call("POST", f"/containers/{container}/start")
        except (docker_api.DockerError, OSError) as exc:
            st.names.pop((req.app_id, d.name), None)
            await remove_container(container)
            raise GRPCError(Status.INTERNAL, str(exc)) from None
        sb = Sandbox(
            sandbox_id=sandbox_id,
            task_id=task_id,
            app_id=req.app_id,
            name=d.name,
            tags={t.tag_name: t.tag_value for t in req.tags},
            container=container,
            created_at=time.time(),
            timeout_secs=d.timeout_secs,
            idle_timeout_secs=d.idle_timeout_secs,
            workdir=workdir,
            image_id=d.image_id,
        )
        st.sandboxes[sandbox_id] = sb
        st.by_task[task_id] = sb
        st.spawn(st.watch(sb))
        if container in st.dead_containers:
            await st.finish(sb, R.GENERIC_STATUS_TERMINATED, reason="container is gone")
        access = api_pb2.CommandRouterAccess(url=st.url, jwt=_jwt(caller(stream)))
        await stream.send_message(
            api_pb2.SandboxCreateV2Response(sandbox_id=sandbox_id, task_id=task_id, command_router_access=access)
        )

    async def SandboxGetTaskIdV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb = self.state.sandbox(req.sandbox_id)
        if sb.result is not None:
            await stream.send_message(api_pb2.SandboxGetTaskIdResponse(task_result=sb.result))
        else:
            await stream.send_message(api_pb2.SandboxGetTaskIdResponse(task_id=sb.task_id))

    async def SandboxGetCommandRouterAccess(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        if req.sandbox_id:
            self.state.sandbox(req.sandbox_id)
        await stream.send_message(
            api_pb2.SandboxGetCommandRouterAccessResponse(url=self.state.url, jwt=_jwt(caller(stream)))
        )

    async def SandboxWaitV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb = self.state.sandbox(req.sandbox_id)
        if sb.result is None and req.timeout > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(sb.finished.wait(), req.timeout)
        await stream.send_message(api_pb2.SandboxWaitResponse(result=sb.result or R()))

    async def _from_name(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        app_id = self.state.apps.get((req.environment_name, req.app_name))
        sandbox_id = self.state.names.get((app_id or "", req.sandbox_name))
        if sandbox_id is None:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox '{req.sandbox_name}' not found in app '{req.app_name}'")
        await stream.send_message(api_pb2.SandboxGetFromNameResponse(sandbox_id=sandbox_id))

    async def SandboxGetFromNameV2(self, stream: Stream[Any, Any]) -> None:
        await self._from_name(stream)

    async def SandboxGetFromName(self, stream: Stream[Any, Any]) -> None:
        await self._from_name(stream)

    async def SandboxListV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        want = {t.tag_name: t.tag_value for t in req.tags}
        found = [
            sb
            for sb in self.state.sandboxes.values()
            if (not req.app_id or sb.app_id == req.app_id)
            and (req.include_finished or sb.result is None)
            and (not req.before_timestamp or sb.created_at < req.before_timestamp)
            and all(sb.tags.get(k) == v for k, v in want.items())
        ]
        found.sort(key=lambda sb: sb.created_at, reverse=True)
        infos = [
            api_pb2.SandboxInfo(
                id=sb.sandbox_id,
                created_at=sb.created_at,
                app_id=sb.app_id,
                name=sb.name,
                tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sb.tags.items()],
                task_info=api_pb2.TaskInfo(id=sb.task_id, result=sb.result or R()),
            )
            for sb in found[: self.state.page_size]
        ]
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=infos))

    async def SandboxTagsGetV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb = self.state.sandbox(req.sandbox_id)
        tags = [api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sb.tags.items()]
        await stream.send_message(api_pb2.SandboxTagsGetResponse(tags=tags))

    async def SandboxTagsSetV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        self.state.sandbox(req.sandbox_id).tags = {t.tag_name: t.tag_value for t in req.tags}
        await stream.send_message(empty_pb2.Empty())

    async def SandboxTerminateV2(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb = self.state.sandbox(req.sandbox_id)
        existing = sb.result
        await self.state.finish(sb, R.GENERIC_STATUS_TERMINATED, reason="Sandbox terminated")
        await stream.send_message(api_pb2.SandboxTerminateResponse(existing_result=existing or R()))


# --- task command router -------------------------------------------------------------------


def fs_tools_argv(op_json: str) -> list[str]:
    """A POSIX sh program standing in for Modal's injected ``modal-sandbox-fs-tools`` binary
    (errors as ``{"error_kind", "message"}`` JSON on stderr, exit 1)."""
    op = json.loads(op_json)
    ((kind, args),) = op.items()
    path = args.get("path", "")
    fail = 'fail() { printf \'{"error_kind":"%s","message":"%s"}\' "$1" "$2" >&2; exit 1; }; p=$1; '
    scripts = {
        "ReadFile": fail + '[ -d "$p" ] && fail IsDirectory "Is a directory"; '
        '[ -e "$p" ] || fail NotFound "No such file or directory"; '
        '[ -r "$p" ] || fail PermissionDenied "Permission denied"; exec cat -- "$p"',
        "WriteFile": fail + '[ -d "$p" ] && fail IsDirectory "Is a directory"; d=${p%/*}; '
        '[ -z "$d" ] || mkdir -p -- "$d" 2>/dev/null || fail NotDirectory "Not a directory"; '
        'cat > "$p" 2>/dev/null || fail PermissionDenied "Permission denied"',
        # A symlink is described, not followed, with its target as written (``symlink_target``:
        # ``FileInfo`` in ``modal/types.py``, parsed in ``modal/sandbox/_filesystem.py``, ``stat``).
        "Stat": fail + '[ -e "$p" ] || [ -L "$p" ] || fail NotFound "No such file or directory"; '
        'l=null; if [ -L "$p" ]; then t=symlink; l="\\"$(readlink -- "$p")\\""; '
        'elif [ -d "$p" ]; then t=directory; else t=file; fi; '
        'set -- $(stat -c "%s %f %U %G %Y %A" -- "$p"); '
        'printf \'{"name":"%s","path":"%s","type":"%s","size":%s,"mode":%d,"permissions":"%s",'
        '"owner":"%s","group":"%s","modified_time":%s,"symlink_target":%s}\' '
        '"${p##*/}" "$p" "$t" "$1" "0x$2" "$6" "$3" "$4" "$5" "$l"',
        "MakeDirectory": fail
        + '[ -e "$p" ] && fail PathAlreadyExists "File exists"; '
        + ('mkdir -p -- "$p"' if args.get("parents") else 'mkdir -- "$p"')
        + ' 2>/dev/null || fail NotFound "No such file or directory"',
        "Remove": fail
        + '[ -e "$p" ] || fail NotFound "No such file or directory"; '
        + ('rm -rf -- "$p"' if args.get("recursive") else 'if [ -d "$p" ]; then rmdir -- "$p"; else rm -f -- "$p"; fi')
        + ' 2>/dev/null || fail DirectoryNotEmpty "Directory not empty"',
    }
    if kind not in scripts:
        return ["sh", "-c", 'printf \'{"error_kind":"Unsupported","message":"fake: %s"}\' "$1" >&2; exit 1', "x", kind]
    return ["sh", "-c", scripts[kind], "modal-sandbox-fs-tools", path]


def _console(req: Any, env: dict[str, str]) -> tuple[int, int] | None:
    """The tty (rows, cols) an exec asks for with ``pty_info``, else None; sets ``TERM``.

    ``Sandbox.exec(pty=True)`` sends ``PTYInfo`` from ``get_pty_info`` (modal/_output/pty.py:
    the caller's stdin window size, ``$TERM``) in ``TaskExecStartRequest.pty_info``
    (modal/sandbox/_common.py ``exec_via_tcr``); the SDK has no call to change the size later."""
    if not req.HasField("pty_info") or not req.pty_info.enabled:
        return None
    info = req.pty_info
    if info.env_term:
        env.setdefault("TERM", info.env_term)
    return (info.winsz_rows or 24, info.winsz_cols or 80)


class _Router(task_command_router_grpc.TaskCommandRouterBase):
    def __init__(self, state: State) -> None:
        self.state = state

    def _exec(self, task_id: str, exec_id: str) -> tuple[Sandbox, Exec]:
        sb = self.state.by_task.get(task_id)
        if sb is None:
            raise GRPCError(Status.NOT_FOUND, f"task {task_id} not found")
        self.state.refuse_if_ended(sb)
        ex = sb.execs.get(exec_id)
        if ex is None:
            raise GRPCError(Status.NOT_FOUND, f"exec {exec_id} not found")
        sb.last_active = time.monotonic()
        return sb, ex

    async def TaskExecStart(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb = self.state.task(req.task_id)
        if req.exec_id in sb.execs:  # idempotency key: a retried start is not run twice
            await stream.send_message(sr_pb2.TaskExecStartResponse())
            return
        argv = list(req.command_args)
        if argv and argv[0] == FS_TOOLS:
            self.state.log(
                caller(stream), "fs-tools", note=next(iter(json.loads(argv[1])), "") if len(argv) > 1 else ""
            )
            argv = fs_tools_argv(argv[1] if len(argv) > 1 else "{}")
        env: dict[str, str] = {}
        for source in req.secret_sources:
            env.update(source.env.contents)
        marker = f"MODAL_FAKE_EXEC={req.exec_id}"
        if req.HasField("timeout_secs") and req.timeout_secs:
            env["MODAL_FAKE_EXEC"] = req.exec_id
        console = _console(req, env)
        try:
            session = await docker_api.ExecSession.start(
                sb.container, argv, workdir=req.workdir if req.HasField("workdir") else None, env=env, console=console
            )
        except (docker_api.DockerError, OSError) as exc:
            raise GRPCError(Status.NOT_FOUND, f"task {req.task_id}: cannot start the exec: {exc}") from None
        ex = Exec(req.exec_id, session)
        sb.execs[req.exec_id] = ex

        async def reap() -> None:
            await ex.run()
            sb.last_active = time.monotonic()

        async def enforce_timeout(seconds: int) -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(ex.done.wait()), seconds)
                return
            kill = (
                'for f in /proc/[0-9]*/environ; do grep -qa "$1" "$f" 2>/dev/null && p=${f#/proc/} && kill -9 ${p%/*}; '
                "done"
            )
            await run_to_end(sb.container, ["sh", "-c", kill, "kill", marker])

        self.state.spawn(reap())
        if req.HasField("timeout_secs") and req.timeout_secs:
            self.state.spawn(enforce_timeout(req.timeout_secs))
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    async def TaskExecStdioRead(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb, ex = self._exec(req.task_id, req.exec_id)
        fd = 1 if req.file_descriptor == sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT else 2
        offset = req.offset
        delay = float(self.state.faults.current().get("stdio_delay", 0))
        sb.busy_rpcs += 1
        try:
            while True:
                async with ex.changed:
                    await ex.changed.wait_for(lambda at=offset: len(ex.output[fd]) > at or ex.closed[fd])
                    data = bytes(ex.output[fd][offset : offset + STDIO_SLOW_CHUNK if delay else None])
                    closed = ex.closed[fd]
                if data and delay:
                    await asyncio.sleep(delay)
                if data:
                    offset += len(data)
                    await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=data))
                elif closed:
                    self.state.refuse_if_ended(sb)
                    return
        finally:
            sb.busy_rpcs -= 1
            sb.last_active = time.monotonic()

    async def TaskExecStdinWrite(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        _, ex = self._exec(req.task_id, req.exec_id)
        await ex.write_stdin(req.offset, req.data, req.eof)
        await stream.send_message(sr_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdinWriteStream(self, stream: Stream[Any, Any]) -> None:
        first = await stream.recv_message()
        if first is None or not first.HasField("start"):
            raise GRPCError(Status.INVALID_ARGUMENT, "the first message must be `start`")
        _, ex = self._exec(first.start.task_id, first.start.exec_id)
        offset = first.start.offset
        async for msg in stream:
            if msg.HasField("data"):
                await ex.write_stdin(offset, msg.data, False)
                offset += len(msg.data)
            elif msg.HasField("end"):
                await ex.write_stdin(offset, b"", True)
        await stream.send_message(sr_pb2.TaskExecStdinWriteStreamResponse())

    async def TaskExecStdinStatus(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        _, ex = self._exec(req.task_id, req.exec_id)
        await stream.send_message(
            sr_pb2.TaskExecStdinStatusResponse(num_bytes_written=ex.stdin_written, closed=ex.stdin_closed)
        )

    async def TaskExecWait(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        sb, ex = self._exec(req.task_id, req.exec_id)
        sb.busy_rpcs += 1
        try:
            await ex.done.wait()
        finally:
            sb.busy_rpcs -= 1
        self.state.refuse_if_ended(sb)
        await stream.send_message(sr_pb2.TaskExecWaitResponse(code=ex.returncode or 0))

    async def TaskSnapshotFilesystem(self, stream: Stream[Any, Any]) -> None:
        """``docker commit`` of the sandbox's container as a new Image. The SDK makes this
        one unary call and waits for its answer up to its ``timeout`` (no polling for V2
        sandboxes: ``snapshot_filesystem_via_tcr`` in ``modal/sandbox/_common.py``); the
        answer is the Image id (``TaskSnapshotFilesystemResponse.image_id``)."""
        req = await stream.recv_message()
        assert req is not None
        sb = self.state.task(req.task_id)
        image_id = "im-" + uuid.uuid4().hex[:22]
        query = {"container": sb.container, "repo": SNAPSHOT_REPOSITORY, "tag": image_id}
        config = {"Labels": {CONTAINER_LABEL: self.state.run_id, SNAPSHOT_LABEL: image_id}}
        try:
            await docker_api.call("POST", "/commit", config, query=query)
        except (docker_api.DockerError, OSError) as exc:
            raise GRPCError(Status.INTERNAL, f"snapshot of {req.task_id} failed: {exc}") from None
        self.state.images[image_id] = f"{SNAPSHOT_REPOSITORY}:{image_id}"
        await stream.send_message(sr_pb2.TaskSnapshotFilesystemResponse(image_id=image_id))

    async def TaskExecPoll(self, stream: Stream[Any, Any]) -> None:
        req = await stream.recv_message()
        assert req is not None
        _, ex = self._exec(req.task_id, req.exec_id)
        if ex.returncode is None:
            await stream.send_message(sr_pb2.TaskExecPollResponse())
        else:
            await stream.send_message(sr_pb2.TaskExecPollResponse(code=ex.returncode))


Control = serving(_Control, api_grpc.ModalClientBase)
Router = serving(_Router, task_command_router_grpc.TaskCommandRouterBase)


# --- main ----------------------------------------------------------------------------------


async def serve(args: argparse.Namespace) -> None:
    run_id = uuid.uuid4().hex[:12]
    state = State(run_id, args.page_size, args.log, args.faults)
    server = Server([Control(state), Router(state)])

    async def record(event: RecvRequest) -> None:
        name = event.method_name.rsplit("/", 1)[-1]
        who = str(event.metadata.get("x-modal-token-id") or _jwt_subject(event.metadata) or "?")
        state.log(who, name)

    listen(server, RecvRequest, record)
    subscribed = asyncio.Event()
    died = {"type": ["container"], "event": ["die", "destroy"], "label": [f"{CONTAINER_LABEL}={run_id}"]}
    state.spawn(docker_api.events(died, state.container_event, subscribed))
    await subscribed.wait()  # before any container of ours can start
    await server.start("127.0.0.1", args.port)
    port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def watch_parent(pid: int) -> None:
        while True:
            await asyncio.sleep(1)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                stop.set()  # the test run that started us is gone (killed): clean up and exit
                return

    if args.parent_pid:
        state.spawn(watch_parent(args.parent_pid))
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"port": port, "pid": os.getpid(), "run_id": run_id}, fh)
    os.replace(tmp, args.port_file)
    await stop.wait()
    server.close()
    for sb in list(state.sandboxes.values()):
        for ex in sb.execs.values():
            ex.session.kill()
    filters = json.dumps({"label": [f"{CONTAINER_LABEL}={run_id}"]})
    for info in await docker_api.call("GET", "/containers/json", query={"all": "1", "filters": filters}):
        await remove_container(info["Id"])
    for info in await docker_api.call("GET", "/images/json", query={"filters": filters}):
        with contextlib.suppress(docker_api.DockerError):
            await docker_api.call("DELETE", f"/images/{info['Id']}", query={"force": "1"})
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--port-file", required=True, help="where to write {port, pid, run_id} once listening")
    parser.add_argument("--log", required=True, help="JSON-lines log of every RPC received")
    parser.add_argument("--faults", default="", help="JSON file of failure modes a test switches on (see Faults)")
    parser.add_argument("--page-size", type=int, default=5, help="sandboxes per SandboxListV2 page")
    parser.add_argument("--parent-pid", type=int, default=0, help="exit (removing containers) when this pid is gone")
    args = parser.parse_args(argv)
    asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
