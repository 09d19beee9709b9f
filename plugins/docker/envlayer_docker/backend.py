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

Importing this module does not import the Docker SDK.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from envlayer.capabilities import Capability
from envlayer.environment import Command, Environment, SandboxInfo
from envlayer.errors import BackendUnavailable, SandboxPathError
from envlayer.options import BaseOptions
from envlayer.result import TIMEOUT_EXIT_CODE, ExecResult
from envlayer_docker import killer, teardown
from envlayer_docker.options import DockerOptions
from envlayer_docker.protocol import Outcome, OutputCallback, Reader

log = logging.getLogger("envlayer.docker")
T = TypeVar("T")

ALL_CAPABILITIES = frozenset(
    {
        Capability.FORCE_REMOVE,
        Capability.WAIT_FOR_CLEANUP,
        Capability.REAP_ORPHANS,
        Capability.LIST_SANDBOXES,
        Capability.REMOVE_SANDBOX,
        Capability.STREAMING,
        Capability.PERSISTENT_SESSION,
        Capability.DIRECTORY_TRANSFER,
        Capability.PERSIST_ACROSS_PROCESSES,
    }
)
_NUMERIC_USER = re.compile(r"^(\d+)(?::(\d+))?$")


class _NotStarted(Exception):
    """The daemon refused to start an exec because the container is gone or stopped:
    the command provably did not run, so recovering and running it is safe."""


class DockerEnvironment(Environment):
    """Commands and files in a Docker container; see the module docstring."""

    name = "docker"
    Options = DockerOptions
    capabilities = ALL_CAPABILITIES
    options: DockerOptions

    def __init__(
        self, options: BaseOptions | None = None, *, task_id: str = "default", profile: str = "default"
    ) -> None:
        super().__init__(options, task_id=task_id, profile=profile)
        if not isinstance(self.options, DockerOptions):
            raise TypeError(f"DockerEnvironment needs DockerOptions, got {type(self.options).__name__}")
        from envlayer_docker.client import get_client

        opts = self.options
        if opts.exec_mode == "oneshot":
            self.capabilities = ALL_CAPABILITIES - {Capability.PERSISTENT_SESSION}
        if not opts.persist_across_processes:
            self.capabilities = self.capabilities - {Capability.PERSIST_ACROSS_PROCESSES}
        self._api = get_client(opts)
        self._state_lock = threading.RLock()
        self._session: Any = None
        self._session_lock = threading.Lock()
        self._session_cwd: str | None = None
        self._last_lease = 0.0
        self._teardown: threading.Thread | None = None
        self._owner: tuple[int, int] | None = None
        self._exec_env = self._build_exec_env()
        self._container: Any = None
        self._files: Any = None
        from envlayer_docker.container import build_spec

        self._spec = self._guard(
            lambda: build_spec(self._api, opts, profile=profile, task=task_id, persist=opts.persist_across_processes),
            "inspecting the image",
        )
        self._attach()

    # --- container ----------------------------------------------------------------------

    def _build_exec_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for name in self.options.forward_env:
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(self.options.env)
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
        attached = self._guard(lambda: ensure(self._api, spec, self.options), "creating or attaching the container")
        with self._state_lock:
            self._container = attached
            self._files = FileTransfer(
                self._api, attached.id, tmpfs_paths=attached.tmpfs_paths, owner=(0, 0), helper=self._helper
            )
        log.debug(
            "%s container %s for task %r", "created" if attached.created else "attached to", attached.name, self.task_id
        )

    @property
    def container_id(self) -> str:
        """The id of the container in use."""
        return self._container.id

    @property
    def container_name(self) -> str:
        """The name of the container in use."""
        return self._container.name

    def _guard(self, fn: Callable[[], T], doing: str) -> T:
        """Run a daemon call, turning transport failures and API errors into
        :class:`BackendUnavailable` with a hint."""
        import requests
        from docker.errors import APIError, DockerException

        from envlayer_docker.client import unavailable

        try:
            return fn()
        except APIError as exc:
            raise BackendUnavailable(
                f"Docker refused {doing}: {exc.explanation or exc}",
                hint="check `docker ps -a` and the daemon log; `envlayer rm` removes a broken container",
            ) from exc
        except (DockerException, requests.exceptions.RequestException) as exc:
            raise unavailable(exc, self.options) from exc

    def _recover(self, seen_id: str) -> None:
        """The container ``seen_id`` is gone or stopped: drop the session and attach again
        (which starts a stopped container, or creates a new one). When another thread
        already did so, there is nothing to do."""
        with self._state_lock:
            if self._container is not None and self._container.id != seen_id:
                return
            log.warning(
                "container %s for task %r vanished or stopped; attaching again", self.container_name, self.task_id
            )
            self._drop_session()
            self._attach()

    # --- exec -----------------------------------------------------------------------------

    def exec(
        self,
        command: Command,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``command`` in the container; see :class:`~envlayer.environment.Environment`.

        ``on_output(stream, chunk)`` receives ``"stdout"``/``"stderr"`` chunks as they
        arrive (uncapped), from the calling thread. Raises :class:`BackendUnavailable`
        when the daemon is unreachable, or when the container disappeared while the
        command ran (it is not re-run; the next call re-creates the container).
        """
        self._ensure_open()
        if not isinstance(command, str) and not command:
            raise ValueError("empty argv")
        effective = self.options.timeout if timeout is None else (timeout or None)
        start = time.monotonic()
        deadline = None if effective is None else start + effective
        data = stdin.encode() if isinstance(stdin, str) else stdin
        run_cwd = posixpath.join(self.options.workdir, cwd) if cwd else None
        for attempt in (0, 1):
            seen = self.container_id
            try:
                result = self._run(command, run_cwd, env, deadline, data, on_output, effective, start)
                return dataclasses.replace(result, recovered="container recreated") if attempt else result
            except _NotStarted as exc:
                if attempt:
                    raise BackendUnavailable(
                        f"the container for task {self.task_id!r} is gone again right after being recreated: {exc}",
                        hint="check the daemon (`docker ps -a`, its log); something keeps removing the container",
                    ) from exc
                self._recover(seen)
        raise AssertionError("unreachable")

    def _touch_lease(self) -> bool:
        now = time.monotonic()
        if now - self._last_lease >= self.options.lease_interval:
            self._last_lease = now
            return True
        return False

    def _run(
        self,
        command: Command,
        cwd: str | None,
        env: Mapping[str, str] | None,
        deadline: float | None,
        data: bytes | None,
        on_output: OutputCallback | None,
        timeout: float | None,
        start: float,
    ) -> ExecResult:
        exec_id = uuid.uuid4().hex
        if self.options.exec_mode == "session" and self._session_lock.acquire(blocking=False):
            try:
                return self._run_session(command, cwd, env, deadline, data, on_output, timeout, start, exec_id)
            finally:
                self._session_lock.release()
        return self._run_oneshot(command, cwd, env, deadline, data, on_output, timeout, start, exec_id)

    def _exec_api(self, fn: Callable[[], T]) -> T:
        """Start an exec. A daemon answer meaning "no such / not running container"
        becomes :class:`_NotStarted`; every other failure :class:`BackendUnavailable`."""
        import requests
        from docker.errors import APIError, DockerException, NotFound

        from envlayer_docker.client import unavailable

        try:
            return fn()
        except NotFound as exc:
            raise _NotStarted(str(exc.explanation or exc)) from exc
        except APIError as exc:
            if exc.status_code == 409:
                raise _NotStarted(str(exc.explanation or exc)) from exc
            raise BackendUnavailable(
                f"Docker refused to start a command: {exc.explanation or exc}", hint="check the daemon log"
            ) from exc
        except (DockerException, requests.exceptions.RequestException) as exc:
            raise unavailable(exc, self.options) from exc
        except ConnectionError as exc:
            raise BackendUnavailable(
                f"could not start the shell {self.options.shell!r} in container {self.container_name}: {exc}",
                hint='check that the image has it (option `shell`), or use exec_mode = "oneshot"',
            ) from exc

    def _session_usable(self) -> Any:
        """The live session, or None. A session idle for longer than ``lease_interval``
        is probed first (the container may have been removed or restarted meanwhile)."""
        session = self._session
        if session is None or not session.alive or session.stream_closed():
            return None
        if time.monotonic() - session.last_used > self.options.lease_interval:
            try:
                if not self._api.exec_inspect(session.exec_id).get("Running"):
                    session.close()
                    return None
            except Exception:
                session.close()
                return None
        return session

    def _run_session(
        self,
        command: Command,
        cwd: str | None,
        env: Mapping[str, str] | None,
        deadline: float | None,
        data: bytes | None,
        on_output: OutputCallback | None,
        timeout: float | None,
        start: float,
        exec_id: str,
    ) -> ExecResult:
        from envlayer_docker.session import ShellSession

        session = self._session_usable()
        if session is None:
            self._drop_session()
            session = self._exec_api(
                lambda: ShellSession.start(
                    self._api,
                    self.container_id,
                    shell=self.options.shell,
                    env=self._exec_env,
                    user=self._spec.user,
                    workdir=self.options.workdir,
                    start_dir=self._session_cwd,
                    touch_lease=self._touch_lease(),
                )
            )
            self._session = session
        stdin_path = None
        if data is not None:
            stdin_path = f"/tmp/.envlayer-stdin-{exec_id}"
            code, _, err = self._oneshot_capture(["sh", "-c", 'cat > "$1"', "envlayer-stdin", stdin_path], data)
            if code != 0:
                raise BackendUnavailable(
                    f"could not stage stdin in the container: {err.decode(errors='replace')[:200]}",
                    hint='make /tmp writable in the container, or use exec_mode = "oneshot"',
                )
        limit, policy = self.options.max_output_bytes, self.options.output_policy
        try:
            outcome, reader, trailer = session.run(
                command,
                exec_id=exec_id,
                deadline=deadline,
                limit=limit,
                policy=policy,
                env=env,
                cwd=cwd,
                stdin_path=stdin_path,
                touch_lease=self._touch_lease(),
                on_output=on_output,
            )
        except BaseException:
            self._kill(exec_id, session.pid)
            self._drop_session()
            raise
        if outcome == Outcome.DONE:
            assert trailer is not None
            self._session_cwd = trailer.pwd
            return self._result(reader, trailer.exit_code, start, timeout)
        if outcome == Outcome.TIMEOUT:
            self._kill(exec_id, session.pid)
            self._drop_session()
            return self._result(reader, TIMEOUT_EXIT_CODE, start, timeout, timed_out=True)
        # EOF: the shell exited (exit N, syntax error, killed) or the container went away
        code = session.exit_code()
        self._drop_session()
        self._check_still_running("the command's shell ended", settle=code is None or code >= 128)
        return self._result(reader, 255 if code is None else code, start, timeout)

    def _run_oneshot(
        self,
        command: Command,
        cwd: str | None,
        env: Mapping[str, str] | None,
        deadline: float | None,
        data: bytes | None,
        on_output: OutputCallback | None,
        timeout: float | None,
        start: float,
        exec_id: str,
    ) -> ExecResult:
        from envlayer_docker.oneshot import OneShot

        environment = dict(self._exec_env)
        if env:
            environment.update(env)
        run_cwd = cwd or self._session_cwd or self.options.workdir
        shot = self._exec_api(
            lambda: OneShot.start(
                self._api,
                self.container_id,
                command,
                shell=self.options.shell,
                exec_id=exec_id,
                env=environment,
                user=self._spec.user,
                cwd=run_cwd,
                stdin=data if data is not None else None,
                touch_lease=self._touch_lease(),
            )
        )
        limit, policy = self.options.max_output_bytes, self.options.output_policy
        try:
            outcome, reader, trailer = shot.read(deadline=deadline, limit=limit, policy=policy, on_output=on_output)
        except BaseException:
            self._kill(exec_id, None)
            shot.close()
            raise
        if outcome == Outcome.TIMEOUT:
            self._kill(exec_id, None)
            shot.close()
            return self._result(reader, TIMEOUT_EXIT_CODE, start, timeout, timed_out=True)
        if outcome == Outcome.DONE:
            shot.close()
            assert trailer is not None
            return self._result(reader, trailer.exit_code, start, timeout)
        code = shot.exit_code()
        shot.close()
        self._check_still_running("the command's exec ended early", settle=code is None or code >= 128)
        return self._result(reader, 255 if code is None else _oci_code(code, reader), start, timeout)

    def _check_still_running(self, what: str, *, settle: bool) -> None:
        """After an unexpected end of stream: if the container is gone or stopped, the
        command may or may not have run, so raise instead of guessing (never re-run).

        With ``settle`` (the shell died from a signal), watch the state for up to a second:
        the daemon marks a killed container as exited only after its processes died."""
        from docker.errors import NotFound

        end = time.monotonic() + (1.0 if settle else 0.0)
        while True:
            try:
                state = self._api.inspect_container(self.container_id).get("State") or {}
            except NotFound:
                state = {"Status": "removed"}
            except Exception:
                return
            if state.get("Status") != "running" or time.monotonic() >= end:
                break
            time.sleep(0.05)
        if state.get("Status") != "running":
            detail = " (OOM-killed)" if state.get("OOMKilled") else ""
            raise BackendUnavailable(
                f"{what} because the container {self.container_name} is {state.get('Status')}{detail}; "
                "the command may have partly run and was NOT re-run",
                hint="check its effects and retry; the next call restarts or re-creates the container",
            )

    def _result(
        self, reader: Reader, code: int, start: float, timeout: float | None, *, timed_out: bool = False
    ) -> ExecResult:
        out, err = reader.buffers[1], reader.buffers[2]
        return ExecResult(
            exit_code=code,
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            duration=time.monotonic() - start,
            timed_out=timed_out,
            timeout=timeout,
            stdout_truncation=out.truncation,
            stderr_truncation=err.truncation,
        )

    def _kill(self, exec_id: str, session_pid: int | None) -> None:
        container = self._container
        if container is not None:
            killer.kill_command(
                self._api,
                container.id,
                exec_id,
                session_pid=session_pid,
                user=self._spec.user,
                shell=self.options.shell,
            )

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def _oneshot_capture(self, argv: list[str], data: bytes | None, timeout: float = 300.0) -> tuple[int, bytes, bytes]:
        """Run an internal helper command one-shot (no session state): (code, out, err)."""
        from envlayer_docker.oneshot import OneShot

        shot = self._exec_api(
            lambda: OneShot.start(
                self._api,
                self.container_id,
                argv,
                shell=self.options.shell,
                exec_id=uuid.uuid4().hex,
                env=self._exec_env,
                user=self._spec.user,
                cwd="/",
                stdin=data,
                touch_lease=False,
            )
        )
        try:
            _, reader, trailer = shot.read(
                deadline=time.monotonic() + timeout, limit=None, policy="head", on_output=None
            )
        finally:
            shot.close()
        if trailer is not None:
            code = trailer.exit_code
        else:
            status = shot.exit_code()
            code = 255 if status is None else status
        return code, reader.buffers[1].getvalue(), reader.buffers[2].getvalue()

    def _helper(self, argv: list[str], data: bytes | None) -> tuple[int, bytes, bytes]:
        """Internal command for file operations; recovers a vanished container once."""
        for attempt in (0, 1):
            seen = self.container_id
            try:
                return self._oneshot_capture(argv, data)
            except _NotStarted:
                if attempt:
                    raise BackendUnavailable("the container keeps disappearing", hint="check the daemon") from None
                self._recover(seen)
        raise AssertionError("unreachable")

    # --- files ------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        """Absolute container path for ``path``; enforces ``file_root`` lexically and,
        through ``readlink -f`` in the container, against symlinks."""
        full = self.resolve_path(path, self.options.workdir)
        root = self.options.file_root
        if root is not None:
            root_abs = posixpath.normpath(posixpath.join(self.options.workdir, root))
            code, out, _ = self._helper(
                [
                    "sh",
                    "-c",
                    'readlink -f -- "$1"; readlink -f -- "$2" || readlink -f -- "${2%/*}"',
                    "envlayer-real",
                    root_abs,
                    full,
                ],
                None,
            )
            lines = out.decode(errors="replace").splitlines()
            if code == 0 and len(lines) >= 2:
                real_root, real = lines[0], lines[1]
                if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
                    raise SandboxPathError(path, root_abs)
        return full

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
        from envlayer_docker.files import ContainerGone

        for attempt in (0, 1):
            files = self._files
            seen = files.container_id
            files.owner = self._owner_ids()
            try:
                return self._guard(lambda f=files: fn(f), doing)
            except ContainerGone:
                if attempt:
                    raise BackendUnavailable("the container keeps disappearing", hint="check the daemon") from None
                self._recover(seen)
        raise AssertionError("unreachable")

    def read_file(self, path: str) -> bytes:
        """Read a file from the container; see :class:`~envlayer.environment.Environment`."""
        self._ensure_open()
        full = self._path(path)
        limit = self.options.max_file_bytes
        return self._files_call(lambda f: f.read(full, limit), f"reading {full}")

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file into the container, creating parent directories."""
        self._ensure_open()
        payload = data.encode() if isinstance(data, str) else data
        from envlayer.errors import FileTooLarge

        if len(payload) > self.options.max_file_bytes:
            raise FileTooLarge(path, len(payload), self.options.max_file_bytes)
        full = self._path(path)
        self._files_call(lambda f: f.write(full, payload), f"writing {full}")

    def upload_dir(self, local: str, remote: str) -> None:
        """Copy the contents of host directory ``local`` into container directory ``remote``."""
        self._ensure_open()
        full = self._path(remote)
        self._files_call(lambda f: f.upload_dir(local, full, self.options.max_transfer_bytes), f"uploading to {full}")

    def download_dir(self, remote: str, local: str) -> None:
        """Copy the contents of container directory ``remote`` into host directory ``local``.
        Members escaping ``local`` raise :class:`SandboxPathError`."""
        self._ensure_open()
        full = self._path(remote)
        self._files_call(lambda f: f.download_dir(full, local, self.options.max_transfer_bytes), f"downloading {full}")

    # --- lifecycle ----------------------------------------------------------------------------

    def cleanup(self, *, force_remove: bool = False, purge: bool = False) -> None:
        """Release this handle. Persist mode: the container keeps running. With
        ``force_remove`` or ``persist_across_processes = false``: stop and remove it in the
        background (see :meth:`wait_for_cleanup`); the task's durable workspace is kept
        unless ``purge`` is also given (``purge`` implies ``force_remove``). Idempotent;
        ``cleanup(force_remove=True)`` after a plain ``cleanup()`` still removes the
        container. Never raises."""
        with self._state_lock:
            self._closed = True
            try:
                self._drop_session()
            except Exception:
                pass
            remove = force_remove or purge or not self.options.persist_across_processes
            if remove and self._teardown is None and self._container is not None:
                data = self._purge_data if purge and self._spec.data else None
                self._teardown = teardown.schedule(self._api, self._container.id, self.options.stop_timeout, then=data)

    def _purge_data(self) -> None:
        from envlayer_docker import workspace

        workspace.remove(self._api, self.options, profile=self.profile, task=self.task_id)

    def wait_for_cleanup(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for this environment's teardown; True when done
        (or when there was nothing to tear down)."""
        thread = self._teardown
        if thread is None:
            return True
        thread.join(max(timeout, 0))
        return not thread.is_alive()

    @classmethod
    def wait_for_all_cleanups(cls, timeout: float) -> bool:
        """Join every teardown started in this process (also run at exit, up to 15 s)."""
        return teardown.wait_all(timeout)

    @classmethod
    def _class_api(cls, options: DockerOptions | None) -> tuple[Any, DockerOptions]:
        from envlayer_docker.client import get_client

        opts = options if isinstance(options, DockerOptions) else DockerOptions()
        return get_client(opts), opts

    @classmethod
    def check_available(cls, options: BaseOptions) -> None:
        """Raise :class:`BackendUnavailable` unless the daemon answers and the image is present."""
        from docker.errors import APIError, DockerException, ImageNotFound, NotFound

        from envlayer_docker.client import unavailable

        api, opts = cls._class_api(options)  # type: ignore[arg-type]
        try:
            api.ping()
            api.inspect_image(opts.image)
        except (ImageNotFound, NotFound):
            if not opts.pull:
                raise BackendUnavailable(
                    f"image {opts.image!r} is not present on the Docker daemon",
                    hint=f"build or load it, run `docker pull {opts.image}`, or set pull = true",
                ) from None
        except APIError as exc:
            raise BackendUnavailable(
                f"the Docker daemon answered with an error: {exc.explanation or exc}", hint="check the daemon log"
            ) from exc
        except (DockerException, OSError) as exc:
            raise unavailable(exc, opts) from exc

    @classmethod
    def reap_orphans(cls, *, profile: str, max_age: float, dry_run: bool, options: DockerOptions) -> list[SandboxInfo]:
        """Remove this profile's stopped managed containers older than ``max_age`` seconds,
        running private containers whose owner process died, and (when
        ``idle_reclaim_after`` is set, as by default) idle running ones; never durable
        workspaces; see
        :mod:`envlayer_docker.reaper`. Returns what was (or would be) removed."""
        from envlayer_docker import reaper

        api, opts = cls._class_api(options)
        removed = reaper.reap(api, profile=profile, max_age=max_age, dry_run=dry_run)
        removed += reaper.reap_dead_owners(api, profile=profile, dry_run=dry_run)
        if opts.idle_reclaim_after is not None:
            removed += reaper.reclaim_idle(
                api, profile=profile, idle_after=opts.idle_reclaim_after, dry_run=dry_run, shell=opts.shell
            )
        return removed

    @classmethod
    def list_sandboxes(cls, *, profile: str | None, options: DockerOptions) -> list[SandboxInfo]:
        """Every managed container (of ``profile``, or of all profiles when None), then
        every durable workspace (status ``data``)."""
        from envlayer_docker import reaper, workspace

        api, opts = cls._class_api(options)
        containers = [reaper.info_from(s) for s in reaper.list_managed(api, profile=profile)]
        return containers + workspace.list_data(api, opts, profile=profile)

    @classmethod
    def remove_sandbox(
        cls, task_id: str, *, profile: str, options: DockerOptions, force: bool, purge: bool = False
    ) -> list[SandboxInfo]:
        """Remove the containers of (profile, task): stopped ones, and running ones too
        with ``force``; with ``purge``, then the task's durable workspace (kept while a
        container still uses it). Returns what was removed."""
        from docker.errors import APIError, NotFound

        from envlayer_docker import reaper, workspace

        api, opts = cls._class_api(options)
        removed = []
        for summary in reaper.list_managed(api, profile=profile, task=task_id):
            if summary.get("State") == "running" and not force:
                continue
            try:
                api.remove_container(summary["Id"], force=force, v=True)
            except NotFound:
                continue
            except APIError as exc:
                log.warning("could not remove %s: %s", summary["Id"][:12], exc.explanation or exc)
                continue
            removed.append(reaper.info_from(summary))
        if purge:
            removed += workspace.remove(api, opts, profile=profile, task=task_id)
        return removed


def _oci_code(code: int, reader: Reader) -> int:
    """Docker reports 126 for an exec whose binary is missing; say 127 as a shell would."""
    err = reader.buffers[2].getvalue() + reader.buffers[1].getvalue()
    if code == 126 and b"executable file not found" in err:
        return 127
    return code
