"""Fixtures for the Modal backend tests: the real modal SDK against the fake Modal server.

* One fake server (``fake_modal/server.py``) per test session, started as a separate
  process on a free 127.0.0.1 port and stopped by PID at the end; every container it made
  is removed (by the server on SIGTERM, and by label if it had to be killed).
* Its sandboxes are Docker containers of ``$ENVLAYER_TEST_IMAGE`` (default
  ``envlayer-test:busybox``). No daemon or no image: with ``CI=true`` the tests fail,
  saying what is missing; otherwise they are skipped with a hint.
* The SDK is pointed at the fake through ``MODAL_SERVER_URL`` / ``MODAL_TOKEN_*`` in this
  process's environment (set before the SDK's client singleton is first built) and a
  private empty ``MODAL_CONFIG_PATH``, so a developer's ``~/.modal.toml`` is never read.
* Every environment carries the profile ``envlayer-test-modal-<uuid8>``, unique per session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.testing.fixtures import EnvironmentFactory, options_factory, require_docker, run_in_new_interpreter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_modal"))

import modal_fake_launcher as launcher
from modal_testenv import APP, IMAGE, PROFILE, QUOTA_TAG


@pytest.fixture(scope="session")
def fake_modal() -> Iterator[launcher.FakeModal]:
    """The running fake server (``_fake_modal_env`` points the SDK at it)."""
    require_docker(IMAGE, "the Modal tests")
    fake = launcher.start(extra_env=[("FAKE_MODAL_QUOTA_TAG", QUOTA_TAG)])
    try:
        yield fake
    finally:
        from envlayer.sandbox import teardown_threads

        teardown_threads.wait_all(30)
        fake.stop()


@pytest.fixture(autouse=True)
def _fake_modal_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's environment points the SDK at the fake while a test that uses it runs,
    and only then: under pytest-xdist a worker runs other directories' tests in the same
    process after these (``envlayer ls`` there must not reach a Modal server)."""
    if "fake_modal" in request.fixturenames:
        fake: launcher.FakeModal = request.getfixturevalue("fake_modal")
        for key, value in fake.env().items():
            monkeypatch.setenv(key, value)


@pytest.fixture(scope="session")
def profile(fake_modal: launcher.FakeModal) -> str:
    """The unique profile of this test session."""
    return PROFILE


@pytest.fixture
def options() -> Callable[..., Any]:
    """Build ModalOptions for the fake (test image, the session's App)."""
    from envlayer_modal.options import ModalOptions

    return options_factory(ModalOptions, image=IMAGE, app_name=APP, timeout=60)


@pytest.fixture
def make_env(fake_modal: Any, profile: str, options: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """Factory: ``make_env(task=None, prof=None, **options)``; every environment it made is
    force-removed at the end of the test."""
    from envlayer_modal.backend import ModalEnvironment

    factory = EnvironmentFactory(ModalEnvironment, options, profile)
    yield factory
    factory.remove_all()


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private directory for this test's snapshot records (``XDG_STATE_HOME``)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "envlayer" / "modal-snapshots"


@pytest.fixture
def run_python(fake_modal: launcher.FakeModal) -> Callable[..., Any]:
    """``run_python(code, timeout=90, wait=True, token=...)``: run code in a new venv
    interpreter pointed at the fake (``token`` names it in the RPC log); returns its stdout
    (asserting exit 0), or the Popen with ``wait=False``."""

    def run(code: str, *, timeout: float = 90, wait: bool = True, token: str = "ak-envlayer-child") -> Any:
        return run_in_new_interpreter(code, timeout=timeout, wait=wait, env={**os.environ, **fake_modal.env(token)})

    return run


@pytest.fixture
def faults(fake_modal: launcher.FakeModal) -> Iterator[Callable[..., None]]:
    """``faults(**modes)`` switches failure modes of the fake on (see ``server.Faults``);
    every one is switched off again at the end of the test."""
    try:
        yield fake_modal.set_faults
    finally:
        fake_modal.set_faults()
