"""Helpers for a backend's own test suite (the built-in plugins use them; so may yours).

* :func:`docker_problem` / :func:`require_docker`: tests whose sandboxes (or whose fake of a
  cloud service) run in local Docker containers skip when no daemon or test image is
  there, and fail under ``CI=true``, where a skip would hide a broken machine.
* :class:`EnvironmentFactory`: the body of a ``make_env`` fixture: it creates environments
  of one backend and removes every one it made (``cleanup(force_remove=True)``, then
  ``wait_for_cleanup``, through :mod:`envlayer.dispatch`) when the test ends, passed or
  failed (pytest runs the code after ``yield`` either way)::

      @pytest.fixture
      def make_env(options, profile):
          factory = EnvironmentFactory(MyEnvironment, options, profile)
          yield factory
          factory.remove_all()

* :func:`options_factory`: the body of an ``options`` fixture (the backend's options with the
  suite's defaults); :func:`cleaned_up`: the body of an ``env`` fixture that yields one
  environment and cleans it up; :func:`run_in_new_interpreter`: run code in a new
  interpreter of this venv (for tests of what another process sees); :func:`import_by_path`:
  load a helper module of a tests folder (not a package) by its file path;
  :func:`first_line_then_kill`: what a child printed first, before it is SIGKILLed.

Only the docker CLI is used (no SDK import), so any plugin's tests can call these.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar

import pytest

from envlayer import dispatch
from envlayer.environment import Environment
from envlayer.options import BaseOptions

E = TypeVar("E", bound=Environment)
OptionsT = TypeVar("OptionsT", bound=BaseOptions)
T = TypeVar("T")

_DOCKER_ANSWER_SECONDS = 30


def docker_problem(image: str) -> str | None:
    """Why tests that need a Docker daemon and ``image`` cannot run here, or None when they can."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    for args, failure in (
        (("info", "--format", "{{.ServerVersion}}"), "no Docker daemon answers"),
        (("image", "inspect", "--format", "{{.Id}}", image), f"the test image {image} is missing"),
    ):
        try:
            proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=_DOCKER_ANSWER_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the docker CLI does not answer ({exc})"
        if proc.returncode != 0:
            return f"{failure} ({proc.stderr.strip()[:200]})"
    return None


def require_docker(image: str, suite: str) -> None:
    """Skip the calling test (fail it under ``CI=true``) unless :func:`docker_problem` finds
    nothing; ``suite`` names the tests in the message (e.g. ``"the Modal tests"``)."""
    problem = docker_problem(image)
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{suite} cannot run: {problem}. Run scripts/provision first.", pytrace=False)
    pytest.skip(f"{problem}; run scripts/provision (starts dockerd, builds {image}) to enable {suite}")


class EnvironmentFactory(Generic[E]):
    """``factory(task=None, prof=None, from_snapshot=None, **options)``: a new ``backend``
    environment with ``options(**options)``, task ``task`` (default: a fresh unique one)
    and profile ``prof`` (default: ``profile``); :meth:`remove_all` removes every one made."""

    def __init__(self, backend: type[E], options: Callable[..., BaseOptions], profile: str) -> None:
        self.backend = backend
        self.options = options
        self.profile = profile
        self.made: list[E] = []
        """Every environment made, in order."""

    def __call__(self, task: str | None = None, prof: str | None = None, from_snapshot: Any = None, **kw: Any) -> E:
        extra = {} if from_snapshot is None else {"from_snapshot": from_snapshot}
        env = self.backend(
            self.options(**kw), task_id=task or f"t-{uuid.uuid4().hex[:8]}", profile=prof or self.profile, **extra
        )
        self.made.append(env)
        return env

    def remove_all(self, timeout: float = 30.0) -> None:
        """Force-remove every environment made, then wait up to ``timeout`` seconds for each
        teardown (all are started before any is waited for). Through the dispatcher, so a
        backend without ``force_remove`` or ``wait_for_cleanup`` gets its nearest equivalent."""
        for env in self.made:
            dispatch.cleanup(env, force_remove=True)
        for env in self.made:
            dispatch.wait_for_cleanup(env, timeout)


def options_factory(options_class: type[OptionsT], **defaults: Any) -> Callable[..., OptionsT]:
    """``make(**kw)``: ``options_class`` with ``defaults`` overridden by ``kw`` (an
    ``options`` fixture returns it)."""

    def make(**kw: Any) -> OptionsT:
        return options_class(**{**defaults, **kw})

    return make


def cleaned_up(environment: E, *, force_remove: bool = False, wait: float | None = None) -> Iterator[E]:
    """Yield ``environment``, then clean it up, passed or failed: an ``env`` fixture's body
    is ``yield from cleaned_up(MyEnvironment(...))``. ``force_remove``: remove the sandbox
    even in persist mode; ``wait``: then wait up to that many seconds for the teardown
    (both through :mod:`envlayer.dispatch`, so any backend takes them)."""
    try:
        yield environment
    finally:
        dispatch.cleanup(environment, force_remove=force_remove)
        if wait is not None:
            dispatch.wait_for_cleanup(environment, wait)


def run_in_new_interpreter(
    code: str, *, timeout: float = 60, wait: bool = True, env: Mapping[str, str] | None = None
) -> Any:
    """Run ``code`` (dedented) in a new interpreter of this venv with environment ``env``
    (default: this process's); its stdout, asserting exit 0, or the ``Popen`` (text pipes)
    with ``wait=False``."""
    argv = [sys.executable, "-c", textwrap.dedent(code)]
    child_env = None if env is None else dict(env)
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=child_env)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def import_by_path(path: Path, name: str) -> ModuleType:
    """Import the module at ``path`` as ``name`` (registered in ``sys.modules``, so one load
    serves every importer in the process)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module: is the path right?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def returned_within(seconds: float, call: Callable[[], T], unstick: Callable[[], object]) -> T:
    """``call()``'s result, from a thread waited for ``seconds``: a bound that only catches
    a hang, never a timing assertion. On a hang, ``unstick()`` (kill what holds the call)
    runs first, then the test fails naming the bound."""
    box: list[T] = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        unstick()
        worker.join(30)
        pytest.fail(f"the call did not return within {seconds} s")
    return box[0]


def first_line_then_kill(proc: subprocess.Popen[str]) -> str:
    """The first line ``proc`` prints on stdout (stripped; empty when it exits first); then
    ``proc`` is SIGKILLed and reaped, also when reading fails."""
    try:
        return proc.stdout.readline().strip() if proc.stdout is not None else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
