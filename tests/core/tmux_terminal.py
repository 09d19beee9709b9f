"""Drive a command in a real terminal: a private tmux server (``tmux -L``, its socket in a
temporary ``TMUX_TMPDIR`` removed at the end), keys sent with ``send-keys``, the screen read
with ``capture-pane``, polled until a deadline."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


class Tmux:
    """One tmux session on its own server socket."""

    def __init__(self) -> None:
        self.server = f"envlayer-test-{uuid.uuid4().hex[:8]}"
        self.socket_dir = tempfile.mkdtemp(prefix="envlayer-tmux-")
        """``TMUX_TMPDIR``: tmux would otherwise leave ``/tmp/tmux-<uid>`` behind."""

    def tmux(self, *args: str, check: bool = True) -> str:
        return subprocess.run(
            ["tmux", "-L", self.server, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
            env={**os.environ, "TMUX_TMPDIR": self.socket_dir},
        ).stdout

    def send(self, keys: str) -> None:
        self.tmux("send-keys", "-t", "s", keys, "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-S", "-", "-t", "s")

    def wait_for(self, pattern: str, deadline: float = 60) -> str:
        """The screen once a line matches ``pattern`` (a regex); fails after ``deadline`` s."""
        text = self.appears(pattern, deadline)
        if text is None:
            pytest.fail(f"no line matching {pattern!r} on the screen:\n{self.screen()}")
        return text

    def wait_for_prompt(self, prompt: str, deadline: float = 60) -> str:
        """The screen once ``prompt`` (a regex) ends its last line that is not blank: the
        shell waits for a command. A prompt higher up, left by an earlier command, does not
        count: keys sent before the new prompt shows are echoed by the terminal ahead of
        it, and the command's output then starts on the prompt's line, not a line of its own."""
        return self.wait_for(rf"{prompt}\s*\Z", deadline)

    def appears(self, pattern: str, deadline: float) -> str | None:
        """The screen once a line matches ``pattern``; None if none did within ``deadline`` s."""
        end = time.monotonic() + deadline
        while True:
            text = self.screen()
            if re.search(pattern, text, re.MULTILINE):
                return text
            if time.monotonic() > end:
                return None
            time.sleep(0.1)


@contextmanager
def terminal(argv: list[str], cwd: str, env: dict[str, str]) -> Iterator[Tmux]:
    """``argv`` running in an 80x24 tmux window; after it ends the window shows
    ``EXIT=<status>``, then ``TTY=cooked`` when it left the terminal in canonical mode
    with echo (restored from raw), until the server is killed (always, at the end)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is missing: apt-get install tmux (scripts/provision installs it)")
    t = Tmux()
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    restored = "stty -a | tr ' ;' '\\n\\n' | grep -qx icanon && stty -a | tr ' ;' '\\n\\n' | grep -qx echo"
    script = (
        f"cd {shlex.quote(cwd)} && env {exports} {shlex.join(argv)}; echo EXIT=$?; "
        f"{restored} && echo TTY=cooked; exec sleep 600"
    )
    try:
        t.tmux("new-session", "-d", "-s", "s", "-x", "80", "-y", "24", script)
        yield t
    finally:
        t.tmux("kill-server", check=False)
        shutil.rmtree(t.socket_dir, ignore_errors=True)
