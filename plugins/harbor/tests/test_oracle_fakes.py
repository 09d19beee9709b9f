"""Harbor's oracle agent through ``envlayer_harbor:Environment`` on the Modal and Daytona
backends: the real SDKs against the project's fakes (``plugins/modal/tests/fake_modal``,
``plugins/daytona/tests/fake_daytona.py``), which run sandboxes as local containers and
build Dockerfiles with the local dockerd.

Daytona runs ``hello-world`` and ``times-out`` only: ``several-files`` copies files into its
image (the Daytona SDK uploads them to object storage over HTTPS, which the fake does not
serve) and asks for no network (Daytona has no such option: the environment refuses it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harbor_runs import BASE_IMAGE, finished, reward, started

from envlayer.testing.fixtures import require_docker

PLUGINS = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """One oracle run on each fake, side by side: {"modal": run, "daytona": run}."""
    require_docker(BASE_IMAGE, "the Harbor tests on the Modal and Daytona fakes")
    sys.path[:0] = [str(PLUGINS / "modal" / "tests" / "fake_modal"), str(PLUGINS / "daytona" / "tests")]
    import daytona_testkit
    import modal_fake_launcher

    modal = modal_fake_launcher.start()
    try:
        daytona = daytona_testkit.start_fake(tmp_path_factory.mktemp("fake-daytona"))
        try:
            pending = {
                "modal": started(tmp_path_factory.mktemp("modal"), ["--ek", "backend=modal"], {
                    **os.environ, **modal.env()}),
                "daytona": started(
                    tmp_path_factory.mktemp("daytona"),
                    ["--ek", "backend=daytona", "--ek", f"api_url={daytona.url}", "-x", "several-files"],
                    {**os.environ, "DAYTONA_API_KEY": daytona_testkit.FAKE_KEY},
                ),
            }  # fmt: skip
            yield {name: finished(run) for name, run in pending.items()}
        finally:
            daytona_testkit.stop_fake(daytona)
    finally:
        modal.stop()


def test_modal_rewards(runs: dict[str, dict[str, Any]]) -> None:
    modal_run = runs["modal"]
    assert reward(modal_run, "hello-world") == 1.0
    assert reward(modal_run, "several-files") == 1.0
    assert reward(modal_run, "times-out") == 0.0
    assert modal_run["trials"]["times-out"]["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert (modal_run["trials"]["times-out"]["dir"] / "verifier" / "leftover.txt").read_text() == ""


def test_daytona_rewards(runs: dict[str, dict[str, Any]]) -> None:
    daytona_run = runs["daytona"]
    assert reward(daytona_run, "hello-world") == 1.0
    assert reward(daytona_run, "times-out") == 0.0
    assert (daytona_run["trials"]["times-out"]["dir"] / "verifier" / "leftover.txt").read_text() == ""
    assert set(daytona_run["trials"]) == {"hello-world", "times-out"}
