"""One coercion engine for configuration keys and backend options: text read by the
declared type, the same rules and messages for both, no value of another entry echoed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from envlayer.coercion import coerce, parse_text, shown
from envlayer.config import load_settings
from envlayer.errors import ConfigError
from envlayer.options import BaseOptions, build_options, option


@pytest.mark.parametrize(
    ("tp", "text", "value"),
    [
        (str, "2024", "2024"),
        (int, "2048", 2048),
        (float, "1.5", 1.5),
        (bool, "yes", True),
        (bool, "off", False),
        (str | None, "", None),
        (float | None, "7", 7.0),
        (list[str], "a, b", ["a", "b"]),
        (list[str], '["a,b"]', ["a,b"]),
        (dict[str, str], '{"K": "v"}', {"K": "v"}),
        (Literal["x", "y"], "y", "y"),
    ],
)
def test_text_is_read_by_the_declared_type(tp, text, value) -> None:
    assert coerce(tp, parse_text(tp, text)) == (True, value)


@pytest.mark.parametrize(("tp", "text"), [(int, "1e3"), (bool, "maybe"), (float, "soon"), (Literal["x"], "z")])
def test_text_that_does_not_fit_is_refused(tp, text) -> None:
    assert coerce(tp, parse_text(tp, text))[0] is False


def test_a_bool_is_never_a_number() -> None:
    assert coerce(int, True)[0] is False and coerce(float, False)[0] is False


def test_config_keys_and_options_share_the_rules_and_messages(tmp_path) -> None:
    with pytest.raises(ConfigError) as core:
        load_settings(cwd=tmp_path, env={"ENVLAYER_ORPHAN_REAPER": "maybe"})
    with pytest.raises(ConfigError) as opt:
        load_settings(cwd=tmp_path, env={}).options_for(
            "local", BaseOptions, env={"ENVLAYER_LOCAL_MAX_OUTPUT_BYTES": "lots"}
        )
    assert str(core.value).startswith("$ENVLAYER_ORPHAN_REAPER: orphan_reaper: expected true or false, got a string")
    assert str(opt.value).startswith(
        "$ENVLAYER_LOCAL_MAX_OUTPUT_BYTES: max_output_bytes: expected an integer, got a string 'lots'"
    )


def test_option_texts_through_the_api(tmp_path) -> None:
    settings = load_settings(cwd=tmp_path, env={}, option_texts={"cwd": "2024", "timeout": "5"})
    options = settings.options_for("local", BaseOptions)
    assert (options.cwd, options.timeout) == ("2024", 5.0)
    assert settings.option_sources("local") == {"cwd": "-o", "timeout": "-o"}
    with pytest.raises(ConfigError, match=r"^-o: timeout: expected a number or None, got a string 'soon'"):
        load_settings(cwd=tmp_path, env={}, option_texts={"timeout": "soon"}).options_for("local", BaseOptions)


@dataclass(kw_only=True)
class _WithSecret(BaseOptions):
    token: str | None = option(None, doc="an API token", secret=True)


def test_errors_do_not_echo_secrets_or_other_entries() -> None:
    with pytest.raises(ConfigError) as env_error:
        build_options(BaseOptions, {"env": {"API_TOKEN": "tok-1", "BAD": 3}})
    assert "'BAD' is an integer" in str(env_error.value) and "tok-1" not in str(env_error.value)
    with pytest.raises(ConfigError) as secret_error:
        build_options(_WithSecret, {"token": 12345})
    assert "12345" not in str(secret_error.value) and "value hidden" in str(secret_error.value)
    assert shown(list[str], ["ok", 7, "also-secret"]) == "a list whose item 1 is an integer"
