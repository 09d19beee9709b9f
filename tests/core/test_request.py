"""ExecRequest: every argument check in one place (envlayer.request)."""

from __future__ import annotations

import math

import pytest

from envlayer.errors import BackendUnavailable, FileTooLarge, InvalidArgument
from envlayer.execution.collector import OutputCollector
from envlayer.request import MAX_TIMEOUT, ExecRequest, check_env, file_payload, normalize_timeout


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [(None, None, None), (None, 30, 30.0), (None, 0, None), (0, 30, None), (2, None, 2.0), (0.5, 9, 0.5)],
)
def test_timeout_rule(value: float | None, default: float | None, expected: float | None) -> None:
    assert normalize_timeout(value, default=default) == expected


@pytest.mark.parametrize("value", [-1, -1e-9, math.nan, math.inf, -math.inf, MAX_TIMEOUT + 1, 1e308, True, "5"])
def test_bad_timeouts_are_invalid_arguments(value: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        normalize_timeout(value, default=None)
    err = info.value
    assert isinstance(err, ValueError) and not isinstance(err, BackendUnavailable)
    assert err.argument == "timeout" and "0 for no limit" in err.hint


def test_request_sets_deadline_and_encodes_stdin() -> None:
    request = ExecRequest.build(["echo", "x"], timeout=5, stdin="é")
    assert request.command == ("echo", "x") and request.stdin == "é".encode()
    assert request.deadline is not None and abs(request.deadline - request.start - 5) < 1e-6
    assert 0 < (request.remaining() or 0) <= 5 and not request.expired()
    assert len(request.exec_id) == 32 and request.exec_id != ExecRequest.build("true").exec_id


@pytest.mark.parametrize("name", ["X;echo INJECTED;", "1A", "A-B", "", "é"])
def test_env_names_must_be_identifiers(name: str) -> None:
    with pytest.raises(InvalidArgument, match="not a valid environment variable name"):
        check_env({name: "v"})


def test_env_error_never_echoes_values() -> None:
    with pytest.raises(InvalidArgument) as info:
        check_env({"GOOD": "secret-value", "BAD\0": "other-secret"})
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"command": "a\0b"},
        {"command": ["a", "b\0"]},
        {"command": "x", "cwd": "/\0"},
        {"command": "x", "env": {"A": "\0"}},
    ],
)
def test_nul_bytes_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument, match="NUL"):
        ExecRequest.build(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [[], b"echo", 42])
def test_malformed_commands(command: object) -> None:
    with pytest.raises(InvalidArgument):
        ExecRequest.build(command)  # type: ignore[arg-type]


def test_file_payload_checks_size() -> None:
    assert file_payload("p", "é", 10) == "é".encode()
    with pytest.raises(FileTooLarge):
        file_payload("p", b"x" * 11, 10)


def test_collector_caps_streams_and_mutes_callback() -> None:
    seen: list[tuple[str, bytes]] = []
    collector = OutputCollector(10, "head_tail", lambda s, c: seen.append((s, c)))
    collector.write("stdout", b"0123456789abcdef")
    collector.mute()
    collector.write("stderr", b"late")
    result = collector.result(ExecRequest.build("x", timeout=1), 3, timed_out=True)
    assert seen == [("stdout", b"0123456789abcdef")]
    assert result.exit_code == 124 and result.timed_out and result.stderr == b"late"
    assert result.stdout_truncation is not None and result.stdout_truncation.total == 16


@pytest.mark.parametrize("user", ["root", "0", "nobody", "1000:1000", "app:staff", "svc-1.x", "host$"])
def test_well_formed_users_are_kept(user: str) -> None:
    assert ExecRequest.build("id", user=user).user == user


@pytest.mark.parametrize("user", ["", " ", "a b", "root\0", "-r", ".hidden", "x;id", "a:b:c", "a:", 1000])
def test_malformed_users_are_refused_naming_the_argument(user: object) -> None:
    with pytest.raises(InvalidArgument, match="user"):
        ExecRequest.build("id", user=user)  # type: ignore[arg-type]


def test_no_user_means_the_sandbox_user() -> None:
    assert ExecRequest.build("id").user is None


def test_unset_env_is_kept_as_checked_names_once_each() -> None:
    request = ExecRequest.build("true", unset_env=["HOME", "PAGER", "HOME"])
    assert request.unset_env == ("HOME", "PAGER")
    assert ExecRequest.build("true", unset_env=[]).unset_env is None
    assert ExecRequest.build("true").unset_env is None


@pytest.mark.parametrize(
    ("names", "env"), [("HOME", None), (["1X"], None), (["A B"], None), ([b"A"], None), (["A"], {"A": "1"})]
)
def test_bad_unset_env_is_refused(names: object, env: dict[str, str] | None) -> None:
    with pytest.raises(InvalidArgument, match="unset_env"):
        ExecRequest.build("true", env=env, unset_env=names)  # type: ignore[arg-type]


def test_process_command_unsets_first_in_the_shell_or_around_the_argv() -> None:
    assert ExecRequest.build("echo hi").process_command("/bin/sh") == "echo hi"
    text = ExecRequest.build("echo hi", unset_env=["A", "B"]).process_command("/bin/sh")
    assert text == "unset -v A B\necho hi"
    argv = ExecRequest.build(["printenv", "A"], unset_env=["A"]).process_command("/bin/bash")
    assert argv == ("/bin/bash", "-c", 'unset -v A; exec "$@"', "envlayer", "printenv", "A")


@pytest.mark.parametrize("mode", ["session", "oneshot"])
def test_local_unset_env_reaches_the_command_in_both_modes(mode: str, tmp_path: object) -> None:
    from envlayer.local.backend import LocalEnvironment

    options = LocalEnvironment.Options(cwd=str(tmp_path), exec_mode=mode, env={"EL_CONFIGURED": "yes"})
    with LocalEnvironment(options) as env:
        shown = env.exec(["sh", "-c", 'echo "${EL_CONFIGURED-gone}"'], unset_env=["EL_CONFIGURED"])
        assert shown.stdout_text == "gone\n"
        assert env.exec('echo "${EL_CONFIGURED-gone}"').stdout_text == "yes\n"
