"""Test helper: run a command and cancel it from another thread once it has printed."""

from __future__ import annotations

import threading
from typing import Any

from envlayer.cancel_token import CancelToken
from envlayer.environment import Command, Environment
from envlayer.result import ExecResult


def exec_cancelled_after_output(env: Environment, command: Command, **kwargs: Any) -> ExecResult:
    """``env.exec(command, cancel=token, **kwargs)`` where another thread cancels the
    token as soon as the first output chunk arrives (or after 30 s). Returns the result."""
    token = CancelToken()
    seen = threading.Event()

    def cancel_later() -> None:
        seen.wait(30)
        token.cancel()

    helper = threading.Thread(target=cancel_later, name="envlayer-test-cancel")
    helper.start()
    try:
        return env.exec(command, cancel=token, on_output=lambda stream, chunk: seen.set(), **kwargs)  # type: ignore[call-arg]
    finally:
        seen.set()
        helper.join()
