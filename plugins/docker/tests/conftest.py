"""Fixtures for the Docker backend tests, against a real daemon.

* Every container made by these tests carries a profile starting with
  ``envlayer-test-<uuid8>`` (unique per test session); a session finalizer force-removes
  every managed container whose profile starts with it, even when tests fail.
* A run that is killed (SIGKILL) never reaches that finalizer. So each session holds an
  exclusive ``flock`` on ``$TMPDIR/envlayer-test-runs/<profile>.lock`` while it runs, and
  at its start removes the containers and volumes of every profile whose lock file is
  there but no longer locked: the kernel drops a lock when its process dies, so only dead
  runs' leftovers are swept, never those of a run still going.
* No daemon or no test image: with ``CI=true`` the tests fail, saying what is missing;
  otherwise they are skipped with a hint (`scripts/provision` starts dockerd and builds
  the image). The image is ``$ENVLAYER_TEST_IMAGE`` (default ``envlayer-test:busybox``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from envlayer import dispatch as lifecycle
from envlayer.testing.fixtures import EnvironmentFactory, options_factory, require_docker, run_in_new_interpreter
from envlayer.testing.secrets import ENVLAYER_SCRIPT

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
PROFILE = f"envlayer-test-{uuid.uuid4().hex[:8]}"


RUNS_DIR = os.path.join(tempfile.gettempdir(), "envlayer-test-runs")
"""Where each Docker test session keeps its lock file (see the module docstring)."""


def _claim(profile: str) -> int:
    """Lock ``<RUNS_DIR>/<profile>.lock`` for as long as this process lives; returns the fd."""
    os.makedirs(RUNS_DIR, exist_ok=True)
    fd = os.open(os.path.join(RUNS_DIR, f"{profile}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _remove_profile(api: Any, prefix: str) -> list[str]:
    """Force-remove the managed containers, volumes and snapshot images whose profile
    starts with ``prefix`` (images after the containers that may use them)."""
    removed = []
    for summary in api.containers(all=True, filters={"label": "envlayer.managed=1"}):
        if (summary.get("Labels") or {}).get("envlayer.profile", "").startswith(prefix):
            try:
                api.remove_container(summary["Id"], force=True, v=True)
                removed.append(summary["Id"][:12])
            except Exception:
                pass
    volumes = (api.volumes(filters={"label": "envlayer.managed=1"}) or {}).get("Volumes") or []
    for volume in volumes:
        if (volume.get("Labels") or {}).get("envlayer.profile", "").startswith(prefix):
            try:
                api.remove_volume(volume["Name"], force=True)
                removed.append(volume["Name"])
            except Exception:
                pass
    for image in api.images(all=True, filters={"label": "envlayer.snapshot=1"}) or []:
        if (image.get("Labels") or {}).get("envlayer.profile", "").startswith(prefix):
            try:
                api.remove_image(image["Id"], force=True)
                removed.append(image["Id"][:19])
            except Exception:
                pass
    return removed


def sweep_dead_runs(api: Any, runs_dir: str = RUNS_DIR) -> dict[str, list[str]]:
    """Remove what dead test runs left: for each lock file in ``runs_dir`` that nobody
    holds, the containers and volumes of its profile, then the file. Returns
    ``{profile: removed ids and volume names}``."""
    swept: dict[str, list[str]] = {}
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        if not name.endswith(".lock"):
            continue
        path = os.path.join(runs_dir, name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live run holds it
        try:
            profile = name[: -len(".lock")]
            swept[profile] = _remove_profile(api, profile)
            os.unlink(path)
        finally:
            os.close(fd)
    return swept


@pytest.fixture(scope="session", autouse=True)
def _private_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Host-directory workspaces of these tests go to a temporary XDG_DATA_HOME."""
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = old


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    """A low-level docker API client; fails (CI) or skips when Docker is not usable."""
    require_docker(IMAGE, "the Docker tests")
    import docker

    api = docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())
    claim = _claim(PROFILE)
    sweep_dead_runs(api)
    try:
        yield api
    finally:
        from envlayer.sandbox import teardown_threads

        teardown_threads.wait_all(30)
        _remove_profile(api, PROFILE)
        os.unlink(os.path.join(RUNS_DIR, f"{PROFILE}.lock"))
        os.close(claim)


BUILD_TRIES = 2
"""Builds of a test image before its fixture fails: the daemon's answer to a build is a
stream whose errors are only entries in it, and one suite run found an image missing after
a build whose stream was not read for them (why it failed is unknown)."""


@pytest.fixture(scope="module")
def build_image(docker_api: Any) -> Iterator[Callable[..., str]]:
    """``build_image(tag, context, **build_kwargs)``: build ``tag`` from ``context`` (a
    Dockerfile's bytes, or a tar's bytes with ``custom_context=True``) and return it; a
    failed build is tried again, then fails with the daemon's messages. Every image it
    built is removed when the test module ends."""
    built: list[str] = []

    def build(tag: str, context: bytes, **kwargs: Any) -> str:
        import io

        from docker.errors import ImageNotFound

        errors: list[str] = []
        for _ in range(BUILD_TRIES):
            stream = docker_api.build(
                fileobj=io.BytesIO(context), tag=tag, rm=True, forcerm=True, decode=True, **kwargs
            )
            errors += [str(entry.get("error")) for entry in stream if entry.get("error")]
            try:
                docker_api.inspect_image(tag)
            except ImageNotFound:
                errors.append(f"{tag} missing after the build")
                continue
            built.append(tag)
            return tag
        raise AssertionError(f"building the test image {tag} failed {BUILD_TRIES} times: {errors}")

    yield build
    for tag in built:
        with contextlib.suppress(Exception):
            docker_api.remove_image(tag, force=True)


@pytest.fixture(scope="session")
def profile(docker_api: Any) -> str:
    """The unique profile of this test session."""
    return PROFILE


@pytest.fixture
def options() -> Callable[..., Any]:
    """Build DockerOptions for the test image."""
    from envlayer_docker.options import DockerOptions

    return options_factory(DockerOptions, image=IMAGE, timeout=60)


@pytest.fixture
def make_env(docker_api: Any, profile: str, options: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """Factory: ``make_env(task=None, profile=None, **options)``; every environment it
    made is force-removed, with its durable data, at the end of the test."""
    from envlayer_docker import workspace
    from envlayer_docker.backend import DockerEnvironment

    factory = EnvironmentFactory(DockerEnvironment, options, profile)
    yield factory
    factory.remove_all()
    for env in factory.made:
        workspace.remove(docker_api, env.options, profile=env.profile, task=env.task_id)


def _child_env_code(task: str, profile: str, **opts: Any) -> str:
    """Python source that builds ``env`` for (profile, task) in a child process."""
    opts.setdefault("image", IMAGE)
    opts.setdefault("timeout", 60)
    return (
        "from envlayer_docker.backend import DockerEnvironment\n"
        "from envlayer_docker.options import DockerOptions\n"
        f"env = DockerEnvironment(DockerOptions(**{opts!r}), task_id={task!r}, profile={profile!r})\n"
    )


@pytest.fixture
def run_python() -> Callable[..., Any]:
    """``run_python(code, timeout=60, wait=True)``: run code in a new venv interpreter;
    returns its stdout (asserting exit 0), or the Popen with ``wait=False``."""
    return run_in_new_interpreter


@pytest.fixture
def child_env_code() -> Callable[..., str]:
    """``child_env_code(task, profile, **options)``: Python source building ``env``."""
    return _child_env_code


CLI = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def cli(docker_api: Any) -> CLI:
    """``cli(COMMAND, *args, profile=P, env={})``: ``envlayer COMMAND --backend docker *args``
    with the test image, profile ``P``, none of the caller's ``ENVLAYER_*`` variables, and
    ``env`` added."""

    def run(command: str, *args: str, profile: str, env: dict[str, str] | None = None) -> Any:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
        environ.update(ENVLAYER_PROFILE=profile, ENVLAYER_DOCKER_IMAGE=IMAGE, **(env or {}))
        argv = [ENVLAYER_SCRIPT, command, "--backend", "docker", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=environ)

    return run


@pytest.fixture
def sweep() -> Callable[..., dict[str, list[str]]]:
    """:func:`sweep_dead_runs` (``sweep(api, runs_dir)``), for the test of the sweep itself."""
    return sweep_dead_runs


@pytest.fixture
def forks() -> Iterator[list[Any]]:
    """The forks a test made (append them); removed with their data at its end, before the
    fixtures it asked for earlier (a parent)."""
    made: list[Any] = []
    yield made
    for fork in made:
        lifecycle.cleanup(fork, purge=True)
    for fork in made:
        lifecycle.wait_for_cleanup(fork, 60)
