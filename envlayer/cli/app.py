"""The ``envlayer`` command line.

Commands: ``backends``, ``exec``, ``ls``, ``reap``, ``rm``, ``doctor``, ``config``,
``completion``, ``broker``, ``bench``; ``envlayer --version``. The ``envlayer`` script enters through
:func:`envlayer.cli.broker.client.main`, which hands ``exec`` to the session broker when it
can and calls :func:`main` otherwise.
Every command takes ``--debug``; the commands that read the configuration take
``--config``, ``--backend``, ``--profile``, ``-o``; all but ``completion`` take ``--json``;
the sweeps (``ls``, ``reap``, ``rm``) take ``-v``. A shared flag a command would ignore is
a usage error (exit 2), reported with the command's own usage. Exit codes: ``exec`` returns the command's own code (124
on timeout, 130 on interrupt) and 125 when envlayer itself failed; the other commands
return 0 on success, 1 on failure, 2 on a usage error. Every command returns 125 when a
backend plugin is broken (cannot be loaded, or raised something its contract does not
allow); ``--debug`` then also prints the traceback.

``--json`` output has one shape per object whatever the command: a failure is
``"error": {"type", "message", "hint"}`` (``null`` when there is none) on a backend entry
(``backends``, ``doctor``), a sweep outcome (``ls``, ``reap``, ``rm``) and an exec result.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from envlayer import __version__

from envlayer import dispatch as lifecycle
from envlayer.capabilities import (
    Capability,
    capabilities_of,
    declared_capabilities,
    defines_method_for,
    signature_problem,
)
from envlayer.cli.completion import SHELLS, completion_script
from envlayer.cli.table_cells import last_used_cell, size_cell
from envlayer.cli.exec_plan import (
    BROKEN_PIPE_EXIT_CODE,
    ENVLAYER_FAILURE,
    Console,
    error_object,
    exec_failed,
    json_text,
    plan_exec,
    release_after_exec,
    run_exec,
    silence_stdout,
)
from envlayer.cli.exec_plan import settings_of as _settings
from envlayer.config import CORE_KEYS, Settings
from envlayer.errors import (
    BackendConflict,
    BackendLoadError,
    BackendUnavailable,
    EnvlayerError,
    PluginError,
)
from envlayer.factory import backend_specs, load_configured_backend, open_environment
from envlayer.options import BaseOptions, default_of, masked, option_fields, type_name
from envlayer.discovery.plugin_calls import plugin_call
from envlayer.cli.progress import progress
from envlayer.discovery.backend_registry import backend_names, list_backends, load_backend, shadows_builtin

PLUGIN_FAILURES = (PluginError, BackendLoadError, BackendConflict)
"""Errors that mean a backend plugin is broken: exit code 125 from every command."""

DEFAULT_TIMEOUT: float = default_of(option_fields(BaseOptions)["timeout"][1])
"""The ``timeout`` option's default: what ``exec`` waits when nothing sets it."""

_debug = False
"""Set by ``--debug``: print tracebacks of the errors the CLI reports."""


def _error(exc: BaseException, prefix: str = "error") -> None:
    """Report ``exc`` on stderr (with its traceback under ``--debug``)."""
    if _debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(f"envlayer: {prefix}: {exc}", file=sys.stderr)


def _note(text: str) -> None:
    print(f"envlayer: note: {text}", file=sys.stderr)


def _print_json(data: Any) -> None:
    print(json_text(data))


def _exit_code_for(exc: EnvlayerError) -> int:
    return ENVLAYER_FAILURE if isinstance(exc, PLUGIN_FAILURES) else 1


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


# --- commands -------------------------------------------------------------------


def cmd_backends(args: argparse.Namespace) -> int:
    rows, payload = [], []
    for info in list_backends():
        entry: dict[str, Any] = {**info._asdict(), "error": None}
        if shadows_builtin(info):
            entry["error"] = {
                "type": "BackendConflict",
                "message": f"ignored: the name {info.name!r} belongs to the built-in backend",
                "hint": f"uninstall {info.distribution}, or ask its authors to register another name",
            }
            payload.append(entry)
            rows.append([info.name, info.distribution, info.version, entry["error"]["message"]])
            continue
        try:
            cls = load_backend(info.name)
            entry["capabilities"] = sorted(c.value for c in capabilities_of(cls))
            entry["declared"] = declared_capabilities(cls) is not None
            entry["unusable"] = _unusable(cls)
            if args.options:
                entry["options"] = {
                    name: {"type": type_name(tp), "default": default_of(f), "doc": f.metadata.get("doc", "")}
                    for name, (tp, f) in option_fields(cls.Options).items()
                }
        except EnvlayerError as exc:
            entry["error"] = error_object(exc)
        payload.append(entry)
        caps = ", ".join(entry.get("capabilities", [])) or "-"
        if entry["error"]:
            caps = f"unavailable: {entry['error']['message']}"
        elif not entry["declared"]:
            caps += " (introspected)"
        if entry.get("unusable"):
            caps += "; unusable: " + ", ".join(entry["unusable"])
        rows.append([info.name, info.distribution, info.version, caps])
    if args.json:
        _print_json(payload)
        return 0
    print(_table(rows, ["BACKEND", "PACKAGE", "VERSION", "CAPABILITIES"]))
    if args.options:
        for entry in payload:
            for name, spec in entry.get("options", {}).items():
                print(
                    f"\n[{entry['name']}] {name} ({spec['type']}, default {spec['default']!r})\n    {spec['doc']}",
                    end="",
                )
        print()
    return 0


def _unusable(cls: type) -> dict[str, str]:
    """Capabilities a backend declares or has a method for, whose signature the
    dispatcher cannot call, and why (the dispatcher falls back for these)."""
    declared = declared_capabilities(cls) or frozenset()
    out = {}
    for cap in Capability:
        if cap in declared or defines_method_for(cls, cap):
            problem = signature_problem(cls, cap)
            if problem is not None:
                out[cap.value] = problem
    return out


def cmd_exec(args: argparse.Namespace) -> int:
    console = Console.of_process(debug=_debug)
    try:
        plan = plan_exec(args, sys.stdin.buffer.read)
        with progress(f"starting the {plan.settings.backend} sandbox of task {args.task!r}"):
            env = open_environment(task_id=args.task, settings=plan.settings)
    except EnvlayerError as exc:
        return exec_failed(args, console, exc)
    return run_exec(args, plan, env, console, lambda: release_after_exec(env, args.rm, console))


def _selected_backends(args: argparse.Namespace, settings: Settings) -> list[str]:
    return [args.backend] if args.backend else backend_names()


def _sweep_targets(
    args: argparse.Namespace, settings: Settings
) -> tuple[list[lifecycle.BackendSpec], list[lifecycle.SweepOutcome]]:
    """The backends a sweep runs on, and an outcome for each one that cannot be loaded:
    an error when it was named with ``--backend``, else a note (a broken plugin the
    user did not ask for never fails the command)."""
    specs, failures = backend_specs(settings, _selected_backends(args, settings))
    outcomes = []
    for failure in failures:
        exc = failure.error
        if args.backend:
            outcomes.append(
                lifecycle.SweepOutcome(
                    failure.backend,
                    supported=True,
                    error=exc.message,
                    hint=exc.hint,
                    plugin_failure=isinstance(exc, PLUGIN_FAILURES),
                )
            )
        else:
            note = f"backend {failure.backend!r} skipped: {exc.message}"
            outcomes.append(lifecycle.SweepOutcome(failure.backend, supported=False, note=note))
    return specs, outcomes


def _outcome_json(outcome: lifecycle.SweepOutcome) -> dict[str, Any]:
    data = dataclasses.asdict(outcome)
    hint = data.pop("hint")
    data["error"] = outcome.error and {"type": "SweepError", "message": outcome.error, "hint": hint}
    return data


def _task_cell(task: str) -> str:
    """A task id as `envlayer rm` takes it on a shell command line ('' for the empty id)."""
    return shlex.quote(task)


def _report(outcomes: list[lifecycle.SweepOutcome], args: argparse.Namespace, verb: str) -> int:
    """Print the outcomes of a sweep; return the exit code. Without ``--backend``, a
    backend that cannot be reached here (``unavailable``) is a note, not a failure: the
    user did not ask for it."""
    failed = [o for o in outcomes if o.error and (args.backend or not o.unavailable)]
    if args.json:
        _print_json([_outcome_json(o) for o in outcomes])
    else:
        sandboxes = [s for o in outcomes for s in o.sandboxes]
        headers = ["BACKEND", "ID", "NAME", "TASK", "PROFILE", "STATUS", "CREATED"]
        rows = [
            [s.backend, s.id[:12], s.detail.get("name", ""), _task_cell(s.task), s.profile, s.status, s.created]
            for s in sandboxes
        ]
        if any("last_used" in s.detail or "size_bytes" in s.detail for s in sandboxes):
            headers += ["LAST USED", "SIZE"]
            for row, s in zip(rows, sandboxes, strict=True):
                row += [last_used_cell(s.detail.get("last_used")), size_cell(s.detail.get("size_bytes"))]
        if rows:
            print(_table(rows, headers))
        else:
            print(f"nothing {verb}")
        for o in outcomes:
            if o in failed:
                print(f"{o.backend}: error: {o.error}" + (f"\n  hint: {o.hint}" if o.hint else ""), file=sys.stderr)
            elif o.error:
                _note(f"backend {o.backend!r} skipped: {o.error.splitlines()[0]}")
            elif not o.supported and (args.verbose or args.backend or " skipped: " in o.note):
                _note(o.note)
    if any(o.plugin_failure for o in failed):
        return ENVLAYER_FAILURE
    return 1 if failed else 0


def cmd_ls(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = _sweep_targets(args, settings)
    profile = None if args.all_profiles else settings.profile
    return _report(failures + lifecycle.list_sandboxes(specs, profile=profile), args, "listed")


def cmd_reap(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = _sweep_targets(args, settings)
    max_age = args.max_age if args.max_age is not None else 2 * max(60.0, settings.lifetime_seconds)
    with progress("looking for orphaned sandboxes" if args.dry_run else "reaping orphaned sandboxes"):
        outcomes = lifecycle.reap_orphans(specs, profile=settings.profile, max_age=max_age, dry_run=args.dry_run)
    return _report(failures + outcomes, args, "would be reaped" if args.dry_run else "reaped")


def cmd_rm(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = _sweep_targets(args, settings)
    outcomes = lifecycle.remove_sandbox(specs, args.task, profile=settings.profile, force=args.force, purge=args.purge)
    return _report(failures + outcomes, args, "removed")


def cmd_doctor(args: argparse.Namespace) -> int:
    results = []
    try:
        settings = _settings(args)
    except EnvlayerError as exc:
        results.append({"backend": "(config)", "ok": False, "selected": True, "error": error_object(exc)})
        settings = None
    if settings is not None and settings.backend not in backend_names():
        try:
            load_configured_backend(settings)
        except EnvlayerError as exc:
            results.append({"backend": settings.backend, "ok": False, "selected": True, "error": error_object(exc)})
    if settings is not None:
        reported = {r["backend"] for r in results}
        for name in _selected_backends(args, settings):
            if name in reported:  # an unknown backend named by --backend: said once above
                continue
            entry: dict[str, Any] = {"backend": name, "ok": True, "error": None}
            try:
                cls = load_backend(name)
                with plugin_call(cls, "check_available"):
                    cls.check_available(settings.options_for(name, cls.Options))
            except EnvlayerError as exc:
                entry.update(ok=False, error=error_object(exc))
            entry["selected"] = name == settings.backend
            results.append(entry)
    if args.json:
        _print_json(results)
    else:
        for r in results:
            mark = "ok  " if r["ok"] else "FAIL"
            chosen = " (selected)" if r["selected"] and r["backend"] != "(config)" else ""
            error = r["error"] or {}
            print(f"{mark} {r['backend']}{chosen}" + (f": {error['message']}" if error else ""))
            if error.get("hint"):
                print(f"     fix: {error['hint']}")
    selected_broken = any(not r["ok"] and r["selected"] for r in results)
    return 1 if selected_broken else 0


def cmd_config(args: argparse.Namespace) -> int:
    settings = _settings(args)
    cls = load_configured_backend(settings)
    options = settings.options_for(settings.backend, cls.Options)
    core = {k: {"value": getattr(settings, k), "source": settings.source_of(k)} for k in CORE_KEYS}
    sources = settings.option_sources(settings.backend)
    opts = {
        k: {"value": masked(cls.Options, k, getattr(options, k)), "source": sources.get(k, "default")}
        for k in option_fields(cls.Options)
    }
    if args.json:
        _print_json({"files": settings.files, "settings": core, "options": opts})
        return 0
    print("files read: " + (", ".join(settings.files) or "none"))
    for k, v in core.items():
        print(f"{k} = {v['value']!r}    # {v['source']}")
    print(f"[backends.{settings.backend}]")
    for k, v in opts.items():
        print(f"{k} = {v['value']!r}    # {v['source']}")
    return 0


# --- parser ------------------------------------------------------------------------


DEBUG_HELP = "print tracebacks of errors and DEBUG logs of the envlayer loggers on stderr"


def _enable_debug() -> None:
    global _debug
    _debug = True
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    logger = logging.getLogger("envlayer")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


_COMMON_EPILOG = """exit codes: 0 success, 1 failure (reason and hint on stderr), 2 usage error"""


def _seconds(text: str) -> float:
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
    debug = parser_class(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return {"settings": settings, "json": json_flag, "verbose": verbose, "debug": debug}


def _sub(
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
    epilog = f"examples:\n{examples}\n\n{exits or _COMMON_EPILOG}"
    p = sub.add_parser(
        name,
        parents=[shared[group] for group in (*flags, "debug")],
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(command_parser=p)
    return p


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that arguments a command does not take are
    reported with that command's usage (``envlayer exec --foo ls``), not the top level's."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The CLI's parser (parse with :func:`parse_arguments`); ``parser_class`` (for it and
    every subcommand) lets the broker parse without printing or exiting."""
    shared = _shared_flags(parser_class)

    parser = parser_class(
        prog="envlayer",
        description="Run commands and manage sandboxes for AI agents.",
        epilog="examples:\n  envlayer exec uname -a\n  envlayer exec --backend docker -o image=python:3.11-slim "
        "-o pull=true --task t1 python -V\n  envlayer doctor\n\nRun `envlayer COMMAND --help` for a command's options, "
        "examples and exit codes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"envlayer {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = _sub(
        sub,
        "backends",
        shared,
        "list installed backends, their package and capabilities",
        "  envlayer backends\n  envlayer backends --options      # every option, its type and default",
        flags=("json",),
    )
    p.add_argument("--options", action="store_true", help="also list every option of each backend")
    p.set_defaults(func=cmd_backends)

    p = _sub(
        sub,
        "exec",
        shared,
        "run a command in the sandbox of a task",
        "  envlayer exec ls -la /tmp                         # the rest of the line is the command\n"
        "  envlayer exec 'make test | tail -3'               # one word: a shell string\n"
        "  envlayer exec --task t1 --timeout 60 -- pytest -x  # -- is accepted before CMD\n"
        "  envlayer exec -e API_TOKEN --env-file .env -- ./deploy   # values from your environment / a file\n"
        "  envlayer exec --backend docker -o image=python:3.11-slim python -V\n"
        "  envlayer exec --backend docker -u nobody -- id -u         # as another user of the container",
        "exit codes: the command's own; 124 timed out (its process tree was killed); 130 interrupted;\n"
        "125 envlayer failed (unknown backend, bad config, backend unavailable), reason and hint on stderr",
    )
    p.description = (
        "Run CMD in the sandbox of TASK. Everything after exec's own options is the command: one word is a "
        "shell string, several are an argv list run without a shell. Put exec's options before CMD."
    )
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
    p.set_defaults(func=cmd_exec)

    p = _sub(
        sub,
        "broker",
        shared,
        "show or stop your session brokers (the background processes behind `envlayer exec`)",
        "  envlayer broker status          # pid, uptime, socket, environments held\n"
        "  envlayer broker stop            # stop them (running commands are interrupted)\n"
        "  envlayer broker serve           # run this context's broker in the foreground (debugging)",
        flags=("json",),
    )
    p.add_argument("action", choices=["status", "stop", "serve"])
    p.set_defaults(func=cmd_broker)

    p = _sub(
        sub,
        "ls",
        shared,
        "list managed sandboxes (backends that can list)",
        "  envlayer ls\n  envlayer ls --all-profiles --json",
        flags=("settings", "json", "verbose"),
    )
    p.add_argument("--all-profiles", action="store_true", help="list every profile, not only the current one")
    p.set_defaults(func=cmd_ls)

    p = _sub(
        sub,
        "reap",
        shared,
        "remove sandboxes left by dead processes",
        "  envlayer reap --dry-run         # what would be removed\n  envlayer reap --backend docker --max-age 600",
        "exit codes: 0 success, 1 a backend's sweep failed (the others still ran), 2 usage error",
        flags=("settings", "json", "verbose"),
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument(
        "--max-age",
        type=_seconds,
        metavar="SECONDS",
        help="only sandboxes stopped longer than this (default 2 x max(60, lifetime_seconds))",
    )
    p.set_defaults(func=cmd_reap)

    p = _sub(
        sub,
        "rm",
        shared,
        "remove the sandbox of a task",
        "  envlayer rm build-42\n  envlayer rm build-42 --force --purge   # running, and its durable workspace",
        flags=("settings", "json", "verbose"),
    )
    p.add_argument("task", metavar="TASK", help="the task id, as `envlayer ls` shows it")
    p.add_argument("--force", action="store_true", help="also remove it while it is running")
    p.add_argument("--purge", action="store_true", help="also delete the task's durable data (Docker workspace)")
    p.set_defaults(func=cmd_rm)

    from envlayer.cli.snapshot import add_parsers as add_snapshot_parsers

    add_snapshot_parsers(sub, shared, _sub)

    from envlayer.cli.copy import add_parser as add_cp_parser

    add_cp_parser(sub, shared, _sub)

    from envlayer.cli.shell import add_parser as add_shell_parser

    add_shell_parser(sub, shared, _sub)

    p = _sub(
        sub,
        "doctor",
        shared,
        "check whether each backend works here, and how to fix it",
        "  envlayer doctor\n  envlayer doctor --backend docker --json",
        "exit codes: 0 the selected backend works, 1 it (or the configuration) is broken, 2 usage error",
    )
    p.set_defaults(func=cmd_doctor)

    p = _sub(
        sub,
        "config",
        shared,
        "show the effective configuration and where each value came from",
        "  envlayer config\n  envlayer config --backend docker --json   # env values and secret options masked",
    )
    p.set_defaults(func=cmd_config)

    p = _sub(
        sub,
        "completion",
        shared,
        "print a shell completion script",
        "  source <(envlayer completion bash)    # in ~/.bashrc\n  source <(envlayer completion zsh)     # in ~/.zshrc",
        flags=(),
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=cmd_completion)

    from envlayer.bench.command import add_bench_parser

    add_bench_parser(sub)
    return parser


def cmd_broker(args: argparse.Namespace) -> int:
    from envlayer.cli.broker import control

    if args.action == "serve":
        from envlayer.cli.broker import runtime_dir, server

        digest = runtime_dir.context_digest(os.getcwd(), os.environ)
        return server.serve(control.directory(), digest)
    brokers = control.status() if args.action == "status" else control.stop()
    if args.json:
        _print_json(brokers)
        return 0
    if not brokers:
        print("no broker running")
    for b in brokers:
        state = ("stopped" if b["stopped"] else "still running") if "stopped" in b else f"up {b['uptime']:.0f}s"
        print(f"broker pid {b['pid']} {state}, socket {b['socket']}, directory {b['cwd']}")
        rows = [
            [e["backend"], e["profile"], _task_cell(e["task"]), f"{e['idle_seconds']:.0f}s", str(e["in_flight"])]
            for e in b["environments"]
        ]
        if rows and "stopped" not in b:
            print(_table(rows, ["BACKEND", "PROFILE", "TASK", "IDLE", "RUNNING"]))
    return 0 if all(b.get("stopped", True) for b in brokers) else 1


def cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(build_parser(), args.shell, backend_names()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``envlayer`` script; returns the process exit code. A reader
    of stdout that went away (``envlayer config | head -1``) ends any command quietly
    with 141 (128 + SIGPIPE), as ``exec`` does."""
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # a reader gone shows here, not in the interpreter's exit
    except BrokenPipeError:
        silence_stdout()
        return BROKEN_PIPE_EXIT_CODE


def _run(argv: Sequence[str] | None) -> int:
    """Parse ``argv``, run the command, report its failures; the exit code."""
    args = parse_arguments(build_parser(), argv)
    if args.debug:
        _enable_debug()
    elif not logging.getLogger("envlayer").handlers:
        # the CLI reports every failure itself, once: Python's last-resort handler would
        # print the library's warnings about the same failures again
        logging.getLogger("envlayer").addHandler(logging.NullHandler())
    try:
        return int(args.func(args))
    except BackendUnavailable as exc:
        _error(exc, "backend unavailable")
        return 1
    except EnvlayerError as exc:
        _error(exc)
        return _exit_code_for(exc)
    except BrokenPipeError:
        raise
    except Exception as exc:  # a bug: say so in one line, the traceback under --debug
        _error(exc, f"internal error ({type(exc).__name__})")
        if not _debug:
            print("envlayer: run again with --debug for the traceback, and report it", file=sys.stderr)
        return ENVLAYER_FAILURE


if __name__ == "__main__":
    sys.exit(main())
