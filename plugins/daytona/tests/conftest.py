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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from daytona_testkit import FAKE_KEY, IMAGE, FakeDaytona, docker_problem, start_fake, stop_fake

PROFILE = f"envlayer-dt-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Fails (CI) or skips when Docker or the test image is not usable."""
    problem = docker_problem()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Daytona tests cannot run: {problem}. Run scripts/provision first.", pytrace=False)
        pytest.skip(f"{problem}; run scripts/provision (starts dockerd, builds {IMAGE}) to enable the Daytona tests")


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

    def make(**kw: Any) -> DaytonaOptions:
        kw.setdefault("api_url", fake_daytona.url)
        kw.setdefault("snapshot", IMAGE)
        kw.setdefault("timeout", 60)
        kw.setdefault("cwd", "/workspace")
        return DaytonaOptions(**kw)

    return make


@pytest.fixture
def make_env(fake_daytona: FakeDaytona, profile: str, options: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``make_env(task=None, prof=None, **options)``; every environment it made is deleted at
    the end of the test."""
    from envlayer_daytona.backend import DaytonaEnvironment

    made: list[DaytonaEnvironment] = []

    def make(task: str | None = None, prof: str | None = None, **kw: Any) -> DaytonaEnvironment:
        env = DaytonaEnvironment(options(**kw), task_id=task or f"t-{uuid.uuid4().hex[:8]}", profile=prof or profile)
        made.append(env)
        return env

    yield make
    for env in made:
        env.cleanup(force_remove=True)
    for env in made:
        env.wait_for_cleanup(30)
