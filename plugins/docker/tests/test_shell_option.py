"""A `shell` option naming no program in the container is the user's error
(:class:`InvalidArgument`, exit 125 with what to do), not an outage or a bug."""

from __future__ import annotations

from typing import Any

import pytest

from envlayer.errors import InvalidArgument


def test_a_shell_missing_in_the_container_is_a_user_error(make_env: Any, cli: Any, profile: str) -> None:
    with pytest.raises(InvalidArgument, match="the shell /bin/nonexist does not exist in the sandbox"):
        make_env(shell="/bin/nonexist").exec("true")
    prof = f"{profile}-shell"
    try:
        out = cli("exec", "--no-broker", "-o", "shell=/bin/nonexist", "true", profile=prof)
        assert out.returncode == 125 and "does not exist in the sandbox" in out.stderr
    finally:
        cli("rm", "--all", "--force", "--purge", "-y", profile=prof)
