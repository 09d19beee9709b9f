"""``KubernetesEnvironment``: commands and files in one pod per (profile, task).

Lifecycle (details in docs/backends/kubernetes.md):

* The constructor creates or attaches to the pod of (profile, task) (see
  :mod:`envlayer_kubernetes.pods`) and waits while it is Pending; it raises
  :class:`BackendUnavailable` when the cluster cannot be reached, the pod cannot start,
  or a pod of that name is not envlayer's.
* ``cleanup()`` in persist mode (default) leaves the pod running. ``cleanup(force_remove=True)``,
  or any cleanup with ``persist_across_processes = false``, deletes it (grace 0) on a
  background thread that :meth:`wait_for_cleanup` joins (until the API answers 404).
* Every command gets ``PAGER=cat`` and ``GIT_PAGER=cat`` (the core's command defaults,
  over ``forward_env``, as with Docker and local) unless ``env`` or the call's ``env`` sets
  them.
* Commands run in a persistent shell (``exec_mode = "session"``, the core's protocol over
  one long-lived exec) or one exec each (``"oneshot"``); a call that finds the session
  busy (another thread) runs one-shot. A timeout or an interrupt kills the command's
  process tree in the pod with the core's kill script (a second exec).
* A pod that vanished or stopped is detected from the API's answer to the exec (never from
  command output) and re-created at most once per call, only when the command provably
  did not start; a command is never run twice.

Importing this module does not import the ``kubernetes`` client (read through
:mod:`envlayer_kubernetes.sdk`), nor the plugin's modules that only some calls need: the methods that use them import
them, since ``envlayer backends`` and every CLI call import this class.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from envlayer.capabilities import Capability
from envlayer.environment import SandboxInfo
from envlayer.errors import BackendUnavailable, InvalidArgument
from envlayer.execution.shell_script import export_lines, interactive_shell_script
from envlayer.options import BaseOptions
from envlayer.request import ExecRequest, check_path
from envlayer.result import ExecResult
from envlayer.sandbox.archive import tar_summary
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
from envlayer_kubernetes.options import KubernetesOptions

log = logging.getLogger("envlayer.kubernetes")

ALL_CAPABILITIES = MANAGED_SANDBOX_CAPABILITIES | {Capability.UNSET_ENV, Capability.SNAPSHOT}


class KubernetesEnvironment(ManagedSandboxEnvironment):
    """Commands and files in a Kubernetes pod; see the module docstring."""

    name = "kubernetes"
    Options = KubernetesOptions
    capabilities = ALL_CAPABILITIES
    environment_variables = ("KUBECONFIG", "KUBERNETES_*", "HOME")  # kubeconfig.py, in-cluster config
    options: KubernetesOptions
    recovery_hint = "check the cluster's events; something keeps deleting the pod"

    @classmethod
    def client_identity(cls, options: Any, environ: Mapping[str, str], cwd: str) -> ClientIdentity:
        """Whom a caller with ``options``, ``environ`` and ``cwd`` reaches, and as whom
        (see :mod:`envlayer.sandbox.client_identity`)."""
        from envlayer_kubernetes.client import client_identity

        return client_identity(options, environ)

    def open_sandbox(self) -> None:
        from envlayer_kubernetes.client import connect
        from envlayer_kubernetes.pods import build_spec

        opts = self.options
        self._cluster = connect(opts)
        self._base_env = {n: os.environ[n] for n in opts.forward_env if n in os.environ}
        self._base_env.update(with_command_defaults(opts.env))
        self._spec = build_spec(opts, profile=self.profile, task=self.task_id, persist=opts.persist_across_processes)
        self._pod: Any = None
        snapshot = self.from_snapshot
        archive = self._snapshot_archive(snapshot) if snapshot is not None else None
        self._attach()
        from envlayer_kubernetes.runners import ExecTarget, SessionRunner

        self._target = ExecTarget(self._cluster, self._spec.name, opts, self._base_env)
        self._session = SessionRunner(self._target) if opts.exec_mode == "session" else None
        if archive is not None:
            self._restore(archive)

    # --- pod ------------------------------------------------------------------------------

    def _attach(self) -> None:
        from envlayer_kubernetes.pods import ensure

        attached = ensure(self._cluster, self._spec, self.options)
        if attached.replaced:
            self.announce(attached.replaced)
        with self._state_lock:
            self._pod = attached
        log.debug(
            "%s pod %s for task %r", "created" if attached.created else "attached to", attached.name, self.task_id
        )

    def _snapshot_archive(self, snapshot: Snapshot) -> bytes:
        """The tar of ``snapshot``, refusing a task that already has a pod (its files
        would not come from the snapshot). Raises :class:`InvalidArgument`."""
        from envlayer_kubernetes import pods, snapshots

        data = snapshots.archive(self.options, snapshot, **self._scope(self._cluster))
        if pods.read(self._cluster, self._spec.name, self.options) is not None:
            raise _task_taken(self.task_id, self._spec.name)
        return data

    def _restore(self, data: bytes) -> None:
        """Unpack a snapshot into the new pod; a pod another process created meanwhile is
        refused, and a pod whose unpack failed is deleted."""
        from envlayer_kubernetes import pods, snapshots

        if not self._pod.created:
            raise _task_taken(self.task_id, self.pod_name)
        try:
            snapshots.restore(self._helper, self.options, data)
        except BaseException:
            with contextlib.suppress(Exception):
                pods.delete(self._cluster, self.pod_name, self.options)
            raise

    @staticmethod
    def _scope(cluster: Any) -> dict[str, str]:
        """The namespace and API server a snapshot belongs to."""
        return {"namespace": cluster.namespace, "server": str(cluster.core.api_client.configuration.host)}

    @property
    def pod_name(self) -> str:
        """The name of the pod in use."""
        return self._spec.name

    @property
    def namespace(self) -> str:
        """The namespace of the pod."""
        return self._cluster.namespace

    # --- recovery (the base retries once, see envlayer.sandbox.base) ---------------------

    def is_gone(self, exc: Exception) -> bool:
        """The API refused to start an exec because the pod is gone or not running."""
        from envlayer_kubernetes.channel import NotStarted

        return isinstance(exc, NotStarted)

    def sandbox_identity(self) -> str:
        return str(self._pod.uid)

    def recover(self, seen: str) -> str:
        """The pod ``seen`` is gone or not running: attach again (which replaces an
        ended pod or creates a new one), unless another thread already did."""
        with self._state_lock:
            if self._pod is None or self._pod.uid == seen:
                log.warning("pod %s for task %r vanished or stopped; attaching again", self.pod_name, self.task_id)
                self._attach()
        return "pod recreated"

    # --- exec: the base owns the contract and the session-or-one-shot choice ----------------

    def run_in_session(self, request: ExecRequest) -> ExecResult:
        assert self._session is not None
        return self._session.run(request)

    def run_oneshot(self, request: ExecRequest) -> ExecResult:
        """An exec of its own, in the session's directory."""
        from envlayer_kubernetes.runners import run_oneshot

        session_cwd = self._session.cwd if self._session is not None else None
        return run_oneshot(self._target, request, cwd=self.call_directory(request, session_cwd or self.options.workdir))

    def _helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        """One of envlayer's own commands (files); recovers a vanished pod once."""
        from envlayer_kubernetes.runners import run_helper

        return self.with_recovery(lambda: run_helper(self._target, argv, data))[0]

    def open_terminal(self, rows: int, cols: int) -> Any:
        """An interactive ``shell`` with a tty in the pod (``envlayer shell``), in the
        session's current directory (else ``workdir``), with the commands' variables and
        the caller's ``TERM``; see :mod:`envlayer_kubernetes.terminal`. The variables go
        in a 0600 file under /tmp that the shell sources and removes before its prompt."""
        from envlayer_kubernetes.channel import NotStarted
        from envlayer_kubernetes.terminal import KubernetesTerminal

        self._ensure_open()
        shell, env_file = self.options.shell, f"/tmp/.envlayer-shell-{uuid.uuid4().hex}"
        variables = export_lines({**self._base_env, "TERM": os.environ.get("TERM", "xterm")})
        code, _, err = self._helper([shell, "-c", f"umask 077 && cat > {env_file}"], variables.encode())
        if code != 0:
            raise BackendUnavailable(
                f"cannot write {env_file} in pod {self.pod_name}: {err.decode(errors='replace').strip()}",
                hint="`envlayer shell` needs a writable /tmp in the pod",
            )
        session_cwd = self._session.cwd if self._session is not None else None
        script = interactive_shell_script(shell, env_file, session_cwd or self.options.workdir)
        try:
            return KubernetesTerminal(self._target.open([shell, "-c", script], stdin=True, tty=True), rows, cols)
        except NotStarted as exc:
            raise BackendUnavailable(
                f"pod {self.pod_name} is not running: {exc}", hint="retry; the pod is re-created"
            ) from exc
        except BaseException:  # the shell never ran, so never removed the file
            with contextlib.suppress(Exception):
                self._helper([shell, "-c", f"rm -f {env_file}"], None)
            raise

    # --- files ------------------------------------------------------------------------------

    session_file_max = SESSION_FILE_MAX

    def _path(self, path: str) -> str:
        """Absolute pod path for ``path``, confined to ``file_root`` (also against symlinks)."""
        return confined_path(self, self._helper, path, self.options.workdir)

    def file_helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        return self._helper(argv, data)

    def fetch_file(self, full: str, limit: int) -> bytes:
        """A file by one exec of ``cat`` in the pod (:func:`envlayer.sandbox.files.read_by_helper`)."""
        return read_by_helper(self._helper, full, limit)

    def store_file(self, full: str, data: bytes) -> None:
        """A file by one exec in the pod (:func:`envlayer.sandbox.files.write_by_helper`)."""
        write_by_helper(self._helper, full, data)

    def upload_dir(self, local: str | os.PathLike[str], remote: str) -> TransferSummary:
        """Copy the contents of host directory ``local`` into pod directory ``remote``
        (symlinks are copied as links); see :class:`~envlayer.transfer.SupportsDirectoryTransfer`."""
        from envlayer_kubernetes import files

        self._ensure_open()
        data = files.pack(check_path(os.fspath(local), "local"), self.options.max_transfer_bytes)
        if unpack_in_session(self, remote, data):
            return tar_summary(data)
        return files.unpack(self._helper, self.options.shell, data, self._path(remote))

    def download_dir(self, remote: str, local: str | os.PathLike[str]) -> TransferSummary:
        """Copy the contents of pod directory ``remote`` into host directory ``local``.
        Members escaping ``local`` raise :class:`SandboxPathError`."""
        from envlayer_kubernetes import files

        self._ensure_open()
        dest = check_path(os.fspath(local), "local")
        limit = self.options.max_transfer_bytes
        done = download_in_session(self, remote, dest, limit)
        if done is not None:
            return done
        return files.download_dir(self._helper, self.options.shell, self._path(remote), dest, limit)

    # --- snapshots (envlayer_kubernetes.snapshots) -------------------------------------------

    def create_snapshot(self, *, name: str | None = None) -> Snapshot:
        """The working directory now, as a snapshot kept on this machine; see
        :mod:`envlayer_kubernetes.snapshots`. Running processes are not carried."""
        from envlayer_kubernetes import snapshots

        return snapshots.create(
            self._helper, self.options, **self._scope(self._cluster), profile=self.profile, task=self.task_id, name=name
        )

    @classmethod
    def list_snapshots(cls, *, profile: str | None, options: KubernetesOptions) -> list[Snapshot]:
        """The snapshots of ``profile`` (None: all) for the namespace and API server, newest first."""
        from envlayer_kubernetes import snapshots

        cluster, opts = cls._class_cluster(options)
        return snapshots.list_all(opts, **cls._scope(cluster), profile=profile)

    @classmethod
    def remove_snapshot(cls, snapshot_id: str, *, options: KubernetesOptions) -> list[Snapshot]:
        """Remove snapshot ``snapshot_id``; forks made from it keep working. Returns what
        was removed ([] when there is no such snapshot here)."""
        from envlayer_kubernetes import snapshots

        cluster, opts = cls._class_cluster(options)
        return snapshots.remove(opts, snapshot_id, **cls._scope(cluster))

    # --- lifecycle ----------------------------------------------------------------------------

    def holds_sandbox(self) -> bool:
        return self._pod is not None

    def removal(self) -> Callable[[], None]:
        """Delete the pod (grace 0) and wait for the API's 404 (up to 60 s)."""
        from envlayer_kubernetes import pods

        cluster, name, opts = self._cluster, self.pod_name, self.options

        def work() -> None:
            pods.delete(cluster, name, opts)
            pods.wait_gone(cluster, name, opts, 60.0)

        return work

    @classmethod
    def _class_cluster(cls, options: BaseOptions | None) -> tuple[Any, KubernetesOptions]:
        from envlayer_kubernetes.client import connect

        opts = options if isinstance(options, KubernetesOptions) else KubernetesOptions()
        return connect(opts), opts

    @classmethod
    def check_available(cls, options: BaseOptions) -> None:
        """Raise :class:`BackendUnavailable` unless the configuration loads, the API answers
        and this identity may list pods in the namespace."""
        from envlayer_kubernetes.client import call

        cluster, opts = cls._class_cluster(options)
        call(
            cluster,
            lambda: cluster.core.list_namespaced_pod(cluster.namespace, limit=1, _request_timeout=opts.api_timeout),
            "listing pods",
        )

    @classmethod
    def reaper_context(cls, options: BaseOptions) -> tuple[Any, KubernetesOptions]:
        return cls._class_cluster(options)

    @classmethod
    def sweep_orphans(
        cls, context: tuple[Any, KubernetesOptions], *, profile: str, max_age: float, dry_run: bool
    ) -> list[SandboxInfo]:
        """This profile's ended pods older than ``max_age`` seconds and its stuck Pending
        pods, in the configured namespace only (see :mod:`envlayer_kubernetes.sweep`)."""
        from envlayer_kubernetes import sweep

        cluster, opts = context
        return sweep.reap(cluster, opts, profile=profile, max_age=max_age, dry_run=dry_run)

    @classmethod
    def expire_snapshots(cls, context: tuple[Any, KubernetesOptions], *, profile: str, dry_run: bool) -> list[Snapshot]:
        """Its snapshots of the namespace and API server beyond the retention options
        (:func:`envlayer_kubernetes.snapshots.expire`)."""
        from envlayer_kubernetes import snapshots

        cluster, opts = context
        return snapshots.expire(opts, **cls._scope(cluster), profile=profile, dry_run=dry_run)

    @classmethod
    def list_sandboxes(cls, *, profile: str | None, options: KubernetesOptions) -> list[SandboxInfo]:
        """Every managed pod (of ``profile``, or of all profiles when None) in the namespace."""
        from envlayer_kubernetes import sweep

        cluster, opts = cls._class_cluster(options)
        return [sweep.info_from(p, cluster.namespace) for p in sweep.list_managed(cluster, opts, profile=profile)]

    @classmethod
    def remove_sandbox(
        cls, task_id: str, *, profile: str, options: KubernetesOptions, force: bool
    ) -> list[SandboxInfo]:
        """Delete the pods of (profile, task) in the namespace: ended or pending ones, and
        running ones too with ``force``. Returns what was deleted."""
        from envlayer_kubernetes import sweep

        cluster, opts = cls._class_cluster(options)
        victims = [
            p
            for p in sweep.list_managed(cluster, opts, profile=profile, task=task_id)
            if force or (p.status is None or p.status.phase != "Running")
        ]
        return sweep.delete_all(cluster, opts, victims, dry_run=False)


def _task_taken(task: str, pod: str) -> InvalidArgument:
    return InvalidArgument(
        "task_id",
        f"task {task!r} already has a pod ({pod}); a fork needs a new task",
        hint=f"pick a new task id, or remove it first (`envlayer rm {task}`)",
    )
