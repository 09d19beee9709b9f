"""The ``envlayer`` command line's parser, shared by the in-process CLI
(:mod:`envlayer.cli`) and the session broker (:mod:`envlayer.cli.broker.server`), which
parses ``exec`` exactly as the CLI does.

The commands are a table (:data:`COMMANDS`): name, help, examples, exit codes, the groups
of shared flags it takes and its own arguments. The parser records the command's name
in ``args.cmd``; :mod:`envlayer.cli` maps names to the functions that run them (the
snapshot and bench commands, registered by their own modules, set ``args.func``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envlayer import __version__
from envlayer.cli.completion import SHELLS
from envlayer.cli.task_sandbox import REPLACE_HELP
from envlayer.options import BaseOptions, default_of, option_fields

DEFAULT_TIMEOUT: float = default_of(option_fields(BaseOptions)["timeout"][1])
"""The ``timeout`` option's default: what ``exec`` waits when nothing sets it."""

DEBUG_HELP = "print tracebacks of errors and DEBUG logs of the envlayer loggers on stderr"
COMMON_EXITS = "exit codes: 0 success, 1 failure (reason and hint on stderr), 2 usage error"
SWEEP_FLAGS = ("settings", "json", "verbose")
LISTING_FLAGS = (*SWEEP_FLAGS, "listing")
"""The flags of the commands that print a listing (``ls``, ``reap``, ``snapshots``)."""


def seconds(text: str) -> float:
    """A ``SECONDS`` argument: a finite number >= 0 (argparse names the flag on error)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text!r}")
    return value


def _shared_flags(parser_class: type[argparse.ArgumentParser]) -> dict[str, argparse.ArgumentParser]:
    """The flags several commands take, in groups (parent parsers): ``settings``
    (``--config``, ``--backend``, ``--profile``, ``-o``), ``json``, ``verbose``, ``debug``.
    A command takes only the groups it uses, so a flag it would ignore is refused."""
    settings = parser_class(add_help=False)
    settings.add_argument(
        "--config", metavar="PATH", help="read only this config file (default: user and ./envlayer.toml)"
    )
    settings.add_argument("--backend", metavar="NAME", help="backend to use (overrides config and $ENVLAYER_BACKEND)")
    settings.add_argument(
        "--profile", metavar="NAME", help="profile namespace (overrides config and $ENVLAYER_PROFILE)"
    )
    settings.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="backend option override, VALUE read as the option's type (repeatable; see `backends --options`)",
    )
    json_flag = parser_class(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print machine-readable JSON")
    verbose = parser_class(add_help=False)
    verbose.add_argument("-v", "--verbose", action="store_true", help="also report backends lacking the capability")
    listing = parser_class(add_help=False)
    listing.add_argument("-q", "--quiet", action="store_true", help="print only the ids, one a line")
    listing.add_argument(
        "--format", choices=["table", "json"], default="table", help="table (default), or json (same as --json)"
    )
    debug = parser_class(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return {"settings": settings, "json": json_flag, "verbose": verbose, "listing": listing, "debug": debug}


def subcommand(
    sub: Any,
    name: str,
    shared: dict[str, argparse.ArgumentParser],
    help: str,
    examples: str,
    exits: str = "",
    *,
    flags: Sequence[str] = ("settings", "json"),
) -> Any:
    """A subcommand taking the ``flags`` groups of ``shared`` (and ``--debug``), whose
    help ends with examples and its exit codes."""
    p = sub.add_parser(
        name,
        parents=[shared[group] for group in (*flags, "debug")],
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=f"examples:\n{examples}\n\n{exits or COMMON_EXITS}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(command_parser=p)
    return p


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that arguments a command does not take are
    reported with that command's usage (``envlayer exec --foo ls``), not the top level's.

    A command whose last positional is optional names it in ``late_positional``: argparse
    takes every positional of a run together, so in ``snapshots rm --backend docker ID``
    the optional ID is matched (empty) with ``rm`` and ID is left over; one such leftover
    word fills it (``parse_intermixed_args`` would, but it does not support subcommands)."""
    args, extra = parser.parse_known_args(argv)
    late = getattr(args, "late_positional", None)
    if late and len(extra) == 1 and not extra[0].startswith("-") and getattr(args, late) is None:
        setattr(args, late, extra.pop())
    if extra:
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "format", None) == "json":
        args.json = True
    return args


# --- each command's own arguments ----------------------------------------------------


def _backends_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--options",
        nargs="*",
        metavar="BACKEND",
        help="also list the options (name, type, default) of every backend, or with their descriptions of the "
        "BACKENDs named",
    )


EXEC_DESCRIPTION = (
    "Run CMD in the sandbox of TASK. Everything after exec's own options is the command: one word is a "
    "shell string, several are an argv list run without a shell. Put exec's options before CMD. "
    f"The command is killed after {DEFAULT_TIMEOUT:g} s unless --timeout or the timeout option says otherwise."
)


def _exec_arguments(p: argparse.ArgumentParser) -> None:
    p.description = EXEC_DESCRIPTION
    p.add_argument("--task", default="default", help="task id (default: %(default)s)")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="seconds before the command's process tree is killed (exit 124); 0: no limit "
        f"(default: the backend's timeout option, {DEFAULT_TIMEOUT:g} s unless configured)",
    )
    p.add_argument("--cwd", help="working directory for this command")
    p.add_argument(
        "-u",
        "--user",
        metavar="NAME[:GROUP]",
        help="run this command as another user of the sandbox (backends with exec_as_user: docker)",
    )
    p.add_argument(
        "-e",
        "--env",
        action="append",
        metavar="NAME[=VALUE]",
        help="environment variable; NAME alone takes the value from envlayer's environment, keeping it out of "
        "the process list (repeatable)",
    )
    p.add_argument(
        "--env-file", action="append", metavar="FILE", help="NAME=VALUE (or NAME) lines, # comments (repeatable)"
    )
    p.add_argument("-i", "--stdin", action="store_true", help="forward this process's stdin to the command")
    p.add_argument(
        "--rm",
        action="store_true",
        help="remove the sandbox and its durable workspace afterwards, even in persist mode (like docker run --rm)",
    )
    p.add_argument("--replace", action="store_true", help=REPLACE_HELP)
    p.add_argument(
        "--fresh",
        action="store_true",
        help="run outside the task's session shell, in a new environment (as --no-broker does on every call)",
    )
    p.add_argument(
        "--no-broker",
        action="store_true",
        help="run in this process, not through the session broker (also: ENVLAYER_BROKER=0, broker = false)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD ...", help="the command and its arguments")


def _broker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["status", "stop", "serve"])
    p.add_argument(
        "--all", action="store_true", dest="every", help="stop: every broker of this user, not only this installation's"
    )


def _ls_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all-profiles", action="store_true", help="list every profile, not only the current one")


def _reap_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument(
        "--max-age",
        type=seconds,
        metavar="SECONDS",
        help="only sandboxes stopped longer than this (default 2 x max(60, lifetime_seconds))",
    )


def _rm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "tasks", nargs="*", metavar="TASK", help="a task id, or a sandbox's ID or NAME, as `envlayer ls` shows them"
    )
    p.add_argument("--all", action="store_true", help="every task of the current profile (asks first on a terminal)")
    p.add_argument("-y", "--yes", action="store_true", help="with --all: do not ask (needed without a terminal)")
    p.add_argument("--force", action="store_true", help="also remove it while it is running")
    p.add_argument("--purge", action="store_true", help="also delete the task's durable data (Docker workspace)")


def _completion_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS)


@dataclass(frozen=True)
class Command:
    """One row of :data:`COMMANDS`."""

    name: str
    help: str
    """One line for ``envlayer --help``; also the command's description."""
    examples: str
    exits: str = ""
    """Its exit codes for the help's last line (default :data:`COMMON_EXITS`)."""
    flags: tuple[str, ...] = ("settings", "json")
    """The groups of shared flags it takes (see :func:`_shared_flags`)."""
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds its own arguments to its parser."""


EXEC_EXITS = (
    "exit codes: the command's own; 124 timed out (its process tree was killed); 130 interrupted;\n"
    "125 envlayer failed (unknown backend, bad config, backend unavailable, the task's sandbox was created with\n"
    "other options and --replace was not given), reason and hint on stderr"
)
EXEC_EXAMPLES = (
    "  envlayer exec ls -la /tmp                         # the rest of the line is the command\n"
    "  envlayer exec 'make test | tail -3'               # one word: a shell string\n"
    "  envlayer exec --task t1 --timeout 60 -- pytest -x  # -- is accepted before CMD\n"
    "  envlayer exec -e API_TOKEN --env-file .env -- ./deploy   # values from your environment / a file\n"
    "  envlayer exec --backend docker -o image=python:3.11-slim python -V\n"
    "  envlayer exec --backend docker -u nobody -- id -u         # as another user of the container"
)
COMMAND_MODULES = ("envlayer.cli.snapshot", "envlayer.cli.copy", "envlayer.cli.shell", "envlayer.cli.mcp")
"""Modules that register their own commands (``add_parsers(sub, shared, subcommand)``,
setting ``args.func``); a module's name in :data:`COMMANDS` says where they go."""

COMMANDS: tuple[Command | str, ...] = (
    Command(
        "backends",
        "list installed backends, their package and capabilities",
        "  envlayer backends\n  envlayer backends --options              # every option, its type and default\n"
        "  envlayer backends --options docker       # docker's options, each with what it does",
        flags=("json",),
        arguments=_backends_arguments,
    ),
    Command("exec", "run a command in the sandbox of a task", EXEC_EXAMPLES, EXEC_EXITS, arguments=_exec_arguments),
    Command(
        "broker",
        "show or stop your session broker (the background process behind `envlayer exec`)",
        "  envlayer broker status          # pid, uptime, socket, environments held\n"
        "  envlayer broker stop            # stop it (running commands are interrupted)\n"
        "  envlayer broker serve           # run the broker in the foreground (debugging)",
        flags=("json",),
        arguments=_broker_arguments,
    ),
    Command(
        "ls",
        "list managed sandboxes (backends that can list)",
        "  envlayer ls\n  envlayer ls --all-profiles --json",
        flags=LISTING_FLAGS,
        arguments=_ls_arguments,
    ),
    Command(
        "reap",
        "remove sandboxes left by dead processes",
        "  envlayer reap --dry-run         # what would be removed\n  envlayer reap --backend docker --max-age 600",
        "exit codes: 0 success, 1 a backend's sweep failed (the others still ran), 2 usage error",
        flags=LISTING_FLAGS,
        arguments=_reap_arguments,
    ),
    Command(
        "rm",
        "remove the sandboxes of tasks",
        "  envlayer rm build-42 build-43\n"
        "  envlayer rm build-42 --force --purge   # running, and its durable workspace\n"
        "  envlayer rm --all -y                   # every stopped sandbox of the profile, without asking",
        "exit codes: 0 all removed, 1 a task was not removed (the reason on stderr) or a backend failed, 2 usage error",
        flags=SWEEP_FLAGS,
        arguments=_rm_arguments,
    ),
    *COMMAND_MODULES,
    Command(
        "doctor",
        "check whether each backend works here, and how to fix it",
        "  envlayer doctor\n  envlayer doctor --backend docker --json",
        "exit codes: 0 the selected backend works, 1 it (or the configuration) is broken, 2 usage error",
    ),
    Command(
        "config",
        "show the effective configuration and where each value came from",
        "  envlayer config\n  envlayer config --backend docker --json   # env values and secret options masked",
    ),
    Command(
        "completion",
        "print a shell completion script",
        "  source <(envlayer completion bash)    # in ~/.bashrc\n  source <(envlayer completion zsh)     # in ~/.zshrc",
        flags=(),
        arguments=_completion_arguments,
    ),
)

TOP_EPILOG = (
    "examples:\n  envlayer exec uname -a\n  envlayer exec --backend docker -o image=python:3.11-slim "
    "-o pull=true --task t1 python -V\n  envlayer doctor\n\nRun `envlayer COMMAND --help` for a command's options, "
    "examples and exit codes."
)


def build_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The CLI's parser (parse with :func:`parse_arguments`); ``parser_class`` (for it and
    every subcommand) lets the broker parse without printing or exiting."""
    import importlib

    from envlayer.cli.bench import add_bench_parser

    shared = _shared_flags(parser_class)
    parser = parser_class(
        prog="envlayer",
        description="Run commands and manage sandboxes for AI agents.",
        epilog=TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"envlayer {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for command in COMMANDS:
        if not isinstance(command, Command):  # one of COMMAND_MODULES
            importlib.import_module(command).add_parsers(sub, shared, subcommand)
            continue
        p = subcommand(sub, command.name, shared, command.help, command.examples, command.exits, flags=command.flags)
        if command.arguments is not None:
            command.arguments(p)
    add_bench_parser(sub)
    return parser
