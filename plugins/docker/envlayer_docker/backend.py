"""``DockerEnvironment``: the envlayer backend that runs commands in a Docker container.

Lifecycle (details in docs/backends/docker.md):

* The constructor attaches to, starts or creates the container of (profile, task)
  (see :mod:`envlayer_docker.container`) and raises :class:`BackendUnavailable` when the
  daemon, the socket permission or the image is missing.
* ``cleanup()`` in persist mode (default) closes this process's shell and leaves the
  container running, background processes included. ``cleanup(force_remove=True)``, or
  any cleanup with ``persist_across_processes = false``, stops and removes it on a
  background thread that :meth:`wait_for_cleanup` joins.
* Commands run in a persistent shell (``exec_mode = "session"``) or one exec each
  (``"oneshot"``); a call that finds the session busy (another thread) runs one-shot.
  A timeout or interrupt kills the command's process tree inside the container.
* A container that vanished or stopped under us is detected from the daemon's answer
  (never from command output) and re-created or restarted at most once per call, and
  only when the command had provably not started; a command is never run twice.

Importing this module does not import the Docker SDK (read through :mod:`envlayer_docker.sdk`),
nor the plugin's modules that only some calls need: the methods that use them import
them, since ``envlayer backends`` and every CLI call import this class.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from envlayer.capabilities import Capability
from envlayer.environment import SandboxInfo
from envlayer.errors import BackendUnavailable
from envlayer.options import BaseOptions
from envlayer.request import ExecRequest, check_path
from envlayer.result import ExecResult
from envlayer.sandbox.archive import pack_dir, tar_summary
from envlayer.sandbox.base import MANAGED_SANDBOX_CAPABILITIES
from envlayer.sandbox.client_identity import ClientIdentity
from envlayer.sandbox.command_env import with_command_defaults
from envlayer.sandbox.files import (
    SESSION_FILE_MAX,
    download_in_session,
    read_by_helper,
    unpack_in_session,
    write_by_helper,
)
from envlayer.sandbox.managed import ManagedSandboxEnvironment
from envlayer.sandbox.paths import confined_path
from envlayer.snapshot import Snapshot
from envlayer.transfer import TransferSummary
from envlayer_docker import sdk, teardown
from envlayer_docker.client import client_identity, get_client
from envlayer_docker.errors import ContainerGone, translated
from envlayer_docker.options import DockerOptions

log = logging.getLogger("envlayer.docker")
T = TypeVar("T")

ALL_CAPABILITIES = MANAGED_SANDBOX_CAPABILITIES | {
    Capability.EXEC_AS_USER,
    Capability.UNSET_ENV,
    Capability.SNAPSHOT,
    Capability.ARCHIVE_STREAM,
}
_NUMERIC_USER = re.compile(r"^(\d+)(?::(\d+))?$")


class DockerEnvironment(ManagedSandboxEnvironment):
    """Commands and files in a Docker container; see the module docstring."""

    name = "docker"
    Options = DockerOptions
    capabilities = ALL_CAPABILITIES
    environment_variables = ("DOCKER_*", "HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME")  # read by client.py
    options: DockerOptions
    recovery_hint = "check the daemon (`docker ps -a`, its log); something keeps removing the container"

    @classmethod
    def client_identity(cls, options: Any, environ: Mapping[str, str], cwd: str) -> ClientIdentity:
        """Whom a caller with ``options``, ``environ`` and ``cwd`` reaches, and as whom
        (see :mod:`envlayer.sandbox.client_identity`)."""
        return client_identity(options, environ)

    def open_sandbox(self) -> None:
        from envlayer_docker.container import build_spec, refuse_other_options
        from envlayer_docker.image import prepared_options, warn_if_workspace_hides_image

        self._api = get_client(self.options)
        cwd_given = self.options.cwd is not None
        self._last_lease = 0.0
        self._purge = False
        self._owner: tuple[int, int] | None = None
        self._exec_env = self._build_exec_env()
        self._container: Any = None
        self._files: Any = None
        self._fork_image = ""
        """A fork's snapshot image id: released (deleted if its snapshot was removed) after teardown."""
        try:
            with translated("preparing the image", self.options):
                self.options = opts = prepared_options(self._api, self.options)
            with translated("inspecting the image", opts):
                self._spec = build_spec(
                    self._api, opts, profile=self.profile, task=self.task_id, persist=opts.persist_across_processes
                )
        except BackendUnavailable:
            # A missing image may be another image than the task's container was made from:
            # that is a difference of options to name (and to take as defaults), not an outage.
            with translated("inspecting the task's container", self.options):
                refuse_other_options(self._api, self.options, profile=self.profile, task=self.task_id)
            raise
        if not cwd_given and opts.cwd is not None:
            warn_if_workspace_hides_image(self._api, opts.cwd, self._spec.data, opts.image)
        if self.from_snapshot is None:
            self._attach()
        else:
            self._attach_fork(self.from_snapshot)
        from envlayer_docker.runners import SessionRunner

        self._session = SessionRunner(self._target) if opts.exec_mode == "session" else None

    # --- container ----------------------------------------------------------------------

    def _build_exec_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for name in self.options.forward_env:
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(with_command_defaults(self.options.env))
        if self.options.run_as_host_user and "HOME" not in env:
            env["HOME"] = "/tmp"
        return env

    def _attach(self) -> None:
        """Attach/start/create the container of ``self._spec`` (see
        :mod:`envlayer_docker.container`); a private container keeps its name, so a
        recovery restarts it rather than leaving it behind."""
        from envlayer_docker.container import ensure
        from envlayer_docker.files import FileTransfer

        spec = self._spec
        with translated("creating or attaching the container", self.options):
            attached = ensure(self._api, spec, self.options)
        if attached.replaced:
            self.announce(attached.replaced)
        with self._state_lock:
            self._container = attached
            self._files = FileTransfer(
                self._api, attached.id, tmpfs_paths=attached.tmpfs_paths, owner=(0, 0), helper=self._helper
            )
        log.debug(
            "%s container %s for task %r", "created" if attached.created else "attached to", attached.name, self.task_id
        )

    def _attach_fork(self, snapshot: Snapshot) -> None:
        """Create the container from ``snapshot`` (see :func:`envlayer_docker.snapshots.fork_spec`).
        A later recovery recreates it from the configured image (the workspace volume is kept)."""
        from envlayer_docker import cow
        from envlayer_docker.snapshots import fork_spec

        base = self._spec
        with translated("checking the snapshot and the task", self.options):
            self._spec = fork_spec(self._api, base, snapshot)
        self._fork_image = self._spec.image
        try:
            try:
                self._attach()
            except BackendUnavailable as exc:
                if not any(d.lower for d in self._spec.data) or not cow.is_overlay_refusal(exc.__cause__ or exc):
                    raise
                self._copy_instead_of_overlay(exc)
                self._attach()
        finally:
            self._spec = base

    def _copy_instead_of_overlay(self, refusal: BackendUnavailable) -> None:
        """The daemon would not mount an overlay volume: fill the fork's volumes by a copy
        of the snapshot's instead (slower, the same files), and say so."""
        from envlayer_docker import cow, workspace

        log.warning(
            "this Docker daemon cannot mount overlay volumes (%s); fork %r copies the snapshot's data instead",
            refusal.message[:200],
            self.task_id,
        )
        with translated("copying the snapshot's data into the fork", self.options):
            for mount in self._spec.data:
                if mount.lower:
                    cow.fill_by_copy(
                        self._api,
                        self._spec.image,
                        self.options.shell,
                        mount.source,
                        mount.lower,
                        workspace.data_labels(self.profile, self.task_id, mount.kind),
                    )
        self._spec = dataclasses.replace(self._spec, data=[dataclasses.replace(d, lower="") for d in self._spec.data])

    @property
    def container_id(self) -> str:
        """The id of the container in use."""
        return self._container.id

    @property
    def container_name(self) -> str:
        """The name of the container in use."""
        return self._container.name

    # --- recovery (the base retries once, see envlayer.sandbox.base) ---------------------

    def is_gone(self, exc: Exception) -> bool:
        """The daemon answered that the container is gone or stopped before anything ran."""
        return isinstance(exc, ContainerGone)

    def sandbox_identity(self) -> str:
        return self.container_id

    def recover(self, seen: str) -> str:
        """The container ``seen`` is gone or stopped: end the session and attach again
        (which starts a stopped container, or creates a new one). When another thread
        already did so, there is nothing to do."""
        with self._state_lock:
            if self._container is not None and self._container.id != seen:
                return "container recreated"
            log.warning(
                "container %s for task %r vanished or stopped; attaching again", self.container_name, self.task_id
            )
            if self._session is not None:
                self._session.shell.abandon()
            self._attach()
        return "container recreated"

    def with_recovery(self, operation: Callable[[], T], **kwargs: Any) -> tuple[T, str]:
        try:
            return super().with_recovery(operation, **kwargs)
        except BackendUnavailable as exc:
            # A container that exits right after it starts (its entrypoint or init fails)
            # only shows up as refused execs: say why it stopped instead.
            from envlayer_docker.exit_report import exited_container_error

            stopped = exited_container_error(self._api, self.container_id, self.task_id)
            if stopped is None:
                raise
            raise stopped from exc

    def _target(self) -> Any:
        from envlayer_docker.runners import ExecTarget

        return ExecTarget(self._api, self.options, self._container, self._spec.user, self._exec_env)

    def open_terminal(self, rows: int, cols: int) -> Any:
        """An interactive shell with a tty in this task's container (``envlayer shell``);
        see :mod:`envlayer_docker.terminal`."""
        from envlayer_docker.terminal import DockerTerminal

        self._ensure_open()
        environ = {**self._exec_env, "TERM": os.environ.get("TERM", "xterm")}
        return DockerTerminal(self._target(), self.options.shell, environ, rows, cols)

    # --- exec: the base owns the contract and the session-or-one-shot choice ----------------

    def _touch_lease(self) -> bool:
        now = time.monotonic()
        if now - self._last_lease >= self.options.lease_interval:
            self._last_lease = now
            return True
        return False

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        assert self._session is not None
        return self._with_oom_notice(self._session.run(request, touch_lease=self._touch_lease()))

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        """An exec of its own in the session's directory, as ``request.user`` when given
        (``docker exec --user``)."""
        from envlayer_docker.runners import run_oneshot

        session_cwd = self._session.cwd if self._session is not None else None
        cwd = self.call_directory(request, session_cwd or self.options.workdir)
        target = self._target()
        if request.user is not None:
            target = dataclasses.replace(target, user=request.user)
        return self._with_oom_notice(run_oneshot(target, request, cwd=cwd, touch_lease=self._touch_lease()))

    def _with_oom_notice(self, result: ExecResult) -> ExecResult:
        """``result``, saying so in its ``notice`` when the memory limit killed the command
        (exit 137; see :mod:`envlayer_docker.oom`)."""
        from envlayer_docker.oom import oom_notice
        from envlayer_docker.runners import run_helper

        notice = oom_notice(result.exit_code, self.options.memory_mb, lambda argv: run_helper(self._target(), argv))
        if notice:
            return result.with_notice("; ".join(n for n in (result.notice, notice) if n))
        return result

    def _helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        """Internal command for file operations; recovers a vanished container once."""
        from envlayer_docker.runners import run_helper

        return self.with_recovery(lambda: run_helper(self._target(), argv, data))[0]

    # --- files ------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        """Absolute container path for ``path``, confined to ``file_root`` (also against symlinks)."""
        return confined_path(self, self._helper, path, self.options.workdir)

    def _owner_ids(self) -> tuple[int, int]:
        if self._owner is None:
            user = self._spec.user or self._container.image_user
            m = _NUMERIC_USER.match(user or "0")
            if not user or user == "root":
                self._owner = (0, 0)
            elif m:
                self._owner = (int(m.group(1)), int(m.group(2) or m.group(1)))
            else:
                code, out, _ = self._helper(["sh", "-c", "id -u; id -g"], None)
                ids = out.split()
                self._owner = (int(ids[0]), int(ids[1])) if code == 0 and len(ids) == 2 else (0, 0)
        return self._owner

    def _files_call(self, fn: Callable[[Any], T], doing: str) -> T:
        def attempt() -> T:
            files = self._files
            files.owner = self._owner_ids()
            with translated(doing, self.options):
                return fn(files)

        return self.with_recovery(attempt)[0]

    session_file_max = SESSION_FILE_MAX

    def file_helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        return self._helper(argv, data)

    def fetch_file(self, full: str, limit: int) -> bytes:
        """A file by one exec as the container's user (:func:`~envlayer.sandbox.files.read_by_helper`:
        unlike the archive API it sees tmpfs mounts, acts with the user's rights, and
        never mixes two versions of a file replaced meanwhile)."""
        return read_by_helper(self._helper, full, limit)

    def store_file(self, full: str, data: bytes) -> None:
        """A file by one exec as the container's user, replaced atomically
        (:func:`~envlayer.sandbox.files.write_by_helper`)."""
        write_by_helper(self._helper, full, data)

    def upload_dir(self, local: str | os.PathLike[str], remote: str) -> TransferSummary:
        """Copy the contents of host directory ``local`` into container directory ``remote``
        (symlinks are copied as links); see :class:`~envlayer.transfer.SupportsDirectoryTransfer`."""
        self._ensure_open()
        source = check_path(os.fspath(local), "local")
        owner = self.with_recovery(self._owner_ids)[0]
        payload = pack_dir(source, self.options.max_transfer_bytes, owner=owner)
        if unpack_in_session(self, remote, payload):
            return tar_summary(payload)
        full = self._path(remote)
        return self._files_call(lambda f: f.unpack(payload, full), f"uploading to {full}")

    def download_dir(self, remote: str, local: str | os.PathLike[str]) -> TransferSummary:
        """Copy the contents of container directory ``remote`` into host directory ``local``.
        Members escaping ``local`` raise :class:`SandboxPathError`."""
        self._ensure_open()
        dest = check_path(os.fspath(local), "local")
        limit = self.options.max_transfer_bytes
        done = download_in_session(self, remote, dest, limit)
        if done is not None:
            return done
        full = self._path(remote)
        return self._files_call(lambda f: f.download_dir(full, dest, limit), f"downloading {full}")

    def put_archive_stream(self, remote_dir: str, chunks: Iterable[bytes]) -> None:
        """Unpack a tar stream under container directory ``remote_dir`` with ``tar`` as the
        container's user; see :class:`~envlayer.transfer.SupportsArchiveStream` and
        :mod:`envlayer_docker.archive_stream`."""
        from envlayer_docker.archive_stream import put_stream

        self._ensure_open()
        put_stream(self._stream_starter(), self._path(remote_dir), chunks)

    def get_archive_stream(self, remote: str) -> Iterator[bytes]:
        """A tar stream of container path ``remote`` made by ``tar`` as the container's
        user; see :class:`~envlayer.transfer.SupportsArchiveStream`."""
        from envlayer_docker.archive_stream import get_stream

        self._ensure_open()
        yield from get_stream(self._stream_starter(), self._path(remote))

    def _stream_starter(self) -> Callable[[list[str]], Any]:
        """Starts an argv in an attached exec with stdin open, recovering a vanished
        container once (before any byte moved, so nothing is sent twice)."""
        from envlayer_docker.runners import start_exec

        def start(argv: list[str]) -> Any:
            def attempt() -> Any:
                target = self._target()
                return start_exec(target, argv, env=target.env, workdir="/", stdin=True, doing="streaming a tar")

            return self.with_recovery(attempt)[0]

        return start

    # --- snapshots (envlayer_docker.snapshots) -------------------------------------------------

    def create_snapshot(self, *, name: str | None = None) -> Snapshot:
        """Commit the container and copy its workspace into one labelled image; see
        :mod:`envlayer_docker.snapshots`. Background processes are not carried."""
        from envlayer_docker import snapshots

        self._ensure_open()
        with translated("taking a snapshot", self.options):
            return snapshots.create(
                self._api,
                self.options,
                self.container_id,
                self._spec.data,
                profile=self.profile,
                task=self.task_id,
                name=name,
            )

    @classmethod
    def managed_labels(cls, *, profile: str, task: str) -> dict[str, str]:
        """The labels of a persist-mode container of ``(profile, task)``: what makes a
        container the reaper's to sweep (for tools that make stale ones on purpose, such
        as ``envlayer bench``'s sweep; they need not import this package)."""
        from envlayer_docker import labels

        return labels.managed_labels(profile=profile, task=task, fingerprint_value="bench", persist=True, extra={})

    @classmethod
    def list_snapshots(cls, *, profile: str | None, options: DockerOptions) -> list[Snapshot]:
        """The snapshots of ``profile`` (None: all), newest first."""
        from envlayer_docker import snapshots

        api, opts = cls._class_api(options)
        with translated("listing snapshots", opts):
            return snapshots.list_all(api, profile=profile)

    @classmethod
    def remove_snapshot(cls, snapshot_id: str, *, options: DockerOptions) -> list[Snapshot]:
        """Remove snapshot ``snapshot_id``; forks made from it keep working. Returns what
        was removed ([] when there is no such snapshot)."""
        from envlayer_docker import snapshots

        api, opts = cls._class_api(options)
        with translated("removing a snapshot", opts):
            return snapshots.remove(api, snapshot_id)

    # --- lifecycle ----------------------------------------------------------------------------

    def cleanup(self, *, force_remove: bool = False, purge: bool = False) -> None:
        """Release this handle. Persist mode: the container keeps running. With
        ``force_remove`` or ``persist_across_processes = false``: stop and remove it in the
        background (see :meth:`wait_for_cleanup`); the task's durable workspace is kept
        unless ``purge`` is also given (``purge`` implies ``force_remove``). Idempotent;
        ``cleanup(force_remove=True)`` after a plain ``cleanup()`` still removes the
        container. Never raises."""
        with self._state_lock:
            if self._teardown is None:
                self._purge = purge  # before the worker starts: it reads it
            super().cleanup(force_remove=force_remove or purge)

    def holds_sandbox(self) -> bool:
        return self._container is not None

    def removal(self) -> Callable[[], None]:
        """Stop and remove the container (:func:`envlayer_docker.teardown.stop_and_remove`),
        then :meth:`_after_removal`."""
        api, container_id, stop_timeout = self._api, self._container.id, self.options.stop_timeout

        def work() -> None:
            teardown.stop_and_remove(api, container_id, stop_timeout)
            self._after_removal()

        return work

    def _after_removal(self) -> None:
        """After the container is gone: its durable data removed (``purge``) or its last use
        recorded for the retention rule, and the images of removed snapshots a fork was the
        last user of. Nothing for a container with neither data nor a snapshot."""
        if self._spec.data:
            from envlayer_docker import workspace

            if self._purge:
                workspace.remove(self._api, self.options, profile=self.profile, task=self.task_id)
            else:
                self._note_data_use()
        if self.from_snapshot is not None:
            from envlayer_docker import snapshots

            snapshots.prune_unused(self._api, released=[self._fork_image])

    def _note_data_use(self) -> None:
        from envlayer_docker.retention import note_last_use

        note_last_use(self._api, self.options, profile=self.profile, task=self.task_id, when=time.time())

    @classmethod
    def _class_api(cls, options: DockerOptions | None) -> tuple[Any, DockerOptions]:
        opts = options if isinstance(options, DockerOptions) else DockerOptions()
        return get_client(opts), opts

    @classmethod
    def check_available(cls, options: BaseOptions) -> None:
        """Raise :class:`BackendUnavailable` unless the daemon answers and the image is present
        (or, with ``dockerfile``, :class:`ConfigError` unless the Dockerfile and its context exist)."""
        from envlayer.sandbox.dockerfile import resolve_build

        api, opts = cls._class_api(options)  # type: ignore[arg-type]
        with translated("answering", opts):
            api.ping()
            if resolve_build(opts.dockerfile, opts.build_context) is not None:
                return  # built when an environment opens
            try:
                api.inspect_image(opts.image)
            except (sdk.errors.ImageNotFound, sdk.errors.NotFound):
                if not opts.pull:
                    raise BackendUnavailable(
                        f"image {opts.image!r} is not present on the Docker daemon",
                        hint=f"build or load it, run `docker pull {opts.image}`, or set pull = true",
                    ) from None

    @classmethod
    def reaper_context(cls, options: BaseOptions) -> tuple[Any, DockerOptions]:
        return cls._class_api(options)  # type: ignore[arg-type]

    @classmethod
    def sweep_orphans(
        cls, context: tuple[Any, DockerOptions], *, profile: str, max_age: float, dry_run: bool
    ) -> list[SandboxInfo]:
        """Stopped containers, those of dead owners, idle ones and unused workspaces, by the
        rules of :func:`envlayer_docker.reaper.sweep`."""
        from envlayer_docker import reaper

        api, opts = context
        return reaper.sweep(api, opts, profile=profile, max_age=max_age, dry_run=dry_run)

    @classmethod
    def expire_snapshots(cls, context: tuple[Any, DockerOptions], *, profile: str, dry_run: bool) -> list[Snapshot]:
        """The snapshots beyond the retention options (:func:`envlayer_docker.snapshots.expire`)."""
        from envlayer_docker.snapshots import expire

        api, opts = context
        return expire(api, opts, profile=profile, dry_run=dry_run)

    @classmethod
    def release_reaped(cls, context: tuple[Any, DockerOptions], removed: list[SandboxInfo]) -> None:
        """The images of removed snapshots that the reaped containers were the last users of."""
        from envlayer_docker.snapshots import prune_unused

        prune_unused(context[0], released=[r.detail.get("image", "") for r in removed if r.detail.get("image")])

    @classmethod
    def list_sandboxes(cls, *, profile: str | None, options: DockerOptions) -> list[SandboxInfo]:
        """Every managed container (of ``profile``, or of all profiles when None), then
        every durable workspace (status ``data``)."""
        from envlayer_docker import reaper, retention, workspace

        api, opts = cls._class_api(options)
        containers = [reaper.info_from(s) for s in reaper.list_managed(api, profile=profile)]
        data = workspace.list_data(api, opts, profile=profile)
        retention.annotate(api, opts, data, profile=profile)
        return containers + data

    @classmethod
    def remove_sandbox(
        cls, task_id: str, *, profile: str, options: DockerOptions, force: bool, purge: bool = False
    ) -> list[SandboxInfo]:
        """Remove the containers of (profile, task): stopped ones, and running ones too
        with ``force``; with ``purge``, then the task's durable workspace (kept while a
        container still uses it). Returns what was removed."""
        from envlayer_docker import reaper, workspace

        api, opts = cls._class_api(options)
        from envlayer_docker.snapshots import prune_unused

        removed = reaper.remove_task(api, profile=profile, task=task_id, force=force, options=None if purge else opts)
        prune_unused(api, released=[r.detail["image"] for r in removed])
        if purge:
            removed += workspace.remove(api, opts, profile=profile, task=task_id)
        return removed
