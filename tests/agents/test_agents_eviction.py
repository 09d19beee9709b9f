"""A backend that becomes unavailable is evicted; the next call rebuilds it."""

from __future__ import annotations

import pytest
from envlayer_toy import ToyEnvironment

from envlayer.errors import BackendUnavailable
from envlayer.tools import ToolRegistry


class FlakyToy(ToyEnvironment):
    """The toy plugin, whose connection can be 'lost'."""

    name = "flaky"
    built = 0

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        type(self).built += 1
        self.lost = False

    def exec(self, command, **kwargs):  # type: ignore[no-untyped-def,override]
        if self.lost:
            raise BackendUnavailable("connection to the sandbox lost", hint="check the daemon")
        return super().exec(command, **kwargs)


@pytest.fixture
def manager(make_manager):  # type: ignore[no-untyped-def]
    FlakyToy.built = 0
    return make_manager(backend="flaky", backends={"flaky": FlakyToy})


def test_backend_unavailable_evicts_and_next_get_rebuilds(manager) -> None:  # type: ignore[no-untyped-def]
    env = manager.get("t")
    env.write_file("note.txt", "x")
    env.environment.lost = True
    with pytest.raises(BackendUnavailable):
        env.exec("true")
    assert env.closed and env.environment.closed  # best-effort cleanup ran (toy removed its dir)
    assert manager.active_keys() == []
    fresh = manager.get("t")
    assert fresh is not env and FlakyToy.built == 2
    assert fresh.exec("echo back").stdout_text == "back\n"


def test_tool_call_reports_retry_then_succeeds(manager) -> None:  # type: ignore[no-untyped-def]
    tools = ToolRegistry(manager)
    assert tools.run_tool("terminal", {"command": "echo one"}, "t")["exit_code"] == 0
    manager.get("t").environment.lost = True
    result = tools.run_tool("terminal", {"command": "echo two"}, "t")
    assert result["error"]["type"] == "backend_unavailable"
    assert result["error"]["hint"].startswith("retry")
    again = tools.run_tool("terminal", {"command": "echo three"}, "t")
    assert again == {"exit_code": 0, "output": "three\n", "duration": again["duration"], "shell_state": "reset"}
    assert FlakyToy.built == 2
