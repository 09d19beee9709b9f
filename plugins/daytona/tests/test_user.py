"""The ``user`` option (the SDK's ``os_user``) through the real SDK against the fake: commands
and files run as that user, in a working directory it owns; an image without the user is a
clear error at create."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from daytona_testkit import IMAGE, FakeDaytona

from envlayer.errors import BackendUnavailable
from envlayer.options import OptionError

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_commands_and_files_run_as_the_named_user(
    fake_daytona: FakeDaytona, make_env: Callable[..., Any], mode: str
) -> None:
    env = make_env(user="nobody", cwd=None, exec_mode=mode)
    result = env.exec("id -u; id -g; pwd; touch made-here && stat -c '%u %g' made-here")
    assert result.check().stdout_text.split("\n")[:5] == ["65534", "65534", "/nonexistent", "65534 65534", ""]
    env.write_file("/nonexistent/sub/uploaded.txt", b"data")
    assert env.exec("stat -c '%u' /nonexistent/sub/uploaded.txt").stdout_text == "65534\n"
    assert env.exec("touch /root/not-mine").exit_code != 0  # not root


def test_user_is_sent_at_create_and_changes_the_fingerprint(options: Callable[..., Any]) -> None:
    from envlayer_daytona.sandbox import build_spec, create_params

    spec = build_spec(options(user="nobody"), profile="p", task="t")
    assert create_params(options(user="nobody"), spec).os_user == "nobody"
    assert spec.fingerprint != build_spec(options(), profile="p", task="t").fingerprint
    assert create_params(options(), spec).os_user is None


def test_a_user_the_image_lacks_is_a_clear_error(
    fake_daytona: FakeDaytona, options: Callable[..., Any], profile: str
) -> None:
    from envlayer_daytona.backend import DaytonaEnvironment

    mark = fake_daytona.mark()
    with pytest.raises(BackendUnavailable) as info:
        DaytonaEnvironment(options(user="no-such-user"), task_id="missing-user", profile=profile)
    assert "no-such-user" in info.value.message and IMAGE in info.value.message
    assert [e["status"] for e in fake_daytona.entries_since(mark) if e["route"] == "create"] == [400]


def test_a_user_option_that_is_not_a_name_is_refused(options: Callable[..., Any]) -> None:
    with pytest.raises(OptionError, match="not a user name"):
        options(user="app; rm -rf /")
