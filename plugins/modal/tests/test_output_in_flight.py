"""A one-shot command's whole output is returned even when it arrives well after the exit
code: the SDK reads the two over separate RPCs, so under load the exit code can come first
by more than any fixed grace period (the conformance test
``test_output_over_cap_is_truncated_with_metadata`` lost output that way at load 14)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.modal

SIZE = 600_000
"""Ten of the fake's slowed 64 KiB messages, a second of delivery after the exit."""


def test_output_delivered_after_the_exit_code_is_kept(make_env: Any, faults: Any) -> None:
    env = make_env(exec_mode="oneshot")
    env.exec("true")  # the sandbox exists before the delivery is slowed
    faults(stdio_delay=0.1)
    result = env.exec(f"head -c {SIZE} /dev/zero; echo done >&2")
    assert result.exit_code == 0, result
    assert len(result.stdout) == SIZE
    assert result.stderr == b"done\n"
