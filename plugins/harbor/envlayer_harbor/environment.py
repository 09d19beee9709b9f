"""``Environment``: a Harbor environment that runs a task on any envlayer backend.

``harbor run --env envlayer_harbor:Environment --ek backend=docker`` (Harbor >= 0.25, < 0.27).
One trial gets one private sandbox, task id = Harbor's ``session_id``, profile ``harbor``:

* ``start``: builds the image from the task's ``environment/Dockerfile`` through the
  backend's ``dockerfile`` option (or runs ``[environment] docker_image``), applies the
  task's cpus, memory, GPUs, network mode and workdir (:mod:`envlayer_harbor.selection`),
  creates ``/logs/agent``, ``/logs/verifier`` and ``/logs/artifacts``, and uploads the
  environment directory for prebuilt-image tasks as Harbor's own environments do.
* ``exec``: ``bash -c COMMAND`` through the backend's shell, with Harbor's cwd, env (its
  persistent and scoped variables merged), user and timeout; output streams to Harbor's
  callback when one is set. A timeout kills the command's process tree in the sandbox and
  raises ``RuntimeError("Command timed out after N seconds")`` as Harbor's docker
  environment does; a cancelled call (Harbor's agent timeout) kills it too.
* ``stop``: removes the sandbox and waits until the removal has finished, so the caller can
  remove images or volumes right after; ``delete=False`` keeps a persist-mode sandbox
  running and says so.

Every blocking envlayer call runs in a worker thread (:func:`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode

from envlayer import dispatch
from envlayer.cancel_token import CancelToken
from envlayer.capabilities import Capability, supports
from envlayer.environment import Environment as EnvlayerEnvironment
from envlayer.errors import SandboxIsADirectory
from envlayer.integrations.selection import Selection, select
from envlayer.result import ExecResult as EnvlayerResult
from envlayer_harbor.selection import TaskSpec, resolve, split_keywords

log = logging.getLogger("envlayer.harbor")

LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
"""The directories Harbor's agents and verifier write to (``EnvironmentPaths``)."""
TEARDOWN_WAIT = 120.0
"""Seconds ``stop`` waits for the sandbox's removal to finish."""
ROOT_USERS = ("root", "0")


class Environment(BaseEnvironment):
    """A Harbor environment over an envlayer backend (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        keywords = {k: kwargs.pop(k) for k in list(kwargs) if not _harbor_keyword(k)}
        self._keywords = keywords
        self._sandbox: EnvlayerEnvironment | None = None
        self._selection: Selection | None = None
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "envlayer"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        backend = str(self._keywords.get("backend") or os.environ.get("ENVLAYER_BACKEND") or "")
        return EnvironmentCapabilities(
            gpus=backend in ("docker", "kubernetes", "modal", "daytona"),
            disable_internet=backend in ("docker", "modal"),
        )

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        """Check the ``--ek`` keywords before any trial is queued: the backend loads and
        every other keyword is a valid option of it (envlayer's ``ConfigError`` names the
        key). Harbor 0.25 calls ``preflight()``, 0.26 ``preflight(kwargs=...)``."""
        given = dict(kwargs or {})
        base = super().preflight
        if "kwargs" in inspect.signature(base).parameters:
            base({k: v for k, v in given.items() if _harbor_keyword(k)})
        else:
            base()
        chosen, options = split_keywords({k: v for k, v in given.items() if not _harbor_keyword(k)})
        select(backend=chosen.get("backend"), config_file=chosen.get("config_file"), options=options)

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(
                f"{self.environment_dir / 'Dockerfile'} not found and the task names no [environment] docker_image"
            )

    def _task(self) -> TaskSpec:
        config = self.task_env_config
        return TaskSpec(
            environment_dir=Path(self.environment_dir),
            docker_image=config.docker_image,
            workdir=config.workdir,
            cpus=self._effective_cpus,
            memory_mb=self._effective_memory_mb,
            gpus=self._effective_gpus,
            gpu_types=tuple(config.gpu_types or ()),
            no_network=self.network_policy.network_mode == NetworkMode.NO_NETWORK,
        )

    @property
    def sandbox(self) -> EnvlayerEnvironment:
        """The envlayer environment of this trial (after :meth:`start`)."""
        if self._sandbox is None:
            raise RuntimeError("the environment has not been started (call start() first)")
        return self._sandbox

    async def start(self, force_build: bool) -> None:
        if force_build:
            self.logger.info(
                "force_build: envlayer rebuilds an image only when the Dockerfile or a file of its context changed"
            )
        self._selection = await asyncio.to_thread(resolve, self._keywords, self._task())
        self._sandbox = await self._open(self._selection)
        self.logger.debug(
            "envlayer %s sandbox for %s (profile %s)",
            self._selection.settings.backend,
            self.session_id,
            self._selection.profile,
        )
        dirs = " ".join(LOG_DIRS)
        made = await self.exec(f"mkdir -p {dirs} && chmod 777 {dirs}", user="root")
        if made.return_code != 0:
            raise RuntimeError(f"creating {dirs} failed: {made.stderr or made.stdout}")
        upload = getattr(self, "_upload_environment_dir_after_start", None)
        if upload is not None:
            await upload()

    async def _open(self, selection: Selection) -> EnvlayerEnvironment:
        """Build the image and create the sandbox in a worker thread. Cancelled meanwhile
        (Harbor's build timeout), it waits for the thread and removes what it made before
        passing the cancellation on: a sandbox nobody holds would be left running."""
        opening = asyncio.ensure_future(asyncio.to_thread(selection.open, self.session_id))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            self.logger.warning("start of %s cancelled; removing its sandbox once it exists", self.session_id)
            with contextlib.suppress(Exception):
                made = await opening
                await asyncio.to_thread(_remove, made)
            raise

    async def stop(self, delete: bool) -> None:
        sandbox = self._sandbox
        if sandbox is None or sandbox.closed:
            return
        persist = bool(getattr(sandbox.options, "persist_across_processes", False))
        if not delete and persist:
            await asyncio.to_thread(dispatch.cleanup, sandbox)
            self.logger.info(
                "left the sandbox of %s running (delete=False); remove it with `envlayer rm --profile %s -- %s`",
                self.session_id,
                sandbox.profile,
                self.session_id,
            )
            return
        if not delete:
            self.logger.warning(
                "delete=False, but the sandbox of %s is private to this process and is removed now "
                "(--ek persist_across_processes=true keeps it)",
                self.session_id,
            )
        if not await asyncio.to_thread(_remove, sandbox):
            self.logger.warning("the removal of %s had not finished after %s s", self.session_id, TEARDOWN_WAIT)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        sandbox = self.sandbox
        merge = getattr(self, "_merge_env", None)
        variables = merge(env) if merge is not None else env
        keywords: dict[str, Any] = {"cwd": cwd or self.task_env_config.workdir, "env": variables or None}
        keywords.update(self._user_keywords(self._resolve_user(user)))
        if timeout_sec:
            keywords["timeout"] = float(timeout_sec)
        cancel = CancelToken()
        keywords["cancel"] = cancel
        callback = self._output_callback() if hasattr(self, "_output_callback") else None
        loop = asyncio.get_running_loop()
        run = self._runner(sandbox, ["bash", "-c", command], keywords, callback, loop)
        try:
            result = await asyncio.shield(asyncio.to_thread(run))
        except asyncio.CancelledError:
            cancel.cancel()  # the command's process tree is killed inside the sandbox
            raise
        if result.timed_out:
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(stdout=result.stdout_text, stderr=result.stderr_text, return_code=result.exit_code)

    @staticmethod
    def _runner(
        sandbox: EnvlayerEnvironment,
        argv: list[str],
        keywords: dict[str, Any],
        callback: Any,
        loop: asyncio.AbstractEventLoop,
    ) -> Callable[[], EnvlayerResult]:
        """The blocking call: streamed to Harbor's async ``callback`` when one is set."""
        if callback is None:
            return lambda: sandbox.exec(argv, **keywords)

        def relay(stream: str, chunk: bytes) -> None:
            text = chunk.decode("utf-8", errors="replace")
            asyncio.run_coroutine_threadsafe(callback(text, stream), loop).result()

        return lambda: dispatch.exec_streaming(sandbox, argv, relay, **keywords)

    def _user_keywords(self, user: str | int | None) -> dict[str, str]:
        """``user=`` for the backend: as asked where it has ``exec_as_user``; root on a
        backend without it runs as the sandbox's user (root on modal and kubernetes by
        default; said in the log); any other user is refused by envlayer's rule."""
        if user is None:
            return {}
        name = str(user)
        if name in ROOT_USERS and not supports(self.sandbox, Capability.EXEC_AS_USER):
            log.debug("%s cannot switch users; running as the sandbox's user for user=%s", type(self.sandbox), name)
            return {}
        return dispatch.user_keywords(self.sandbox, name)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Copy a host file to ``target_path``, or into it under the file's own name when it
        is a directory in the sandbox (as ``docker cp`` does, which Harbor's own docker
        environment uses)."""
        data = await asyncio.to_thread(Path(source_path).read_bytes)
        try:
            await asyncio.to_thread(self.sandbox.write_file, target_path, data)
        except SandboxIsADirectory:
            inside = posixpath.join(target_path, Path(source_path).name)
            await asyncio.to_thread(self.sandbox.write_file, inside, data)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(_upload_dir, self.sandbox, Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await asyncio.to_thread(self.sandbox.read_file, source_path)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(target.write_bytes, data)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(_download_dir, self.sandbox, source_dir, Path(target_dir))


def _harbor_keyword(name: str) -> bool:
    """Whether ``name`` is one of ``BaseEnvironment.__init__``'s own parameters."""
    return name in inspect.signature(BaseEnvironment.__init__).parameters


def _remove(sandbox: EnvlayerEnvironment) -> bool:
    """Remove the sandbox and wait for the removal (at most :data:`TEARDOWN_WAIT` seconds);
    False when it had not finished."""
    dispatch.cleanup(sandbox, force_remove=True)
    return dispatch.wait_for_cleanup(sandbox, TEARDOWN_WAIT)


def _upload_dir(sandbox: EnvlayerEnvironment, source: Path, target: str) -> None:
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is not a directory")
    if supports(sandbox, Capability.DIRECTORY_TRANSFER):
        sandbox.upload_dir(source, target)  # type: ignore[attr-defined]
        return
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        sandbox.write_file(f"{target.rstrip('/')}/{path.relative_to(source).as_posix()}", path.read_bytes())


def _download_dir(sandbox: EnvlayerEnvironment, source: str, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if supports(sandbox, Capability.DIRECTORY_TRANSFER):
        sandbox.download_dir(source, target)  # type: ignore[attr-defined]
        return
    listing = sandbox.exec(["find", source, "-type", "f"], timeout=120)
    if listing.exit_code != 0:
        raise FileNotFoundError(f"listing {source} in the sandbox failed: {listing.stderr_text.strip()}")
    for remote in listing.stdout_text.splitlines():
        local = target / Path(remote).relative_to(source)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(sandbox.read_file(remote))
