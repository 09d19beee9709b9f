"""What brokers leave in the runtime directory: nothing once they exit cleanly, and what a
killed broker or a killed call left is removed by the next broker to start (files whose
lock someone holds excepted); logs of brokers that are gone are bounded in number."""

from __future__ import annotations

import fcntl
import os
import signal

from broker_helpers import BrokerRun, wait_until

from envlayer.cli.broker.leftovers import MAX_KEPT_LOGS

CONTEXTS = 10
CALLS = 50


def _files(brk: BrokerRun) -> list[str]:
    return sorted(os.listdir(brk.runtime))


def test_no_file_is_left_after_50_calls_from_10_contexts_and_broker_stop(brk: BrokerRun) -> None:
    for round_ in range(CALLS // CONTEXTS):
        calls = [
            brk.popen("exec", "--task", f"t{round_}", "--", f"echo {i}", env={"ELB_CONTEXT": str(i)})
            for i in range(CONTEXTS)
        ]
        outputs = [call.communicate(timeout=120) for call in calls]
        assert [c.returncode for c in calls] == [0] * CONTEXTS, [err for _, err in outputs]
        assert [out for out, _ in outputs] == [f"{i}\n".encode() for i in range(CONTEXTS)]
    assert len(brk.broker_pids()) == CONTEXTS
    assert len([f for f in _files(brk) if f.endswith(".pid")]) == CONTEXTS
    stopped = brk.run("broker", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.count(" stopped, socket ") == CONTEXTS
    assert _files(brk) == []


def test_a_later_broker_removes_what_a_killed_broker_and_call_left(brk: BrokerRun) -> None:
    assert brk.run("exec", "--", "true", env={"ELB_CONTEXT": "a"}).returncode == 0
    [killed] = brk.broker_pids()
    left = _files(brk)
    assert [f.rsplit(".", 1)[1] for f in left] == ["log", "pid", "sock"]
    os.kill(killed, signal.SIGKILL)
    wait_until(lambda: not brk.broker_pids(), "the killed broker's end")
    free_lock = os.path.join(brk.runtime, "broker-00000000deadbeef.lock")
    held_lock = os.path.join(brk.runtime, "broker-00000000feedface.lock")
    open(free_lock, "w").close()  # a call killed while it started a broker
    held = os.open(held_lock, os.O_RDWR | os.O_CREAT, 0o600)  # a call starting a broker now
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert brk.run("exec", "--", "true", env={"ELB_CONTEXT": "b"}).returncode == 0
        [running] = brk.broker_pids()
        assert running != killed
        now = _files(brk)
        killed_log = next(f for f in left if f.endswith(".log"))
        assert killed_log in now  # the killed broker's log: evidence of a failure, kept
        assert not (set(left) - {killed_log}) & set(now)  # its socket and pid file: gone
        assert os.path.basename(free_lock) not in now
        assert os.path.basename(held_lock) in now
    finally:
        os.close(held)
    brk.run("broker", "stop")
    assert _files(brk) == sorted([killed_log, os.path.basename(held_lock)])


def test_logs_of_brokers_that_are_gone_are_bounded(brk: BrokerRun) -> None:
    old = [os.path.join(brk.runtime, f"broker-{i:016x}.log") for i in range(MAX_KEPT_LOGS + 5)]
    for age, path in enumerate(old):
        with open(path, "w") as fh:
            fh.write("a failure\n")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))  # old[0] is the newest
    assert brk.run("exec", "--", "true").returncode == 0
    logs = {f for f in _files(brk) if f.endswith(".log")}
    kept = {os.path.basename(p) for p in old[:MAX_KEPT_LOGS]}
    assert kept <= logs
    assert not {os.path.basename(p) for p in old[MAX_KEPT_LOGS:]} & logs
    assert len(logs - kept) == 1  # the running broker's own
    brk.run("broker", "stop")
    assert set(_files(brk)) == kept
