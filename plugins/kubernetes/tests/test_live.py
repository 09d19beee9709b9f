"""Opt-in live tests against a real cluster (kind, k3d, a dev namespace): they check the
fake API server's assumptions (scheduling and pull delays, exec protocol, status texts).

Run with::

    ENVLAYER_K8S_LIVE=1 KUBECONFIG=~/.kube/config [ENVLAYER_K8S_LIVE_IMAGE=busybox:1.36] \\
        uv run --no-sync pytest plugins/kubernetes/tests/test_live.py

Skipped (with the reason) unless both are set, and always under ``CI=true``: CI here has
no cluster, and tests must never touch a cluster nobody asked for. Every pod is in a
profile unique to the run and is deleted at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envlayer.testing import EnvironmentConformance

LIVE_IMAGE = os.environ.get("ENVLAYER_K8S_LIVE_IMAGE", "busybox:1.36")
LIVE_PROFILE = f"k8s-live-{uuid.uuid4().hex[:8]}"


def _skip_reason() -> str | None:
    if os.environ.get("CI") == "true":
        return "live Kubernetes tests never run in CI (no cluster here)"
    if os.environ.get("ENVLAYER_K8S_LIVE") != "1":
        return "set ENVLAYER_K8S_LIVE=1 and KUBECONFIG=<a test cluster's kubeconfig> to run the live tests"
    path = os.environ.get("KUBECONFIG", "")
    if not path or not os.path.exists(path.split(os.pathsep)[0]):
        return "KUBECONFIG does not point at a kubeconfig file"
    return None


pytestmark = [pytest.mark.live, pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")]


def _options(**kw: Any) -> Any:
    from envlayer_kubernetes.options import KubernetesOptions

    kw.setdefault("image", LIVE_IMAGE)
    kw.setdefault("timeout", 120)
    kw.setdefault("active_deadline", 1800)
    return KubernetesOptions(**kw)


@pytest.fixture(scope="module", autouse=True)
def _remove_live_pods() -> Iterator[None]:
    yield
    from envlayer_kubernetes import sweep
    from envlayer_kubernetes.client import connect

    opts = _options()
    cluster = connect(opts)
    sweep.delete_all(cluster, opts, sweep.list_managed(cluster, opts, profile=LIVE_PROFILE), dry_run=False)


class TestLiveConformance(EnvironmentConformance):
    task = f"live-conformance-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def env(self) -> Iterator[Any]:
        from envlayer_kubernetes.backend import KubernetesEnvironment

        environment = KubernetesEnvironment(_options(exec_mode="oneshot"), task_id=self.task, profile=LIVE_PROFILE)
        try:
            yield environment
        finally:
            environment.cleanup()


def test_live_attach_and_force_remove() -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    task = f"live-{uuid.uuid4().hex[:6]}"
    first = KubernetesEnvironment(_options(), task_id=task, profile=LIVE_PROFILE)
    first.write_file("x.txt", b"live")
    first.cleanup()
    second = KubernetesEnvironment(_options(), task_id=task, profile=LIVE_PROFILE)
    assert second._pod.uid == first._pod.uid and second.read_file("x.txt") == b"live"
    second.cleanup(force_remove=True)
    assert second.wait_for_cleanup(120)
    listed = KubernetesEnvironment.list_sandboxes(profile=LIVE_PROFILE, options=_options())
    assert all(i.task != task for i in listed)


def test_live_image_pull_failure_is_clear() -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    from envlayer.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match=r"ImagePullBackOff|ErrImagePull|still Pending"):
        KubernetesEnvironment(
            _options(image="envlayer.invalid/no-such-image:0", startup_timeout=30),
            task_id=f"live-{uuid.uuid4().hex[:6]}",
            profile=LIVE_PROFILE,
        )


def test_live_restricted_preset_writes_as_non_root_where_commands_start() -> None:
    """The preset passes Pod Security ``restricted`` (where enforced) and the workspace
    emptyDir is writable by uid 65534 (the kubelet's emptyDir mode, not the fake's)."""
    from envlayer_kubernetes.backend import KubernetesEnvironment

    env = KubernetesEnvironment(
        _options(security_preset="restricted", run_as_user=65534, fs_group=65534),
        task_id=f"live-nr-{uuid.uuid4().hex[:6]}",
        profile=LIVE_PROFILE,
    )
    try:
        assert env.exec("touch x && id -u && stat -c %g .").stdout == b"65534\n65534\n"
    finally:
        env.cleanup(force_remove=True)


def test_live_session_ping_is_answered_and_long_oneshot_commands_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real API server answers the session websocket's pings (no needless restart),
    and a one-shot command too long for a URL runs over stdin."""
    from envlayer_kubernetes import channel
    from envlayer_kubernetes.backend import KubernetesEnvironment

    monkeypatch.setattr(channel, "PROBE_IDLE", 0.0)
    task = f"live-ka-{uuid.uuid4().hex[:6]}"
    env = KubernetesEnvironment(_options(), task_id=task, profile=LIVE_PROFILE)
    oneshot = KubernetesEnvironment(_options(exec_mode="oneshot"), task_id=task, profile=LIVE_PROFILE)
    try:
        assert env.exec("export K=1").ok
        second = env.exec("echo $K")
        assert second.stdout == b"1\n" and second.recovered == ""
        assert oneshot.exec(f"printf %s '{'x' * 200_000}' | wc -c").stdout.strip() == b"200000"
    finally:
        env.cleanup(force_remove=True)
        oneshot.cleanup()


def test_live_execs_in_threads_with_creates_and_deletes() -> None:
    """Exec handshakes in some threads never turn other threads' REST calls into websockets."""
    import threading

    from envlayer_kubernetes.backend import KubernetesEnvironment

    shared = KubernetesEnvironment(
        _options(exec_mode="oneshot"), task_id=f"live-th-{uuid.uuid4().hex[:6]}", profile=LIVE_PROFILE
    )
    errors: list[BaseException] = []

    def execs() -> None:
        for _ in range(5):
            try:
                assert shared.exec("echo ok").stdout == b"ok\n"
            except BaseException as exc:
                errors.append(exc)

    def lifecycle() -> None:
        try:
            env = KubernetesEnvironment(
                _options(persist_across_processes=False), task_id="live-life", profile=LIVE_PROFILE
            )
            env.cleanup(force_remove=True)
            env.wait_for_cleanup(120)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=execs) for _ in range(4)] + [threading.Thread(target=lifecycle)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        shared.cleanup(force_remove=True)
    assert errors == []
