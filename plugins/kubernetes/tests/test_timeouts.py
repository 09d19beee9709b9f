"""A one-shot command that times out stops where it was: the wrapper shell running its
script is killed with it, so nothing after the timed-out part runs, not even in a
subshell. Covered on the paths the conformance kit does not reach: the overflow exec of a
call that finds the session busy, and the v4 wrapper that bounds stdin with ``head -c``
(its script runs in a forked subshell of a pipeline), with a per-call ``cwd`` and ``env``.

Each script records the pid of the shell running it and of a background subshell (the
parent of a ``sh -c 'echo $PPID'`` each starts: ``$$`` names the wrapper even in a forked
subshell); the check asks whether those still run before it looks for what they would
have written, so a survivor is caught either way, with no waiting.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

SURVIVORS = (
    "for p in $(cat {pids}); do s=$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' /proc/$p/status 2>/dev/null); "
    '[ -n "$s" ] && [ "$s" != Z ] && echo alive $p; done; cat {late}* 2>/dev/null'
)
"""Prints ``alive PID`` for each live pid listed in ``{pids}``, then what reached ``{late}*``."""


TIMEOUT = 3
"""Seconds: ample for the script to record its two pids (the exec's start counts too)."""


def _script(scratch: str) -> str:
    """Records its shell and a background subshell, says ``ready``, then times out in
    ``sleep 300``; what follows (in the shell and in the subshell) must never run."""
    record = f"sh -c 'echo $PPID' >> {scratch}.pids"  # the pid of the shell running this part
    return (
        f"{record}; ({record}; sleep 302; echo sub > {scratch}.late-sub) & "
        f'until [ "$(wc -l < {scratch}.pids)" -ge 2 ]; do sleep 0.05; done; echo ready; '
        f'[ "$ENVLAYER_T_VAR" = per-call ] && [ "$(pwd)" = /tmp ] && sleep 300; echo late > {scratch}.late'
    )


@pytest.fixture
def scratch() -> str:
    """A scratch path prefix in the pod's /tmp (each test deletes its pod at the end)."""
    return f"/tmp/envlayer-k8s-timeout-{uuid.uuid4().hex[:10]}"


def _assert_stopped(env: Any, scratch: str, result: Any) -> None:
    assert result.timed_out and result.exit_code == 124, result
    assert result.stdout == b"ready\n", f"the script did not get to its sleep within {TIMEOUT} s: {result!r}"
    check = env.exec(SURVIVORS.format(pids=f"{scratch}.pids", late=f"{scratch}.late"), timeout=60)
    assert check.stdout_text == "", f"the script went on after its timeout: {check.stdout_text!r}"


@pytest.mark.parametrize("protocol", ["v5", "v4"])
def test_oneshot_timeout_stops_the_script_and_its_subshells(
    protocol: str, request: pytest.FixtureRequest, options: Callable[..., Any], profile: str, scratch: str
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    fake = request.getfixturevalue("fake_apiserver" if protocol == "v5" else "fake_apiserver_v4")
    env = KubernetesEnvironment(
        options(exec_mode="oneshot", kubeconfig=fake.kubeconfig),
        task_id=f"timeout-{protocol}-{uuid.uuid4().hex[:6]}",
        profile=profile,
    )
    try:
        env.exec("true").check()  # learn the protocol: v4 then bounds stdin with head -c
        assert env._cluster.protocol == f"{protocol}.channel.k8s.io"
        result = env.exec(_script(scratch), cwd="/tmp", env={"ENVLAYER_T_VAR": "per-call"}, stdin=b"x", timeout=TIMEOUT)
        _assert_stopped(env, scratch, result)
    finally:
        env.cleanup(force_remove=True)
        env.wait_for_cleanup(30)


def test_busy_session_overflow_timeout_stops_the_script(make_env: Callable[..., Any], scratch: str) -> None:
    """A call that finds the session busy runs one-shot; its timeout kills its script. The
    session's own command waits for a file this test writes last, so the call cannot have
    waited for the session (it would never have returned)."""
    env = make_env(exec_mode="session")
    env.exec("cd /tmp").check()
    started = threading.Event()
    release = f"{scratch}.release"
    holder: dict[str, Any] = {}

    def hold_the_session() -> None:
        holder["result"] = env.exec(
            f"echo holding; while [ ! -e {release} ]; do sleep 0.1; done",
            timeout=120,
            on_output=lambda stream, chunk: started.set(),
        )

    thread = threading.Thread(target=hold_the_session, daemon=True)
    thread.start()
    try:
        assert started.wait(60), "the session's command never started"
        result = env.exec(_script(scratch), env={"ENVLAYER_T_VAR": "per-call"}, timeout=TIMEOUT)
        assert thread.is_alive(), "the session was not busy while the call ran"
        _assert_stopped(env, scratch, result)
    finally:
        env.exec(f"touch {release}", timeout=60)
        thread.join(60)
    assert holder["result"].exit_code == 0 and holder["result"].stdout == b"holding\n"
