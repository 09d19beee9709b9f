"""The broker's control: ``broker stop`` (this installation's broker, or ``--all``),
``broker status`` rows that tell one task's environments apart, and a broker that hands
over to a new one when the installation changes (a backend's distribution appears on
its import path)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from broker_helpers import BrokerRun, wait_until

from envlayer.cli.broker.control import running_brokers

OTHER_DIGEST = "0e1f2a3b"
"""The digest of a broker of "another installation" (a name nobody else uses)."""


def _status(brk: BrokerRun) -> list[dict]:
    out = brk.run("broker", "status", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _other_installation_broker(brk: BrokerRun) -> subprocess.Popen[bytes]:
    """A broker serving the runtime directory under another installation's digest."""
    argv = [sys.executable, "-m", "envlayer.cli.broker", "serve", "--runtime-dir", brk.runtime]
    proc = subprocess.Popen(
        [*argv, "--digest", OTHER_DIGEST],
        env=brk.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(lambda: brk.runtime_path(f"broker-{OTHER_DIGEST}.sock").exists(), "the other broker's socket")
    return proc


def test_stop_stops_this_installations_broker_and_all_every_one(brk: BrokerRun) -> None:
    other = _other_installation_broker(brk)
    try:
        assert brk.run("exec", "--task", "t", "--", "true").returncode == 0
        assert len(brk.broker_pids()) == 2
        mine = [b["pid"] for b in _status(brk) if b["pid"] != other.pid]

        stopped = brk.run("broker", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert f"broker pid {mine[0]} stopped, socket " in stopped.stdout
        assert "it held 1 environment(s)" in stopped.stdout
        assert str(other.pid) not in stopped.stdout
        assert brk.broker_pids() == [other.pid]  # another installation's broker still runs

        nothing = brk.run("broker", "stop")
        assert nothing.returncode == 0 and "no broker running for this installation" in nothing.stdout
        assert "broker stop --all" in nothing.stdout

        every = brk.run("broker", "stop", "--all")
        assert every.returncode == 0, every.stderr
        assert f"broker pid {other.pid} stopped" in every.stdout
        assert other.wait(60) == 0 and brk.broker_pids() == []
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_status_tells_one_tasks_environments_apart(brk: BrokerRun) -> None:
    """The toy backend reads every variable: three values, three environments of task t."""
    for value in ("1", "2", "3"):
        ran = brk.run("exec", "--backend", "toy", "--task", "t", "--", "true", env={"ELB_SELECTS": value})
        assert ran.returncode == 0, ran.stderr
    environments = _status(brk)[0]["environments"]
    assert len(environments) == 3
    assert len({json.dumps(e["selectors"], sort_keys=True) for e in environments}) == 3
    rows = [line for line in brk.run("broker", "status").stdout.splitlines() if " t " in f" {line} "]
    assert len(rows) == 3 and all("ELB_SELECTS" in row for row in rows), rows
    assert len(set(rows)) == 3


def _add_backend_distribution(site: Path, name: str) -> None:
    """A distribution with an ``envlayer.backends`` entry point, as an installer leaves
    it (``*.dist-info`` with METADATA and entry_points.txt) in a directory on the path."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[envlayer.backends]\nrestartprobe = envlayer.local.backend:LocalEnvironment\n"
    )


def test_a_changed_installation_restarts_the_broker(brk: BrokerRun, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    brk.env["PYTHONPATH"] = str(site)  # the broker started by the first call sees it
    assert brk.run("exec", "--task", "t", "--", "export KEPT=1").returncode == 0
    [first] = brk.broker_pids()
    go = tmp_path / "go"
    wait = f"echo started; while [ ! -e {go} ]; do sleep 0.05; done; echo finished"
    running = brk.popen("exec", "--task", "long", "--", wait)
    assert running.stdout is not None and running.stdout.readline() == b"started\n"

    _add_backend_distribution(site, "envlayer-restart-probe")
    noticed = brk.run("exec", "--task", "t", "--", "echo ran")
    assert noticed.returncode == 0, noticed.stderr
    assert noticed.stdout == "ran\n"
    assert f"the broker (pid {first}) restarts" in noticed.stderr
    assert "installed envlayer-restart-probe 0.1" in noticed.stderr and "restartprobe" in noticed.stderr

    assert first in running_brokers(brk.runtime)  # still running its command
    go.touch()
    out, err = running.communicate(timeout=60)  # which finishes on the old broker
    assert (running.returncode, out) == (0, b"finished\n"), err

    after = brk.run("exec", "--task", "t", "--", "echo again")
    assert after.returncode == 0 and after.stdout == "again\n" and "restarts" not in after.stderr
    wait_until(lambda: first not in running_brokers(brk.runtime), "the old broker's exit")
    [second] = brk.broker_pids()
    assert second != first
    assert [b["pid"] for b in _status(brk)] == [second]
