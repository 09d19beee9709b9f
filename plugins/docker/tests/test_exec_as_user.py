"""``exec(..., user=NAME)`` on Docker (capability ``exec_as_user``) against the real
daemon: directly, and through the manager that the tools and the Inspect provider use.
The kit's generic checks (``test_exec_as_user_*`` in ``test_conformance.py``) cover the
uid switch, the timeout kill and malformed values; these cover the Docker specifics."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.docker


def test_a_user_call_starts_in_the_session_directory_without_its_exports(make_env: Callable[..., Any]) -> None:
    env = make_env()
    env.exec("mkdir -p /tmp/work && cd /tmp/work && export SESSION_ONLY=1").check()
    result = env.exec('id -u; pwd; echo "[${SESSION_ONLY:-}]"', user="nobody", env={"PER_CALL": "x"})
    assert result.stdout_text.split() == ["65534", "/tmp/work", "[]"]
    after = env.exec('id -u; pwd; echo "[$SESSION_ONLY]"')
    assert after.stdout_text.split() == ["0", "/tmp/work", "[1]"], "the session shell must be untouched"


def test_an_unknown_user_fails_that_call_and_keeps_the_container(make_env: Callable[..., Any]) -> None:
    env = make_env()
    env.exec("echo warm").check()
    before = env.container_id
    result = env.exec("echo ran", user="envlayer-no-such-user")
    assert result.exit_code == 126
    assert b"envlayer-no-such-user" in result.stdout + result.stderr and b"ran" not in result.stdout
    assert not result.recovered
    assert env.exec("echo fine").stdout == b"fine\n" and env.container_id == before


def test_group_and_numeric_forms(make_env: Callable[..., Any]) -> None:
    env = make_env()
    assert env.exec("id -u; id -g", user="1234:4321").stdout_text.split() == ["1234", "4321"]
    assert env.exec("id -un", user="nobody:nogroup").stdout_text.strip() == "nobody"


def test_root_from_a_non_root_container_has_no_capabilities_by_default(make_env: Callable[..., Any]) -> None:
    """Docker applies no-new-privileges to the exec: uid 0 without capabilities (documented)."""
    hardened = make_env(user="65534:65534", cwd="/tmp")
    assert hardened.exec("id -u; grep CapEff /proc/self/status", user="0").stdout_text.split() == [
        "0",
        "CapEff:",
        "0000000000000000",
    ]
    relaxed = make_env(user="65534:65534", cwd="/tmp", no_new_privileges=False)
    assert relaxed.exec("grep CapEff /proc/self/status", user="0").stdout_text.split()[1] != "0000000000000000"


def test_through_the_manager(profile: str) -> None:
    from envlayer.agents.manager import EnvironmentManager
    from envlayer.config import load_settings

    image = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
    settings = load_settings(env=dict(os.environ), backend="docker", profile=profile, backend_options={"image": image})
    with EnvironmentManager(settings) as manager:
        try:
            managed = manager.get("as-user")
            assert managed.exec("id -u", user="nobody").stdout_text.strip() == "65534"
            assert managed.exec("id -u").stdout_text.strip() == "0"
        finally:
            manager.release("as-user", force_remove=True)


@pytest.mark.parametrize("broker", ["1", "0"], ids=["broker", "in-process"])
def test_the_cli_user_flag(cli: Any, profile: str, broker: str) -> None:
    prof = f"{profile}-cli-user"
    try:
        out = cli(
            "exec", "--task", "u", "-u", "nobody", "--", "id", "-u", profile=prof, env={"ENVLAYER_BROKER": broker}
        )
        assert (out.returncode, out.stdout.strip()) == (0, "65534"), out.stderr
        own = cli("exec", "--task", "u", "id", "-u", profile=prof, env={"ENVLAYER_BROKER": broker})
        assert own.stdout.strip() == "0"
    finally:
        cli("rm", "u", "--force", "--purge", profile=prof)
