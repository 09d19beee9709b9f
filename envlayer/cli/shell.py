"""``envlayer shell [--task ID]``: an interactive terminal in a task's sandbox, like
``docker exec -it``.

It runs in the calling process (not through the session broker) on the sandbox that
``envlayer exec --task ID`` uses. A backend offers a terminal with an
``open_terminal(rows, cols)`` method returning an object with ``fileno``, ``read``,
``write``, ``resize`` and ``close`` (see :class:`envlayer.local.terminal.PtyTerminal`
for the contract). This process's terminal is put in raw mode, keys and output are
relayed, window size changes (SIGWINCH) are passed on, and the terminal is restored on
exit, even on error. The exit status is the shell's.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import sys
import termios
import tty
from collections.abc import Callable
from typing import Any

from envlayer.cli.console import settings_of
from envlayer.cli.progress import progress
from envlayer.cli.task_sandbox import REPLACE_HELP, open_task_environment
from envlayer.errors import InvalidArgument

TERMINAL_BACKENDS = ("local", "docker", "ssh", "kubernetes", "modal", "daytona")
"""The built-in backends with ``open_terminal``, named when another one is refused."""


def _window_size() -> tuple[int, int]:
    size = os.get_terminal_size(sys.stdin.fileno())
    return size.lines, size.columns


def relay(terminal: Any, stdin_fd: int, stdout_fd: int) -> int:
    """Copy keys from ``stdin_fd`` to ``terminal`` and its output to ``stdout_fd`` until
    the shell ends, passing window size changes on; the shell's exit status."""
    wake_read, wake_write = os.pipe()  # SIGWINCH wakes the loop through this pipe
    os.set_blocking(wake_write, False)
    previous = signal.signal(signal.SIGWINCH, lambda *_: os.write(wake_write, b"w"))
    selector = selectors.DefaultSelector()
    selector.register(terminal.fileno(), selectors.EVENT_READ, "out")
    selector.register(stdin_fd, selectors.EVENT_READ, "in")
    selector.register(wake_read, selectors.EVENT_READ, "winch")
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "out":
                    data = terminal.read()
                    if not data:
                        return int(terminal.close())
                    os.write(stdout_fd, data)
                elif key.data == "in":
                    data = os.read(stdin_fd, 65536)
                    if not data:
                        selector.unregister(stdin_fd)
                        continue
                    terminal.write(data)
                else:
                    os.read(wake_read, 4096)
                    terminal.resize(*_window_size())
    finally:
        signal.signal(signal.SIGWINCH, previous)
        selector.close()
        os.close(wake_read)
        os.close(wake_write)


def cmd_shell(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InvalidArgument(
            "stdin",
            "`envlayer shell` needs a terminal on stdin and stdout",
            hint="run it in a terminal; to run a command without one: envlayer exec --task TASK -- CMD",
        )
    settings = settings_of(args)
    with progress(f"starting the {settings.backend} sandbox of task {args.task!r}"):
        env = open_task_environment(settings, args.task, replace=args.replace)
    try:
        opener = getattr(env, "open_terminal", None)
        if opener is None:
            raise InvalidArgument(
                "--backend",
                f"backend {env.name!r} cannot open an interactive terminal",
                hint=f"backends that can: {', '.join(TERMINAL_BACKENDS)}; or use `envlayer exec --task {args.task}`",
            )
        terminal = opener(*_window_size())
        saved = termios.tcgetattr(sys.stdin.fileno())
        try:
            tty.setraw(sys.stdin.fileno())
            return relay(terminal, sys.stdin.fileno(), sys.stdout.fileno())
        finally:
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
    finally:
        env.cleanup()


def add_parsers(sub: Any, shared: dict[str, argparse.ArgumentParser], make: Callable[..., Any]) -> None:
    """Register ``shell`` on ``sub`` (``make`` is the CLI's subcommand builder)."""
    p = make(
        sub,
        "shell",
        shared,
        "open an interactive terminal in a task's sandbox",
        "  envlayer shell --task t1\n  envlayer shell --backend docker --task t1",
        "exit codes: the shell's own exit status; 1 envlayer failed (no terminal, backend without one), "
        "2 usage error, 125 the task's sandbox was created with other options (see --replace)",
        flags=("settings",),
    )
    p.add_argument("--task", default="default", metavar="ID", help="the task whose sandbox to enter (default: default)")
    p.add_argument("--replace", action="store_true", help=REPLACE_HELP)
    p.set_defaults(func=cmd_shell)
