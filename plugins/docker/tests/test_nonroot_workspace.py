"""A container whose ``user`` is not root owns its working directory and its durable
workspace from the start, and keeps it when the workspace outlives the container
(:mod:`envlayer_docker.ownership`), against the real daemon."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from envlayer_docker.container import owned_dirs
from envlayer_docker.options import DockerOptions
from envlayer_docker.ownership import resolve_ids, unknown_user
from envlayer_docker.workspace import DataMount

from envlayer.errors import ConfigError
from envlayer.testing import EnvironmentConformance

NOBODY = "65534:65534"
IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")


def _owner(env: Any, path: str = ".") -> str:
    return env.exec(["stat", "-c", "%u:%g", path]).stdout_text.strip()


def test_numeric_user_writes_in_the_default_working_directory(make_env) -> None:
    env = make_env(user=NOBODY)
    result = env.exec("touch x && echo ok")
    assert (result.exit_code, result.stdout_text, result.stderr_text) == (0, "ok\n", "")
    assert env.exec("pwd").stdout_text.strip() == "/workspace"
    assert _owner(env) == NOBODY
    env.write_file("written.txt", "by the file API")
    assert env.read_file("written.txt") == b"by the file API"


def test_named_user_gets_its_primary_group(make_env) -> None:
    env = make_env(user="nobody")
    assert env.exec("touch x").exit_code == 0
    assert _owner(env) == NOBODY


def test_uid_alone_takes_the_group_of_its_passwd_entry(make_env) -> None:
    env = make_env(user="65534")
    assert env.exec("touch x").exit_code == 0
    assert _owner(env) == NOBODY


def test_unknown_uid_gets_group_zero_as_docker_gives_it(make_env) -> None:
    env = make_env(user="4242")
    assert env.exec("id -u; id -g; touch x").stdout_text.split() == ["4242", "0"]
    assert _owner(env) == "4242:0"


def test_the_images_own_user_gets_the_working_directory(make_env, build_image) -> None:
    tag = build_image(f"envlayer-test-user-{uuid.uuid4().hex[:8]}:latest", f"FROM {IMAGE}\nUSER nobody\n".encode())
    env = None
    try:
        env = make_env(image=tag)
        assert env.exec("id -u; touch x && echo ok").stdout_text.split() == ["65534", "ok"]
        assert _owner(env) == NOBODY
    finally:
        if env is not None:
            env.cleanup(force_remove=True)
            env.wait_for_cleanup(30)


def test_workspace_outliving_its_container_stays_the_users(make_env) -> None:
    first = make_env(user=NOBODY)
    first.exec("mkdir sub && echo kept > sub/file").check()
    first.cleanup(force_remove=True)
    assert first.wait_for_cleanup(30)
    second = make_env(task=first.task_id, user=NOBODY)
    assert second.exec("cat sub/file").stdout == b"kept\n"
    assert second.exec("touch y && echo ok").stdout == b"ok\n"
    assert _owner(second) == NOBODY


def test_workspace_made_by_root_is_handed_to_a_later_non_root_user(make_env) -> None:
    as_root = make_env()
    as_root.exec("echo mine > root-file").check()
    as_root.cleanup(force_remove=True)
    assert as_root.wait_for_cleanup(30)
    later = make_env(task=as_root.task_id, user=NOBODY)
    assert later.exec("touch new && echo ok").stdout == b"ok\n"
    assert _owner(later, "root-file") == "0:0", "the directory changes hands, not what is in it"


def test_working_directory_outside_any_volume_is_the_users(make_env) -> None:
    env = make_env(user=NOBODY, workspace="none", cwd="/srv/work")
    assert env.exec("touch x && pwd").stdout_text.strip() == "/srv/work"
    assert _owner(env) == NOBODY


def test_a_bind_mounted_working_directory_is_left_as_it_is(make_env, tmp_path) -> None:
    before = os.stat(tmp_path)
    make_env(user=NOBODY, volumes=[f"{tmp_path}:/workspace"], persist_across_processes=False)
    after = os.stat(tmp_path)
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)


def test_image_without_the_named_user_is_a_clear_error(make_env, docker_api, profile: str) -> None:
    task = "no-such-user"
    with pytest.raises(ConfigError) as info:
        make_env(task=task, user="envlayer-no-such-user")
    assert info.value.key == "user"
    assert "has no user 'envlayer-no-such-user'" in info.value.message
    assert "useradd" in info.value.hint
    labels = [f"envlayer.profile={profile}", f"envlayer.task={task}"]
    leftovers = docker_api.containers(all=True, filters={"label": labels})
    assert leftovers == [], "the container that could not start is removed"


def test_image_without_the_named_group_is_a_clear_error(make_env) -> None:
    with pytest.raises(ConfigError) as info:
        make_env(user="nobody:envlayer-no-such-group")
    assert "has no group 'envlayer-no-such-group'" in info.value.message


class TestUnprivilegedInTheDefaultWorkspace(EnvironmentConformance):
    """The public conformance kit as uid 65534 in the default working directory (the
    durable ``/workspace`` volume), with nothing pointed elsewhere."""

    task = f"conformance-nobody-workspace-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def env(self, docker_api: Any, profile: str, options: Any) -> Iterator[Any]:
        from envlayer_docker.backend import DockerEnvironment

        environment = DockerEnvironment(options(user=NOBODY), task_id=self.task, profile=profile)
        try:
            yield environment
        finally:
            environment.cleanup()


# --- pure parts ---------------------------------------------------------------------------


def test_owned_dirs_are_the_volumes_and_an_unmounted_working_directory() -> None:
    volume = DataMount("workspace", "volume", "v-workspace", "/workspace")
    home = DataMount("home", "volume", "v-home", "/root")
    host = DataMount("workspace", "host", "/data/x/workspace", "/workspace")
    assert owned_dirs(DockerOptions(), [volume, home], user_mounts=set()) == ["/workspace", "/root"]
    assert owned_dirs(DockerOptions(), [host], user_mounts=set()) == []
    assert owned_dirs(DockerOptions(cwd="/srv"), [], user_mounts=set()) == ["/srv"]
    assert owned_dirs(DockerOptions(cwd="/srv/a"), [], user_mounts={"/srv"}) == []
    assert owned_dirs(DockerOptions(cwd="/tmp/a"), [], user_mounts={"/tmp"}) == []
    assert owned_dirs(DockerOptions(cwd="/srvx"), [], user_mounts={"/srv"}) == ["/srvx"]


def test_unknown_user_reads_the_daemons_refusal() -> None:
    class Refusal(Exception):
        explanation = (
            "failed to create shim task: OCI runtime create failed: unable to find user app: "
            "no matching entries in passwd file"
        )

    error = unknown_user(Refusal(), "img:1")
    assert error is not None
    assert error.message.endswith("the image img:1 has no user 'app' (it is not in its /etc/passwd)")
    assert unknown_user(Exception("no space left on device"), "img:1") is None


def test_account_files_behind_a_symlink_are_read(make_env) -> None:
    """An image whose /etc/passwd is a symlink (as some distributions ship it): the
    named user is found through the link."""
    base = make_env(persist_across_processes=False, workspace="none", cwd="/")
    base.exec("mkdir /etc/accounts && mv /etc/passwd /etc/accounts/ && ln -s accounts/passwd /etc/passwd").check()
    assert resolve_ids(base._api, base._container.id, "nobody", "img") == (65534, 65534)
