"""Security context options against the fake API server: the ``restricted`` preset in a
namespace that enforces Pod Security ``restricted``, non-root users writing where commands
start (the workspace emptyDir), ``fsGroup``, and admission or quota rejections told apart
from missing permissions."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from envlayer.errors import BackendUnavailable

RESTRICTED_NS = "envlayer-restricted"
QUOTA_NS = "envlayer-quota"


@pytest.fixture
def restricted_ns(fake_apiserver: Any) -> Iterator[str]:
    """A namespace of the session's fake that enforces Pod Security ``restricted``."""
    fake_apiserver.set_namespace(RESTRICTED_NS, pod_security="restricted")
    try:
        yield RESTRICTED_NS
    finally:
        fake_apiserver.set_namespace(RESTRICTED_NS)


def _task() -> str:
    return f"sec-{uuid.uuid4().hex[:8]}"


def test_restricted_namespace_rejects_a_default_pod_saying_why(
    restricted_ns: str, options: Callable[..., Any], profile: str
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(options(namespace=restricted_ns), task_id=_task(), profile=profile)
    text = str(info.value)
    assert "Pod Security admission rejected creating pod" in text and "runAsNonRoot != true" in text
    assert 'security_preset = "restricted"' in info.value.hint and "Role" not in info.value.hint


def test_restricted_preset_runs_as_non_root_and_writes_where_commands_start(
    restricted_ns: str, make_env: Callable[..., Any]
) -> None:
    """Admitted by Pod Security ``restricted``; commands run as uid 65534 and can write in
    the working directory (session and one-shot, files too)."""
    env = make_env(namespace=restricted_ns, security_preset="restricted", run_as_user=65534)
    assert env.exec("id -u; pwd; touch x && echo wrote").stdout == b"65534\n/workspace\nwrote\n"
    assert env.exec(["sh", "-c", "touch y && stat -c %u y"], timeout=30).stdout == b"65534\n"
    env.write_file("notes/a.txt", "hello")
    assert env.read_file("notes/a.txt") == b"hello"
    oneshot = make_env(
        env.task_id, namespace=restricted_ns, security_preset="restricted", run_as_user=65534, exec_mode="oneshot"
    )
    assert oneshot.exec("touch z && id -u").stdout == b"65534\n"


def test_fs_group_owns_the_workspace_and_new_files(make_env: Callable[..., Any]) -> None:
    env = make_env(run_as_user=1000, run_as_group=3000, fs_group=2000)
    out = env.exec("id -G; stat -c %g .; touch f && stat -c %u:%g f").stdout.decode().split("\n")
    assert "2000" in out[0].split() and out[1] == "2000" and out[2] == "1000:2000"


def test_without_the_workspace_volume_the_runtime_made_workdir_is_not_writable(make_env: Callable[..., Any]) -> None:
    """What the workspace volume is for: the working directory the runtime creates is
    root-owned, so a non-root user cannot write there (issue 25's ``touch``)."""
    env = make_env(run_as_user=65534, workspace_volume="none")
    result = env.exec("touch x")
    assert result.exit_code != 0 and b"Permission denied" in result.stderr


def test_run_as_non_root_with_a_root_image_fails_at_once_with_a_hint(
    fake_apiserver: Any, options: Callable[..., Any], profile: str
) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment(
            options(security_preset="restricted", startup_timeout=3600), task_id=_task(), profile=profile
        )
    assert "CreateContainerConfigError: container has runAsNonRoot and image will run as root" in str(info.value)
    assert "run_as_user" in info.value.hint


def test_quota_rejection_says_quota_not_role(fake_apiserver: Any, options: Callable[..., Any], profile: str) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment

    fake_apiserver.set_namespace(QUOTA_NS, max_pods=0)
    try:
        with pytest.raises(BackendUnavailable) as info:
            KubernetesEnvironment(options(namespace=QUOTA_NS), task_id=_task(), profile=profile)
    finally:
        fake_apiserver.set_namespace(QUOTA_NS)
    assert "ResourceQuota rejected creating pod" in str(info.value) and "exceeded quota" in str(info.value)
    assert "envlayer rm" in info.value.hint and "Role" not in info.value.hint


def test_missing_permission_still_says_grant_the_role() -> None:
    """A 403 that is not an admission or quota rejection keeps the RBAC hint."""
    from envlayer_kubernetes.client import Cluster, unavailable
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=403, reason="Forbidden")
    exc.body = '{"message": "pods is forbidden: User \\"x\\" cannot create resource \\"pods\\""}'
    error = unavailable(exc, Cluster(core=None, namespace="ns", where="here"), "creating pod p")
    assert "grant the Role" in error.hint
