"""``envlayer bench`` through the real command line: the shape of ``--quick --json`` on
local (every figure present and positive; no timing is asserted), and nothing left
behind by a run that ends or is stopped by Ctrl-C or SIGTERM (temp files; on Docker, the
containers, volumes and images of the bench's profile), also for the fork benchmark script."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_run import ENVLAYER, run

from envlayer.bench.interrupts import (
    STOP_SIGNALS,
    Terminated,
    exit_code_of,
    signals_ignored,
    signals_raise,
    terminated_with_parent,
)
from envlayer.bench.ledger import Ledger
from envlayer.bench.machine import one_cpu
from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.testing.fixtures import require_docker
from envlayer.testing.hostile import cli_env

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
DEBIAN_IMAGE = os.environ.get("ENVLAYER_TEST_DEBIAN_IMAGE", "envlayer-test:debian")
ROOT = Path(__file__).resolve().parents[2]
WAIT = 120.0
"""Seconds a test waits for something that must come (never a measured duration)."""

LOCAL_MEASURES = {
    ("start", "envlayer"),
    ("session exec", "envlayer"),
    ("session exec", "same job, bare"),
    ("session exec", "bare shell (extra)"),
    ("session exec", "bare shell, stderr apart (extra)"),
    ("session exec", "envlayer's protocol, bare client (extra)"),
    ("one-shot exec", "envlayer"),
    ("one-shot exec", "subprocess.run"),
    ("upload 1 MB", "envlayer"),
    ("download 1 MB", "envlayer"),
    ("upload 8 MB", "envlayer"),
    ("download 8 MB", "envlayer"),
    *((f"{call}_file {size}", "envlayer") for call in ("write", "read") for size in ("1 KiB", "256 KiB", "1 MiB")),
    ("agent loop (10 rounds), per round", "envlayer"),
    ("flood 64 MiB", "envlayer streamed"),
    ("flood 64 MiB", "envlayer captured"),
    ("flood 64 MiB", "pipe"),
}


def wait_until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` until it returns something true; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + WAIT
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {WAIT}s")
        time.sleep(0.05)
    return value


def scratch_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("envlayer-bench.*"))


def test_quick_json_on_local_has_every_figure_and_leaves_nothing(tmp_path: Path) -> None:
    sandbox_tmp = tmp_path / "tmp"
    sandbox_tmp.mkdir()
    out = run("bench", "--quick", "--json", "--backend", "local", cwd=tmp_path, env={"TMPDIR": str(sandbox_tmp)})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == 1 and doc["quick"] is True and doc["backends"] == ["local"]
    assert doc["command"] == ["envlayer", "bench", "--backend", "local", "--quick"]
    machine = doc["machine"]
    assert machine["cores"] >= 1 and machine["memory_bytes"] > 0 and machine["kernel"] and machine["python"]
    assert machine["versions"]["envlayer"]
    allowed = os.sched_getaffinity(0)
    assert machine["pinned_cpu"] == (min(allowed) if len(allowed) > 1 else None)
    figures = {(f["measure"], f["method"]): f for f in doc["figures"]}
    assert set(figures) == LOCAL_MEASURES
    for key, f in figures.items():
        assert f["backend"] == "local" and f["runs"] >= 1, key
        assert 0 < f["p10"] <= f["median"] <= f["p90"], key
        if f["through_envlayer"] and f["baseline"] is not None:
            assert f["ratio"] > 0, key
        if f["bytes"] is not None:
            assert f["mib_per_s"] > 0, key
    assert {k for k, f in figures.items() if f["ratio"] is not None} == {
        ("session exec", "envlayer"),
        ("one-shot exec", "envlayer"),
        ("flood 64 MiB", "envlayer streamed"),
        ("flood 64 MiB", "envlayer captured"),
    }
    assert all(figures[("flood 64 MiB", m)]["peak_rss_mib"] > 0 for m in ("envlayer streamed", "pipe"))
    assert scratch_dirs(sandbox_tmp) == [], "the run's scratch directory was left behind"


def test_an_option_no_selected_backend_has_is_a_clear_error(tmp_path: Path) -> None:
    out = run("bench", "--quick", "--backend", "local", "-o", "image=x", cwd=tmp_path)
    assert out.returncode == 1
    assert "no selected backend has option 'image'" in out.stderr and "hint:" in out.stderr


def test_plots_without_matplotlib_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from envlayer.bench.plots import pyplot
    from envlayer.errors import EnvlayerError

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it imports
    with pytest.raises(EnvlayerError, match="matplotlib") as caught:
        pyplot()
    assert "envlayer[bench]" in (caught.value.hint or "")


def start_bench(
    args: list[str], cwd: Path, extra_env: dict[str, str], *, argv: list[str] | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """``envlayer bench --quick ARGS`` (or ``argv``, with its stdout kept too) in ``cwd``;
    the process and the file its stderr goes to."""
    stderr = cwd / "bench.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            argv or [ENVLAYER, "bench", "--quick", *args],
            cwd=cwd,
            env=cli_env(extra_env),
            stdout=err if argv else subprocess.DEVNULL,
            stderr=err,
        )
    return proc, stderr


def interrupt(proc: subprocess.Popen[bytes], stderr: Path, signum: int = signal.SIGINT) -> str:
    """SIGINT as Ctrl-C sends it (or ``signum``); the run's stderr once it has exited
    (killed if it hangs)."""
    proc.send_signal(signum)
    try:
        proc.wait(WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the bench did not exit after signal {signum}")
    return stderr.read_text()


@pytest.mark.parametrize(
    ("signum", "code", "word"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_mid_run_on_local_removes_the_scratch_directory(
    tmp_path: Path, signum: int, code: int, word: str
) -> None:
    sandbox_tmp = tmp_path / "tmp"
    sandbox_tmp.mkdir()
    proc, stderr = start_bench(["--backend", "local"], tmp_path, {"TMPDIR": str(sandbox_tmp)})
    try:
        wait_until(lambda: scratch_dirs(sandbox_tmp) or proc.poll() is not None, "a scratch directory")
        assert proc.poll() is None, stderr.read_text()
    finally:
        text = interrupt(proc, stderr, signum)
    assert proc.returncode == code, text
    assert f"bench {word}; what it created was removed" in text
    assert scratch_dirs(sandbox_tmp) == []


class _InterruptedAsItReturns(LocalEnvironment):
    """Ctrl-C arriving while a command's result is on its way: the command ran."""

    interrupt_next = True

    def exec(self, command: Any, **arguments: Any) -> Any:
        result = super().exec(command, **arguments)
        if self.interrupt_next:
            self.interrupt_next = False
            raise KeyboardInterrupt
        return result


def test_a_scratch_directory_made_as_ctrl_c_arrives_is_still_removed(tmp_path: Path) -> None:
    """The directory is recorded before it is made, so a signal between its making and
    the answer (seen once in a suite run of the SIGINT test above) leaves nothing."""
    env = _InterruptedAsItReturns(LocalOptions(cwd=str(tmp_path), env={"TMPDIR": str(tmp_path)}))
    ledger = Ledger()
    try:
        with pytest.raises(KeyboardInterrupt):
            ledger.scratch_dir(env)
        assert len(scratch_dirs(tmp_path)) == 1
        assert ledger.release_all() == []
        assert scratch_dirs(tmp_path) == []
    finally:
        env.cleanup()


@pytest.fixture
def docker_api() -> Iterator[Any]:
    """The bench's own docker-py client; the test is skipped (failed on CI) without Docker
    or the test image."""
    from envlayer.bench.baselines import docker_api as connect

    try:
        api = connect()
        api.inspect_image(IMAGE)
    except Exception as exc:
        reason = f"Docker or the image {IMAGE} is not usable ({type(exc).__name__}: {exc})"
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(reason)
    yield api
    api.close()


def test_ctrl_c_mid_run_on_docker_leaves_no_container_or_volume(tmp_path: Path, docker_api: Any) -> None:
    proc, stderr = start_bench(["--backend", "docker", "-o", f"image={IMAGE}"], tmp_path, {})
    profile = ""
    try:
        found = wait_until(lambda: re.search(r"profile (envlayer-bench-\w+)", stderr.read_text()), "the profile note")
        profile = found.group(1)
        label = {"label": f"envlayer.profile={profile}"}
        wait_until(lambda: docker_api.containers(all=True, filters=label) or proc.poll() is not None, "a container")
        assert proc.poll() is None, stderr.read_text()
    finally:
        text = interrupt(proc, stderr)
        leftovers = _remove_profile(docker_api, profile) if profile else ([], [])
    assert proc.returncode == 130, text
    assert leftovers == ([], []), "the bench left containers or volumes of its profile"


def _remove_profile(api: Any, profile: str) -> tuple[list[str], list[str]]:
    """Remove (so the test never leaks) and return what the profile still has: its
    containers and volumes (its snapshot images are removed too, and not returned)."""
    label = {"label": f"envlayer.profile={profile}"}
    containers = [c["Id"] for c in api.containers(all=True, filters=label)]
    volumes = [v["Name"] for v in (api.volumes(filters=label) or {}).get("Volumes") or []]
    for cid in containers:
        api.remove_container(cid, force=True, v=True)
    for name in volumes:
        api.remove_volume(name, force=True)
    for image in _profile_images(api, profile):
        api.remove_image(image, force=True)
    return containers, volumes


def _stop(proc: subprocess.Popen[bytes], output: Path, stop: str) -> str:
    """Send ``stop`` (a signal name, or "parent killed": SIGKILL to the shell above the
    benchmark); the output once the benchmark has exited (killed if it does not)."""
    if stop != "parent killed":
        return interrupt(proc, output, getattr(signal, stop))
    proc.kill()
    proc.wait()
    try:
        wait_until(lambda: "what the run created was removed" in output.read_text(), "the orphan's cleanup")
    finally:
        _kill_if_running(int(re.findall(r"benchmark pid (\d+)", output.read_text())[0]))
    return output.read_text()


def _kill_if_running(pid: int) -> None:
    """SIGKILL the orphaned benchmark when it is still there (the test failed)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _profile_images(api: Any, profile: str) -> list[str]:
    return [i["Id"] for i in api.images(all=True, filters={"label": f"envlayer.profile={profile}"})]


@pytest.fixture
def hangups_delivered() -> Iterator[None]:
    """SIGHUP at its default action in this process (and so in what it starts) for the
    test: a suite run started under ``nohup`` inherits it ignored, and the code under test
    rightly keeps an inherited "ignore" (see the test after next)."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.usefixtures("hangups_delivered")
def test_stop_signals_raise_terminated_and_cleanups_ignore_them() -> None:
    for signum in STOP_SIGNALS:
        with pytest.raises(Terminated), signals_raise():
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises at the next bytecode; never reached
        with signals_ignored():
            os.kill(os.getpid(), signum)  # ignored: the cleanup goes on
    assert exit_code_of(Terminated()) == 143 and exit_code_of(KeyboardInterrupt()) == 130


def test_under_nohup_sighup_stays_ignored_and_the_parent_is_not_watched() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup hands its command
    try:
        with signals_raise(), terminated_with_parent():
            os.kill(os.getpid(), signal.SIGHUP)  # would raise Terminated without nohup
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert not any(t.name == "envlayer-parent-watch" for t in threading.enumerate())
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.usefixtures("hangups_delivered")
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP", "parent killed"])
def test_a_stop_signal_or_a_dead_parent_ends_the_fork_benchmark_and_leaves_nothing_on_docker(
    tmp_path: Path, docker_api: Any, stop: str
) -> None:
    """ "parent killed": the benchmark runs under a shell that gets SIGKILL (as a runner's
    timeout sends it); the orphaned benchmark must stop and clean up by itself."""
    require_docker(DEBIAN_IMAGE, "the fork benchmark's test")
    argv = [sys.executable, str(ROOT / "benchmarks" / "snapshot_fork.py"), "--backends", "docker"]
    argv += ["--image", DEBIAN_IMAGE, "--rounds", "1", "--forks", "2", "--files", "10", "--megabytes", "1"]
    if stop == "parent killed":
        argv = ["sh", "-c", '"$@" & echo "benchmark pid $!"; wait', "sh", *argv]
    proc, output = start_bench([], tmp_path, {}, argv=argv)
    profile = ""
    try:
        found = wait_until(lambda: re.search(r"profile (envlayer-bench-\w+)", output.read_text()), "the profile line")
        profile = found.group(1)
        wait_until(lambda: "source sandbox prepared" in output.read_text() or proc.poll() is not None, "the source")
        assert proc.poll() is None, output.read_text()
    finally:
        try:
            text = _stop(proc, output, stop)
        finally:
            images = _profile_images(docker_api, profile) if profile else []
            leftovers = _remove_profile(docker_api, profile) if profile else ([], [])
    assert "terminated; what the run created was removed" in text, text
    assert stop == "parent killed" or proc.returncode == 143, text
    assert (leftovers, images) == (([], []), []), "the benchmark left containers, volumes or images of its profile"


def test_one_cpu_pins_the_processes_started_in_it_and_restores_the_thread() -> None:
    before = os.sched_getaffinity(0)
    cpu = max(before)

    def allowed_of_a_new_process() -> str:
        status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":")[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))

    with one_cpu(cpu):
        assert os.sched_getaffinity(0) == {cpu}
        assert allowed_of_a_new_process() == str(cpu)
    assert os.sched_getaffinity(0) == before
    with one_cpu(None):
        assert os.sched_getaffinity(0) == before
