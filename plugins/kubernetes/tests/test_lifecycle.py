"""Pod lifecycle against the fake API server, with real processes where it matters:
cross-process attach, SIGKILL then attach, 16 racing creators, persist / opt-out / force,
the reaper's profile and namespace scoping, activeDeadlineSeconds, Pending pods, and the
routes the real client used."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from envlayer.errors import BackendUnavailable
from envlayer.testing.fixtures import first_line_then_kill
from envlayer.testing.racing import race


def _task() -> str:
    return f"lc-{uuid.uuid4().hex[:8]}"


NAMESPACE = "envlayer-test"
DEADLINE = 3600
"""activeDeadlineSeconds of the tests' pods that must end: never reached in real time, it
passes when the test moves the pod's clock (``age_pod``), whatever the machine's load."""
"""The namespace of the test kubeconfig's current context (see conftest)."""


def _core(fake_apiserver: Any) -> Any:
    from kubernetes import config
    from kubernetes.client import CoreV1Api

    return CoreV1Api(config.new_client_from_config(config_file=fake_apiserver.kubeconfig))


def _pods(fake_apiserver: Any, selector: str, namespace: str = NAMESPACE) -> list[Any]:
    return list(_core(fake_apiserver).list_namespaced_pod(namespace, label_selector=selector).items)


def _pods_gone(fake_apiserver: Any, selector: str, timeout: float = 30) -> bool:
    """Poll until the API lists no pod for ``selector``; False if some remain after ``timeout``."""
    end = time.monotonic() + timeout
    while _pods(fake_apiserver, selector):
        if time.monotonic() >= end:
            return False
        time.sleep(0.1)
    return True


def _wait_phase(core: Any, name: str, phase: str, namespace: str = NAMESPACE, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while core.read_namespaced_pod(name, namespace).status.phase != phase:
        assert time.monotonic() < end, f"pod {name} never reached {phase}"
        time.sleep(0.2)


def test_cross_process_attach_sees_files_and_the_same_pod(
    make_env: Callable[..., Any], profile: str, run_python: Any, child_env_code: Any
) -> None:
    task = _task()
    out = run_python(
        child_env_code(task, profile)
        + "env.write_file('from-child.txt', b'child was here')\n"
        + "print(env.pod_name, env._pod.uid, env._pod.created)\n"
        + "env.cleanup()\n"
    )
    name, uid, created = out.split()
    assert created == "True"
    env = make_env(task)
    assert (env.pod_name, env._pod.uid, env._pod.created) == (name, uid, False)
    assert env.read_file("from-child.txt") == b"child was here"


def test_sigkill_then_attach(make_env: Callable[..., Any], profile: str, run_python: Any, child_env_code: Any) -> None:
    task = _task()
    child = run_python(
        child_env_code(task, profile)
        + "import sys\nprint(env._pod.uid, flush=True)\n"
        + "env.exec('echo started > marker; sleep 120', timeout=300)\n",
        wait=False,
    )
    try:
        uid = child.stdout.readline().strip()
        assert uid, child.stderr.read()
        env = make_env(task)
        end = time.monotonic() + 120
        while env.exec("cat marker").stdout != b"started\n":
            assert time.monotonic() < end
            time.sleep(0.2)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    again = make_env(task)
    assert again._pod.uid == uid
    assert again.exec("echo alive").stdout == b"alive\n"


def test_sixteen_racing_processes_end_on_one_pod(
    fake_apiserver: Any, profile: str, control: Any, child_env_code: Any
) -> None:
    task = _task()
    code = child_env_code(task, profile) + (
        "print(env._pod.uid, env._pod.created, env.exec('echo ok').stdout.decode().strip())\n"
    )
    prelude = "import kubernetes.client, kubernetes.config, kubernetes.stream, envlayer_kubernetes.backend\n"
    racers = race(prelude, code, 16, timeout=180, env=control.child_environ())
    outputs = [racer.stdout.split() for racer in racers]
    assert {o[0] for o in outputs} != set() and len({o[0] for o in outputs}) == 1
    assert sum(o[1] == "True" for o in outputs) == 1
    assert all(o[2] == "ok" for o in outputs)
    from envlayer_kubernetes.naming import selector

    assert len(_pods(fake_apiserver, selector(profile=profile, task=task))) == 1
    conflicts = [r for r in fake_apiserver.routes() if r["method"] == "POST" and r["status"] == 409]
    assert len(conflicts) >= 15


def test_persist_cleanup_keeps_the_pod_and_force_remove_deletes_it(
    fake_apiserver: Any, make_env: Callable[..., Any]
) -> None:
    core = _core(fake_apiserver)
    env = make_env()
    env.exec("echo kept > f").check()
    env.cleanup()
    assert env.wait_for_cleanup(1)
    assert core.read_namespaced_pod(env.pod_name, NAMESPACE).status.phase == "Running"
    env.cleanup(force_remove=True)
    assert env.wait_for_cleanup(60)
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod(env.pod_name, NAMESPACE)
    assert info.value.status == 404


def test_opt_out_gives_a_private_pod_deleted_by_cleanup(fake_apiserver: Any, make_env: Callable[..., Any]) -> None:
    from envlayer_kubernetes.naming import PERSIST

    task = _task()
    shared = make_env(task)
    private = make_env(task, persist_across_processes=False)
    assert private.pod_name != shared.pod_name
    digest = shared.pod_name.rsplit("-", 1)[1]
    assert private.pod_name.rsplit("-", 2)[1:] == [digest, private.pod_name[-9:]]
    assert private.pod_name[-9] == "p" and len(private.pod_name) <= 63
    pod = _core(fake_apiserver).read_namespaced_pod(private.pod_name, NAMESPACE)
    assert pod.metadata.labels[PERSIST] == "0"
    private.cleanup()
    assert private.wait_for_cleanup(60)
    names = {p.metadata.name for p in _pods(fake_apiserver, f"envlayer/task={task}")}
    assert names == {shared.pod_name}


def test_pod_spec_carries_options_and_never_env_values(
    fake_apiserver: Any, make_env: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("ENVLAYER_K8S_FORWARDED", secret + "-fwd")
    env = make_env(
        env={"API_TOKEN": secret},
        forward_env=["ENVLAYER_K8S_FORWARDED"],
        requests={"cpu": "100m", "memory": "64Mi"},
        limits={"memory": "256Mi"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}],
        node_selector={"kubernetes.io/os": "linux"},
        pod_labels={"team": "research"},
        pod_annotations={"example.com/owner": "alice"},
        active_deadline=3600,
        image_pull_policy="Never",
    )
    result = env.exec('printf "%s %s" "$API_TOKEN" "$ENVLAYER_K8S_FORWARDED"', env={"PER_CALL": secret + "-call"})
    assert result.stdout_text == f"{secret} {secret}-fwd"
    pod = _core(fake_apiserver).read_namespaced_pod(env.pod_name, NAMESPACE)
    spec = pod.spec
    c = spec.containers[0]
    assert c.resources.requests == {"cpu": "100m", "memory": "64Mi"}
    assert c.resources.limits == {"memory": "256Mi"}
    assert c.image_pull_policy == "Never"
    assert spec.active_deadline_seconds == 3600
    assert spec.node_selector == {"kubernetes.io/os": "linux"}
    assert spec.tolerations[0].key == "dedicated"
    assert spec.automount_service_account_token is False
    assert pod.metadata.labels["team"] == "research"
    assert pod.metadata.annotations["example.com/owner"] == "alice"
    assert secret not in json.dumps(pod.to_dict(), default=str)
    assert not c.env
    logged = json.dumps(fake_apiserver.routes())
    assert secret not in logged, "an environment value reached the API (argv in the exec URL?)"


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_commands_get_the_pager_defaults_unless_env_sets_them(
    make_env: Callable[..., Any], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PAGER=cat`` and ``GIT_PAGER=cat`` reach every command (so ``git log`` never waits
    for a key), over a forwarded value as on the other backends; the ``env`` option and a
    call's ``env`` override them."""
    monkeypatch.setenv("PAGER", "less")
    show = 'printf "%s %s" "$PAGER" "$GIT_PAGER"'
    env = make_env(exec_mode=mode, forward_env=["PAGER"])
    assert env.exec(show).stdout_text == "cat cat"
    assert env.exec(show, env={"GIT_PAGER": "most"}).stdout_text == "cat most"
    assert env.exec(show, cwd="/tmp").stdout_text == "cat cat"
    assert make_env(exec_mode=mode, env={"PAGER": "more"}).exec(show).stdout_text == "more cat"


def test_reaper_is_scoped_to_profile_and_namespace(fake_apiserver: Any, make_env: Callable[..., Any]) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    mine, other = f"reap-{uuid.uuid4().hex[:6]}", f"reap-other-{uuid.uuid4().hex[:6]}"
    ended = make_env("ended", mine, active_deadline=DEADLINE)
    running = make_env("running", mine)
    other_profile = make_env("ended", other, active_deadline=DEADLINE)
    other_ns = make_env("ended", mine, active_deadline=DEADLINE, namespace=NAMESPACE + "-other")
    core = _core(fake_apiserver)
    for env, ns in ((ended, NAMESPACE), (other_profile, NAMESPACE), (other_ns, NAMESPACE + "-other")):
        fake_apiserver.age_pod(env.pod_name, DEADLINE, ns)
        _wait_phase(core, env.pod_name, "Failed", ns)
    opts = ended.options
    dry = KubernetesEnvironment.reap_orphans(profile=mine, max_age=0, dry_run=True, options=opts)
    assert [i.id for i in dry] == [ended.pod_name]
    assert core.read_namespaced_pod(ended.pod_name, NAMESPACE).status.phase == "Failed"
    young = KubernetesEnvironment.reap_orphans(profile=mine, max_age=3600, dry_run=False, options=opts)
    assert young == []
    removed = KubernetesEnvironment.reap_orphans(profile=mine, max_age=0, dry_run=False, options=opts)
    assert [i.id for i in removed] == [ended.pod_name]
    assert removed[0].status == "Failed" and removed[0].detail["namespace"] == NAMESPACE
    from envlayer_kubernetes import pods
    from envlayer_kubernetes.client import connect

    assert pods.wait_gone(connect(opts), ended.pod_name, opts, 30)
    assert core.read_namespaced_pod(running.pod_name, NAMESPACE).status.phase == "Running"
    assert core.read_namespaced_pod(other_profile.pod_name, NAMESPACE).status.phase == "Failed"
    assert core.read_namespaced_pod(other_ns.pod_name, NAMESPACE + "-other").status.phase == "Failed"


def test_reaper_never_touches_unlabelled_pods(fake_apiserver: Any, make_env: Callable[..., Any], profile: str) -> None:
    from envlayer_kubernetes import naming
    from envlayer_kubernetes.backend import KubernetesEnvironment

    env = make_env()
    core = _core(fake_apiserver)
    name = f"foreign-{uuid.uuid4().hex[:6]}"
    labels = {naming.PROFILE: naming.label_value(profile), naming.TASK: "x"}  # no envlayer/managed
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "containers": [{"name": "c", "image": env.options.image, "command": ["sh", "-c", "exit 3"]}],
                "restartPolicy": "Never",
            },
        },
    )
    try:
        _wait_phase(core, name, "Failed")
        KubernetesEnvironment.reap_orphans(profile=profile, max_age=0, dry_run=False, options=env.options)
        assert core.read_namespaced_pod(name, NAMESPACE).status.phase == "Failed"
    finally:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_unmanaged_pod_with_our_name_is_refused_and_untouched(
    fake_apiserver: Any, options: Callable[..., Any], profile: str
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.naming import pod_name

    task = _task()
    core = _core(fake_apiserver)
    name = pod_name(profile, task)
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": options().image, "command": ["sleep", "300"]}]},
        },
    )
    try:
        with pytest.raises(BackendUnavailable, match="did not create it"):
            KubernetesEnvironment(options(), task_id=task, profile=profile)
        assert core.read_namespaced_pod(name, NAMESPACE).metadata.deletion_timestamp is None
    finally:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_active_deadline_ends_the_pod_and_the_next_environment_replaces_it(
    fake_apiserver: Any, make_env: Callable[..., Any]
) -> None:
    task = _task()
    first = make_env(task, active_deadline=DEADLINE)
    assert first.exec("echo old").stdout == b"old\n"
    fake_apiserver.age_pod(first.pod_name, DEADLINE)
    _wait_phase(_core(fake_apiserver), first.pod_name, "Failed")
    second = make_env(task, active_deadline=DEADLINE)
    assert second._pod.uid != first._pod.uid and second._pod.created
    assert second.exec("echo new").stdout == b"new\n"


def test_fingerprint_mismatch_recreates_or_raises(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    from envlayer.sandbox.recorded_options import OptionChange, SandboxOptionsDiffer

    task = _task()
    first = make_env(task, pod_labels={"version": "1"})
    with pytest.raises(SandboxOptionsDiffer, match="different options") as info:
        make_env(task, pod_labels={"version": "2"}, on_fingerprint_mismatch="error")
    assert info.value.changes == [OptionChange("pod_labels", {"version": "1"}, {"version": "2"})]
    assert info.value.recorded is not None and info.value.recorded["image"] == first.options.image  # the annotation
    with caplog.at_level(logging.WARNING, logger="envlayer.kubernetes"):
        second = make_env(task, pod_labels={"version": "2"})
    assert second._pod.uid != first._pod.uid
    notice = second.exec("true").notice
    assert "was replaced" in notice and 'pod_labels: {"version": "1"} -> {"version": "2"}' in notice
    assert notice in [r.getMessage() for r in caplog.records if r.name == "envlayer.kubernetes"]
    assert second.exec("true").notice == ""


def test_vanished_pod_is_recreated_before_the_command_runs(fake_apiserver: Any, make_env: Callable[..., Any]) -> None:
    env = make_env()
    core = _core(fake_apiserver)
    core.delete_namespaced_pod(env.pod_name, NAMESPACE, grace_period_seconds=0)
    from envlayer_kubernetes import pods

    assert pods.wait_gone(env._cluster, env.pod_name, env.options, 30)
    result = env.exec("echo back")
    assert result.stdout == b"back\n"
    assert result.recovered == "pod recreated"


def test_image_pull_backoff_is_waited_for_then_fails_clearly_and_leaves_nothing(
    fake_apiserver: Any, options: Callable[..., Any], profile: str
) -> None:
    """ImagePullBackOff can recover (the kubelet retries): waited for up to
    startup_timeout, then the error names the last reason, and the pod is deleted."""
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.naming import selector

    task = _task()
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(
            options(image="envlayer-test:no-such-image", startup_timeout=2), task_id=task, profile=profile
        )
    assert "still ImagePullBackOff" in str(info.value) and "image_pull_secrets" in str(info.value)
    assert _pods_gone(fake_apiserver, selector(profile=profile, task=task))


@pytest.mark.parametrize(
    ("image", "policy", "reason"),
    [("Not A Valid Ref!", "IfNotPresent", "InvalidImageName"), ("envlayer-test:absent", "Never", "ErrImageNeverPull")],
)
def test_image_errors_that_cannot_recover_fail_at_once(
    fake_apiserver: Any, options: Callable[..., Any], profile: str, image: str, policy: str, reason: str
) -> None:
    """InvalidImageName and ErrImageNeverPull never recover: the error comes without
    waiting for startup_timeout (which is far away) and the pod is deleted."""
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.naming import selector

    task = _task()
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(
            options(image=image, image_pull_policy=policy, startup_timeout=3600), task_id=task, profile=profile
        )
    assert f"cannot start: {reason}" in str(info.value) and "still" not in str(info.value)
    assert _pods_gone(fake_apiserver, selector(profile=profile, task=task))


def test_unschedulable_for_good_fails_clearly_at_startup_timeout(
    fake_apiserver: Any, options: Callable[..., Any], profile: str
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.naming import selector

    task = _task()
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(options(node_selector={"gpu": "a100"}, startup_timeout=2), task_id=task, profile=profile)
    assert "still Unschedulable: 0/1 nodes are available" in str(info.value) and "node_selector" in str(info.value)
    assert _pods_gone(fake_apiserver, selector(profile=profile, task=task))


def test_pod_held_unschedulable_until_a_node_comes_is_waited_for(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """As while a cluster autoscaler adds a node: the pod is Unschedulable for a while,
    then scheduled; the environment waits (saying why) and works."""
    caplog.set_level("INFO", logger="envlayer.kubernetes")
    env = make_env(pod_annotations={"fake.envlayer/unschedulable-seconds": "3"})
    assert env.exec("echo scheduled").stdout == b"scheduled\n"
    notes = [r for r in caplog.records if r.levelname == "WARNING" and "Unschedulable" in r.getMessage()]
    assert notes and "startup_timeout" in notes[0].getMessage()


def test_pending_pod_is_waited_for_with_progress(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlayer_kubernetes import pods

    monkeypatch.setattr(pods, "PROGRESS_EVERY", 0.5)
    caplog.set_level("INFO", logger="envlayer.kubernetes")
    env = make_env(pod_annotations={"fake.envlayer/pending-seconds": "2"})
    assert env.exec("echo up").stdout == b"up\n"
    assert any("waiting for pod" in r.getMessage() and "ContainerCreating" in r.getMessage() for r in caplog.records)


def test_startup_timeout_deletes_the_pod_it_created(
    fake_apiserver: Any, make_env: Callable[..., Any], profile: str
) -> None:
    from envlayer_kubernetes.naming import selector

    task = _task()
    with pytest.raises(BackendUnavailable, match="still ContainerCreating"):
        make_env(task, startup_timeout=1, pod_annotations={"fake.envlayer/pending-seconds": "30"})
    assert _pods_gone(fake_apiserver, selector(profile=profile, task=task))


def test_list_and_remove(make_env: Callable[..., Any]) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    prof = f"lr-{uuid.uuid4().hex[:6]}"
    a, b = make_env("a", prof), make_env("b", prof)
    listed = KubernetesEnvironment.list_sandboxes(profile=prof, options=a.options)
    assert sorted(i.task for i in listed) == ["a", "b"] and {i.status for i in listed} == {"Running"}
    assert KubernetesEnvironment.remove_sandbox("a", profile=prof, options=a.options, force=False) == []
    removed = KubernetesEnvironment.remove_sandbox("a", profile=prof, options=a.options, force=True)
    assert [i.id for i in removed] == [a.pod_name]
    from envlayer_kubernetes import pods

    assert pods.wait_gone(a._cluster, a.pod_name, a.options, 30)
    assert [i.task for i in KubernetesEnvironment.list_sandboxes(profile=prof, options=a.options)] == ["b"]
    assert b.exec("true").ok


PROBE = "/apis/apps/v1/namespaces/x/deployments"
"""A route the fake does not serve (requested by the test that checks unknown routes)."""


def test_routes_used_are_the_documented_subset(fake_apiserver: Any) -> None:
    """Runs last in this module: every request the client made hit a served route."""
    used = fake_apiserver.route_set()
    assert not [r for r in fake_apiserver.routes() if r["route"] == "UNKNOWN" and r["path"] != PROBE]
    assert used <= {
        ("POST", "/api/v1/namespaces/{ns}/pods"),
        ("GET", "/api/v1/namespaces/{ns}/pods"),
        ("GET", "/api/v1/namespaces/{ns}/pods/{name}"),
        ("DELETE", "/api/v1/namespaces/{ns}/pods/{name}"),
        ("GET", "/api/v1/namespaces/{ns}/pods/{name}/exec"),
    }
    assert ("GET", "/api/v1/namespaces/{ns}/pods/{name}/exec") in used


def test_unknown_route_is_404_and_logged(fake_apiserver: Any) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"http://127.0.0.1:{fake_apiserver.port}{PROBE}", timeout=10)
    assert info.value.code == 404
    assert any(r["route"] == "UNKNOWN" and r["path"] == PROBE for r in fake_apiserver.routes())


def test_namespace_option_and_context_choose_the_namespace(fake_apiserver: Any, options: Callable[..., Any]) -> None:
    from envlayer_kubernetes.client import connect

    assert connect(options()).namespace == NAMESPACE
    assert connect(options(context="other-namespace")).namespace == NAMESPACE + "-other"
    assert connect(options(namespace="explicit")).namespace == "explicit"
    assert os.path.exists(fake_apiserver.kubeconfig)


def test_doctor_checks_the_cluster(fake_apiserver: Any, tmp_path: Any) -> None:
    import subprocess
    import sys

    env = dict(os.environ, ENVLAYER_KUBERNETES_KUBECONFIG=fake_apiserver.kubeconfig)
    code = "import sys; from envlayer.cli.app import main; sys.exit(main(['doctor', '--backend', 'kubernetes']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("ok   kubernetes")


def test_cli_lists_and_removes_pods(fake_apiserver: Any, make_env: Callable[..., Any], tmp_path: Any) -> None:
    import subprocess
    import sys

    prof = f"cli-{uuid.uuid4().hex[:6]}"
    env = make_env("cli-task", prof)
    run_env = dict(os.environ, ENVLAYER_KUBERNETES_KUBECONFIG=fake_apiserver.kubeconfig)

    def cli(*args: str) -> str:
        code = f"import sys; from envlayer.cli.app import main; sys.exit(main({list(args)!r}))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    listed = cli("ls", "--backend", "kubernetes", "--profile", prof)
    assert env.pod_name in listed and "cli-task" in listed and "Running" in listed
    removed = cli("rm", "cli-task", "--backend", "kubernetes", "--profile", prof, "--force")
    assert env.pod_name in removed
    from envlayer_kubernetes import pods

    assert pods.wait_gone(env._cluster, env.pod_name, env.options, 30)
    assert env.pod_name not in cli("ls", "--backend", "kubernetes", "--profile", prof)


def test_reaper_removes_private_pods_of_dead_owners_only(
    fake_apiserver: Any, make_env: Callable[..., Any], run_python: Any, child_env_code: Any
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.naming import OWNER

    prof = f"owner-{uuid.uuid4().hex[:6]}"
    child = run_python(
        child_env_code("orphan", prof, persist_across_processes=False)
        + "print(env.pod_name, flush=True)\nimport time\ntime.sleep(300)\n",
        wait=False,
    )
    orphan = first_line_then_kill(child)
    assert orphan, child.stderr.read()
    mine = make_env("alive", prof, persist_across_processes=False)
    shared = make_env("shared", prof)
    core = _core(fake_apiserver)
    assert core.read_namespaced_pod(orphan, NAMESPACE).metadata.labels[OWNER]
    removed = KubernetesEnvironment.reap_orphans(profile=prof, max_age=3600, dry_run=False, options=mine.options)
    assert [i.id for i in removed] == [orphan]
    assert core.read_namespaced_pod(mine.pod_name, NAMESPACE).status.phase == "Running"
    assert core.read_namespaced_pod(shared.pod_name, NAMESPACE).status.phase == "Running"
