"""Every test run keeps the session brokers its ``envlayer exec`` calls start to itself.

``envlayer exec`` runs through a per-user broker by default (docs/cli.md, "The session
broker"). The CLI tests strip the caller's ``ENVLAYER_*`` variables, so the run points
``XDG_RUNTIME_DIR`` at a private directory instead: brokers started by tests never meet a
user's broker or another run's. After each test the brokers it started are stopped
(SIGTERM: their environments are closed by the manager's rules), and killed with
everything they started if they do not exit; the directory is removed at the end.
``tests/broker`` sets its own runtime directory per test.

It also makes SIGINT deliverable to the processes tests start, even in a run started in
the background with SIGINT ignored (see ``pytest_configure``), and ends every run that ran
tests with a table of the slowest test files and, under pytest-xdist, each worker's busy
time and when it finished (see ``pytest_terminal_summary``), so the next slowdown is seen
where it starts. Under pytest-xdist the long work units (conformance classes, then the
backends' tests) are handed out first (see ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from envlayer.cli.broker.control import running_brokers
from envlayer.testing.hostile import make_sigint_deliverable

pytest_plugins = ["tests.session_leaks"]

STOP_WAIT = 20.0
SLOWEST_FILES = 12

_file_seconds: Counter[str] = Counter()  # test file -> its tests' setup + call + teardown seconds
_file_cpu: Counter[str] = Counter()  # test file -> CPU seconds (user + system, this process + waited children)
_file_tests: Counter[str] = Counter()  # test file -> tests run (setup reports)
_CPU_MARK = pytest.StashKey[float]()
_worker_seconds: Counter[str] = Counter()  # pytest-xdist worker -> seconds of test phases it ran
_worker_done: dict[str, float] = {}  # worker -> when its last report came, seconds since the run began
_RUN_START = time.monotonic()


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    """Tests that send SIGINT to a child (Ctrl-C mid-command) need it delivered even when
    this run was started in the background with SIGINT ignored (``make_sigint_deliverable``)."""
    make_sigint_deliverable()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, hand out the long work units first (stable otherwise).

    xdist hands out work units (a class, or a module's functions: ``--dist loadscope
    --no-loadscope-reorder``) in collection order, and a long unit handed out last runs
    alone at the end of the run. The long ones are the conformance kit's classes (a
    backend's whole contract in one class: a minute or more each, the core's protocol
    class included), then the rest of the backends' tests (lifecycles on fakes or in
    containers), each group's bigger units first; the core's are mostly short. Serial runs
    keep the collection order."""
    if not hasattr(config, "workerinput"):
        return
    sizes = Counter(_unit_of(item) for item in items)
    items.sort(key=lambda item: (tier := _unit_tier(item), -sizes[_unit_of(item)] if tier < 2 else 0))


def _unit_of(item: pytest.Item) -> str:
    """The xdist ``loadscope`` unit of ``item``: its class, or its module."""
    return item.nodeid.split("[", 1)[0].rsplit("::", 1)[0] if getattr(item, "cls", None) else item.nodeid.split("::")[0]


def _unit_tier(item: pytest.Item) -> int:
    """0: a conformance kit class; 1: another test under ``plugins/``; 2: the rest."""
    cls = getattr(item, "cls", None)
    if cls is not None and any(base.__module__.startswith("envlayer.testing.") for base in cls.__mro__[1:]):
        return 0
    return 1 if item.nodeid.startswith("plugins/") else 2


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Mark the CPU clock where a test's setup starts (see :func:`pytest_runtest_makereport`)."""
    item.stash[_CPU_MARK] = _cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Give each phase's report the CPU seconds spent since the previous phase ended, as
    ``cpu_seconds`` (an extra report attribute: pytest-xdist sends it to the controller).
    Children count once waited for: a CLI call's, yes; a daemon's (dockerd, a broker), no."""
    report = yield
    now = _cpu_seconds()
    report.cpu_seconds = now - item.stash.get(_CPU_MARK, now)  # type: ignore[attr-defined]
    item.stash[_CPU_MARK] = now
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration and CPU seconds to its test file (under pytest-xdist this
    runs in the controller too, for the reports the workers send)."""
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] += report.duration
    _file_cpu[path] += getattr(report, "cpu_seconds", 0.0)
    if report.when == "setup":
        _file_tests[path] += 1
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if worker is not None:  # the controller of a pytest-xdist run
        _worker_seconds[worker] += report.duration
        _worker_done[worker] = time.monotonic() - _RUN_START


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The :data:`SLOWEST_FILES` test files that took longest, summed over their tests'
    phases (under pytest-xdist the sum is the time the workers spent on the file), each with
    the CPU seconds its tests used (the run's process and the children it waited for; not
    dockerd's, a broker's or a fake server's until it is waited for)."""
    total = sum(_file_seconds.values())
    if not total or hasattr(terminalreporter.config, "workerinput"):
        return
    total_cpu = sum(_file_cpu.values())
    terminalreporter.write_sep(
        "=",
        f"slowest {SLOWEST_FILES} test files (of {total:.0f} s wall and {total_cpu:.0f} s CPU summed over all tests)",
    )
    terminalreporter.write_line("  wall s  share    CPU s  tests  file")
    for path, seconds in _file_seconds.most_common(SLOWEST_FILES):
        terminalreporter.write_line(
            f"{seconds:8.1f} {100 * seconds / total:5.1f} % {_file_cpu[path]:8.1f} {_file_tests[path]:6d}  {path}"
        )
    if _worker_done:  # a worker that ends long before the others shows work units badly spread
        terminalreporter.write_line(
            "workers (busy s / last test ended at s): "
            + ", ".join(f"{w} {_worker_seconds[w]:.0f}/{_worker_done[w]:.0f}" for w in sorted(_worker_done))
        )


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_brokers(directory: str) -> None:
    """Stop the brokers running in ``directory``'s runtime directory: SIGTERM, then
    SIGKILL to the process group of one still running after :data:`STOP_WAIT` seconds
    (pids come from their locked pid files only: a stale pid may be anyone's now)."""
    runtime = os.path.join(directory, "envlayer")
    pids = running_brokers(runtime)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    while set(pids) & set(running_brokers(runtime)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in set(pids) & set(running_brokers(runtime)):
        _signal(-pid, signal.SIGKILL)  # its process group: it runs in its own session


@pytest.fixture(scope="session")
def _broker_runtime_dir() -> Iterator[str]:
    """Also points ``XDG_STATE_HOME`` inside it: what envlayer records there (local tasks'
    options, local snapshots) stays out of the user's home and goes with the run."""
    directory = tempfile.mkdtemp(prefix="envlayer-test-run-", dir="/tmp")
    old = {name: os.environ.get(name) for name in ("XDG_RUNTIME_DIR", "XDG_STATE_HOME")}
    os.environ["XDG_RUNTIME_DIR"] = directory
    os.environ["XDG_STATE_HOME"] = os.path.join(directory, "state")
    try:
        yield directory
    finally:
        _stop_brokers(directory)
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def _stop_test_brokers(_broker_runtime_dir: str) -> Iterator[None]:
    yield
    _stop_brokers(_broker_runtime_dir)
