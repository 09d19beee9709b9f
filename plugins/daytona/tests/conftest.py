"""Fixtures for the Daytona backend tests: the real SDK against the local fake Daytona API.

* ``fake_daytona`` (session scope) starts ``fake_daytona.py`` as a separate process on a free
  127.0.0.1 port, with Docker containers as sandboxes, and stops it by PID at the end (it
  removes every container it made; containers carrying its instance label are removed here
  too, as a backstop). The API key is put where the SDK reads it (``DAYTONA_API_KEY``), for
  the tests of this directory that use the fake and only while they run: under
  pytest-xdist a worker runs other directories' tests in the same process after these
  (``envlayer ls`` there must not find a Daytona key).
* No Docker daemon or test image: with ``CI=true`` the tests fail, saying what is missing;
  otherwise they are skipped with a hint.
* Every sandbox carries a profile starting with ``envlayer-dt-<uuid8>`` (unique per test
  session); ``make_env`` force-removes every environment it made.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from envlayer.testing.fixtures import EnvironmentFactory, options_factory, require_docker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from daytona_testkit import FAKE_KEY, IMAGE, FakeDaytona, start_fake, stop_fake

PROFILE = f"envlayer-dt-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Fails (CI) or skips when Docker or the test image is not usable."""
    require_docker(IMAGE, "the Daytona tests")


@pytest.fixture(scope="session")
def fake_daytona(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeDaytona]:
    """The session's fake Daytona API (real minutes: auto-stop never fires during tests)."""
    fake = start_fake(tmp_path_factory.mktemp("fake-daytona"))
    try:
        yield fake
    finally:
        from envlayer_daytona.backend import DaytonaEnvironment

        DaytonaEnvironment.wait_for_all_cleanups(30)
        stop_fake(fake)


@pytest.fixture(autouse=True)
def _fake_api_key(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``DAYTONA_API_KEY`` is the fake's key while a test that uses the fake runs."""
    if "fake_daytona" in request.fixturenames:
        monkeypatch.setenv("DAYTONA_API_KEY", FAKE_KEY)


@pytest.fixture(scope="session")
def profile(fake_daytona: FakeDaytona) -> str:
    """The unique profile of this test session."""
    return PROFILE


@pytest.fixture
def options(fake_daytona: FakeDaytona) -> Callable[..., Any]:
    """Build DaytonaOptions for the session's fake and the test image."""
    from envlayer_daytona.options import DaytonaOptions

    return options_factory(DaytonaOptions, api_url=fake_daytona.url, snapshot=IMAGE, timeout=60, cwd="/workspace")


@pytest.fixture
def make_env(fake_daytona: FakeDaytona, profile: str, options: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``make_env(task=None, prof=None, **options)``; every environment it made is deleted at
    the end of the test."""
    from envlayer_daytona.backend import DaytonaEnvironment

    factory = EnvironmentFactory(DaytonaEnvironment, options, profile)
    yield factory
    factory.remove_all()
