"""Commands and arguments over the SDK's 64 KiB exec-argument limit
(``ARG_MAX_BYTES`` in ``modal/sandbox/_common.py``) run, in both exec modes, instead of
failing with the SDK's ``InvalidError`` reported as "Modal failed, retry"."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.modal

BIG = 100_000


@pytest.mark.parametrize("exec_mode", ["oneshot", "session"])
def test_a_command_string_over_64_kib_runs(make_env: Any, exec_mode: str) -> None:
    env = make_env(exec_mode=exec_mode)
    result = env.exec(f"v={'x' * BIG}; echo ${{#v}}; cat", stdin=b"in")
    assert result.exit_code == 0, result
    assert result.stdout == f"{BIG}\nin".encode()


def test_an_argument_over_64_kib_runs_one_shot_and_leaves_no_file(make_env: Any) -> None:
    env = make_env(exec_mode="oneshot")
    result = env.exec(["sh", "-c", 'printf %s "$1" | wc -c; printf %s "$2"', "sh", "y" * BIG, 'it\'s "quoted"'])
    assert result.exit_code == 0, result
    assert result.stdout.split(b"\n") == [str(BIG).encode(), b'it\'s "quoted"']
    assert env.exec("ls -a /tmp | grep -c envlayer-cmd || true").stdout == b"0\n"
