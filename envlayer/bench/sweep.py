"""The orphan sweep: ``reap_orphans`` over N stale sandboxes, against a per-sandbox CLI
sweep of an identical set, on backends where the bench can make stale sandboxes.

Docker: N exited containers carrying envlayer's labels in a profile of their own; the
baseline lists them with ``docker ps`` and runs ``docker inspect`` and ``docker rm`` for
each (what a script without envlayer does). The labels come from the backend class
(``managed_labels``): the core never imports a plugin. docker-py is imported lazily."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.bench.figures import ENVLAYER, Figure
from envlayer.bench.ledger import Ledger
from envlayer.bench.target import BackendTarget
from envlayer.bench.timing import Spread
from envlayer.factory import backend_class

CLI_SWEEP = "CLI ps, inspect + rm each"


def _docker_stale(api: Any, image: str, profile: str, count: int, backend: Any) -> list[str]:
    """``count`` exited containers with envlayer's labels in ``profile`` (the ``backend``
    class says which: ``managed_labels``)."""
    marks = backend.managed_labels(profile=profile, task="sweep")
    ids = [api.create_container(image, command=["true"], labels=marks)["Id"] for _ in range(count)]
    for cid in ids:
        api.start(cid)
    for cid in ids:
        api.wait(cid)
    return ids


def _docker_cli_sweep(profile: str) -> None:
    """List the profile's exited containers with ``docker ps``, then inspect and remove
    each with its own ``docker`` call."""
    filters = ["--filter", f"label=envlayer.profile={profile}", "--filter", "status=exited"]
    listed = subprocess.run(
        ["docker", "ps", "-a", "-q", "--no-trunc", *filters], check=True, capture_output=True, text=True
    ).stdout.split()
    for cid in listed:
        subprocess.run(["docker", "inspect", "--format", "{{.State.FinishedAt}}", cid], check=True, capture_output=True)
        subprocess.run(["docker", "rm", cid], check=True, capture_output=True)


def _docker_remove_profile(profile: str) -> Callable[[], None]:
    def remove() -> None:
        from envlayer.bench.baselines import docker_api

        api = docker_api()
        try:
            for summary in api.containers(all=True, filters={"label": f"envlayer.profile={profile}"}):
                api.remove_container(summary["Id"], force=True, v=True)
        finally:
            api.close()

    return remove


def _docker_round(api: Any, image: str, profiles: tuple[str, str], count: int, spec: Any) -> dict[str, float]:
    """One round: make a stale set, reap it; make another, sweep it with the CLI."""
    _docker_stale(api, image, profiles[0], count, spec[0])
    began = time.perf_counter()
    outcome = lifecycle.reap_orphans([spec], profile=profiles[0], max_age=0.0)[0]
    seconds = {ENVLAYER: time.perf_counter() - began}
    if outcome.error or len(outcome.sandboxes) != count:
        removed = len(outcome.sandboxes)
        raise RuntimeError(f"reap_orphans removed {removed} of {count} stale containers: {outcome.error}")
    if shutil.which("docker"):
        _docker_stale(api, image, profiles[1], count, spec[0])
        began = time.perf_counter()
        _docker_cli_sweep(profiles[1])
        seconds[CLI_SWEEP] = time.perf_counter() - began
    return seconds


def measure_docker_sweep(target: BackendTarget, ledger: Ledger, count: int, rounds: int) -> list[Figure]:
    """``reap_orphans`` over ``count`` exited containers, and the CLI sweep over as many
    (a new set for each of ``rounds`` rounds)."""
    from envlayer.bench.baselines import docker_api

    cls = backend_class(target.name)
    options = target.settings().options_for(target.name, cls.Options)
    profiles = (f"{target.profile}-sweep-a", f"{target.profile}-sweep-b")
    for profile in profiles:
        ledger.on_release(_docker_remove_profile(profile))
    api = docker_api()
    try:
        image = options.image  # type: ignore[attr-defined]
        runs = [_docker_round(api, image, profiles, count, (cls, options)) for _ in range(rounds)]
    finally:
        api.close()
    baseline = CLI_SWEEP if CLI_SWEEP in runs[0] else None
    return [
        Figure(
            target.name,
            f"sweep {count} stale",
            method,
            "ms",
            Spread.of([r[method] for r in runs]).scaled(1000),
            baseline=baseline if method == ENVLAYER else None,
        )
        for method in runs[0]
    ]


SWEEPS: dict[str, Callable[[BackendTarget, Ledger, int, int], list[Figure]]] = {"docker": measure_docker_sweep}
"""The sweep per backend name; backends not listed (no reaper, or no way to make stale
sandboxes here) have none."""
