"""The local backend's agent-safe environment: credentials stay out, PAGER is cat."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterator

import pytest

from envlayer.local.backend import LocalEnvironment, LocalOptions
from envlayer.sandbox.command_env import CREDENTIAL_PATTERNS, inherited_environment, is_credential


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "anthropic_api_key",
        "GITHUB_TOKEN",
        "HF_TOKEN",
        "MY_SECRET",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_CLIENT_SECRET",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "DAYTONA_API_KEY",
    ],
)
def test_credential_names_are_recognised(name: str) -> None:
    assert is_credential(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "VIRTUAL_ENV", "TOKENIZERS_PARALLELISM"])
def test_ordinary_names_pass(name: str) -> None:
    assert not is_credential(name)


def test_credential_patterns_match_as_fnmatch_matches_each() -> None:
    """The patterns are matched with one compiled expression; it must agree with
    ``fnmatch.fnmatchcase`` on each upper-cased pattern, for globs with classes,
    negations and question marks, names in any case and names with newlines."""
    patterns = (*CREDENTIAL_PATTERNS, "X?_[AB]*", "[!Q]ZZ", "LIT.*", "a|b")
    names = ["my_api_key", "AWS", "AWS_", "aws_region", "X1_Apple", "X12_A", "QZZ", "AZZ", "ZZ", "LIT.X", "LITAX"]
    names += ["A|B", "a", "TOKEN", "_TOKEN", "GH_TOKEN\n", "GH_TOKEN\nX", "PATH", "netrc", ""]
    for name in names:
        expected = any(fnmatch.fnmatchcase(name.upper(), pattern.upper()) for pattern in patterns)
        assert is_credential(name, patterns) is expected, name
    assert not is_credential("GH_TOKEN", ())


def test_inherited_environment_forwards_by_name_only() -> None:
    environ = {"PATH": "/bin", "OPENAI_API_KEY": "sk-1", "GH_TOKEN": "g"}
    assert inherited_environment(environ, blocklist=CREDENTIAL_PATTERNS, forward=[]) == {"PATH": "/bin"}
    assert inherited_environment(environ, blocklist=CREDENTIAL_PATTERNS, forward=["GH_TOKEN"]) == {
        "PATH": "/bin",
        "GH_TOKEN": "g",
    }
    assert inherited_environment(environ, blocklist=[], forward=[]) == environ


def _env_of(env: LocalEnvironment) -> dict[str, str]:
    out = env.exec(["env", "-0"]).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


@pytest.fixture
def local() -> Iterator[Callable[..., LocalEnvironment]]:
    """Makes local environments (options as keywords) and cleans them all up after the test."""
    made: list[LocalEnvironment] = []

    def make(**options: object) -> LocalEnvironment:
        made.append(LocalEnvironment(LocalOptions(**options)))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for env in made:
        env.cleanup()


def test_api_key_in_the_callers_environment_is_not_visible_to_a_local_command(monkeypatch, local) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("SERVICE_TOKEN", "tok-must-not-leak")
    monkeypatch.setenv("ENVLAYER_TEST_PLAIN", "plain")
    env = local()
    seen = _env_of(env)
    assert "OPENAI_API_KEY" not in seen and "SERVICE_TOKEN" not in seen
    assert seen["ENVLAYER_TEST_PLAIN"] == "plain" and seen["PATH"] == os.environ["PATH"]
    shell = env.exec('echo "[$OPENAI_API_KEY]"').stdout_text
    assert shell == "[]\n"
    # explicit opt-in forwarding, and per-environment / per-call values, still work
    forwarded = local(forward_env=["SERVICE_TOKEN"], env={"OWN_API_KEY": "set-by-config"})
    seen = _env_of(forwarded)
    assert seen["SERVICE_TOKEN"] == "tok-must-not-leak" and seen["OWN_API_KEY"] == "set-by-config"
    assert "OPENAI_API_KEY" not in seen
    assert _env_of(local(env_blocklist=[]))["OPENAI_API_KEY"] == "sk-must-not-leak"


def test_pager_is_cat_unless_configured(monkeypatch, local) -> None:
    monkeypatch.setenv("PAGER", "less")
    seen = _env_of(local())
    assert seen["PAGER"] == "cat" and seen["GIT_PAGER"] == "cat"
    assert _env_of(local(env={"PAGER": "more"}))["PAGER"] == "more"
    assert local().exec("echo $PAGER", env={"PAGER": "most"}).stdout_text == "most\n"
