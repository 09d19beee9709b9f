"""The one comparison of recorded and requested sandbox options
(:mod:`envlayer.sandbox.recorded_options`): what is recorded, what counts as a difference,
what a later call takes as defaults, and the one decision on a mismatch."""

from __future__ import annotations

import logging

import pytest

from envlayer.sandbox.options import ContainerOptions
from envlayer.sandbox.recorded_options import (
    OptionChange,
    SandboxOptionsDiffer,
    decode,
    defaults_from,
    encode,
    option_changes,
    record_of,
    settle_mismatch,
)

NAMES = ("cwd", "env", "shell")


def test_the_record_withholds_credential_values_and_round_trips() -> None:
    options = ContainerOptions(cwd="/w", env={"GITHUB_TOKEN": "ghp_x", "MODE": "fast"})
    record = record_of(options, NAMES)
    assert record == {"cwd": "/w", "env": {"GITHUB_TOKEN": None, "MODE": "fast"}, "shell": "/bin/sh"}
    assert "ghp_x" not in encode(record)
    assert decode(encode(record)) == record
    assert decode("not json") is None and decode("[1]") is None and decode(None) is None


def test_env_is_compared_by_names_and_unknown_keys_are_skipped() -> None:
    old = {"cwd": "/a", "env": {"A": "1"}, "only_old": 1}
    assert option_changes(old, {"cwd": "/a", "env": {"A": "2"}}) == []
    assert option_changes(old, {"cwd": "/b", "env": {"B": "1"}, "only_new": 2}) == [
        OptionChange("cwd", "/a", "/b"),
        OptionChange("env", ["A"], ["B"]),
    ]
    assert str(OptionChange("memory_mb", 0, 512)) == "memory_mb: 0 -> 512"


def test_defaults_leave_explicit_options_and_withheld_values_out() -> None:
    recorded = {"cwd": "/a", "image": "x", "env": {"TOKEN_SECRET": None, "MODE": "fast"}}
    assert defaults_from(recorded, {"image"}) == {"cwd": "/a", "env": {"MODE": "fast"}}


def test_a_mismatch_raises_under_error_and_is_announced_under_recreate(caplog: pytest.LogCaptureFixture) -> None:
    found = encode({"cwd": "/a"})
    with pytest.raises(SandboxOptionsDiffer) as info:
        settle_mismatch(what="box", mode="error", found=found, requested={"cwd": "/b"}, logger=logging.getLogger("t"))
    assert info.value.changes == [OptionChange("cwd", "/a", "/b")] and info.value.recorded == {"cwd": "/a"}
    assert 'box was created with different options: cwd: "/a" -> "/b"' in str(info.value)
    with caplog.at_level(logging.WARNING, logger="t"):
        notice = settle_mismatch(
            what="box", mode="recreate", found=found, requested={"cwd": "/b"}, logger=logging.getLogger("t")
        )
    assert "was replaced" in notice and 'cwd: "/a" -> "/b"' in notice
    assert [r.getMessage() for r in caplog.records] == [notice]
    unrecorded = settle_mismatch(
        what="box", mode="recreate", found=None, requested={"cwd": "/b"}, logger=logging.getLogger("t")
    )
    assert "not recorded" in unrecorded
