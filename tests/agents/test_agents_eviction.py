"""A backend that becomes unavailable is evicted; the next call rebuilds it."""

from __future__ import annotations

import pytest
from envlayer_toy import ToyEnvironment

from envlayer.agents.tools import ToolRegistry
from envlayer.errors import BackendUnavailable, InvalidArgument


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


def test_bad_input_is_not_an_outage_nothing_is_evicted(manager) -> None:  # type: ignore[no-untyped-def]
    env = manager.get("t")
    env.write_file("note.txt", "kept")
    for call in (
        lambda: env.exec("echo a\0b"),
        lambda: env.exec("true", timeout=float("nan")),
        lambda: env.exec("true", env={"X;echo INJECTED;": "1"}),
        lambda: env.read_file("a\0b"),
        lambda: env.write_file("a\0b", "x"),
    ):
        with pytest.raises(InvalidArgument):
            call()
    assert manager.get("t") is env and not env.closed and FlakyToy.built == 1
    assert env.read_file("note.txt") == b"kept"
    tools = ToolRegistry(manager)
    result = tools.run_tool("read_file", {"path": "a\0b"}, "t")
    assert result["error"]["type"] == "bad_arguments" and "NUL" in result["error"]["message"]
    assert manager.get("t") is env and FlakyToy.built == 1
