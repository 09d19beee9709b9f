"""The ``envlayer`` command line.

Commands: ``backends``, ``exec``, ``ls``, ``reap``, ``rm``, ``doctor``, ``config``,
``completion``, ``broker``, ``snapshot``, ``fork``, ``snapshots``, ``bench``; ``envlayer --version``
(the parser: :mod:`envlayer.cli.parser`). The ``envlayer`` script enters through
:func:`envlayer.cli.entry.main`, which hands ``exec`` to the session broker when it can
and calls :func:`main` otherwise.
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
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.capabilities import (
    Capability,
    capabilities_of,
    declared_capabilities,
    defines_method_for,
    signature_problem,
)
from envlayer.cli.completion import completion_script
from envlayer.cli.console import BROKEN_PIPE_EXIT_CODE, ENVLAYER_FAILURE, Console, error_object, silence_stdout
from envlayer.cli.console import settings_of as _settings
from envlayer.cli.exec_plan import exec_failed, plan_exec, release_after_exec, run_exec
from envlayer.cli.option_table import print_backend_options
from envlayer.cli.parser import DEFAULT_TIMEOUT, build_parser, parse_arguments
from envlayer.cli.progress import progress
from envlayer.cli.report import (
    PLUGIN_FAILURES,
    print_json,
    report,
    selected_backends,
    sweep_targets,
    table,
    task_cell,
)
from envlayer.cli.task_sandbox import open_task_environment
from envlayer.cli.toml_text import toml_key, toml_line
from envlayer.config import CORE_KEYS
from envlayer.discovery.backend_registry import backend_names, list_backends, load_backend, shadows_builtin
from envlayer.discovery.plugin_calls import plugin_call
from envlayer.environment import SandboxInfo
from envlayer.errors import BackendNotFound, BackendUnavailable, EnvlayerError
from envlayer.factory import load_configured_backend
from envlayer.options import default_of, masked, option_fields, type_name
from envlayer.sandbox.recorded_options import SandboxOptionsDiffer

__all__ = ["DEFAULT_TIMEOUT", "build_parser", "main", "parse_arguments"]

_debug = False
"""Set by ``--debug``: print tracebacks of the errors the CLI reports."""


def _error(exc: BaseException, prefix: str = "error") -> None:
    """Report ``exc`` on stderr (with its traceback under ``--debug``)."""
    if _debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(f"envlayer: {prefix}: {exc}", file=sys.stderr)


def _enable_debug() -> None:
    global _debug
    _debug = True
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    logger = logging.getLogger("envlayer")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def _exit_code_for(exc: EnvlayerError) -> int:
    return ENVLAYER_FAILURE if isinstance(exc, PLUGIN_FAILURES) else 1


# --- commands -------------------------------------------------------------------


def cmd_backends(args: argparse.Namespace) -> int:
    named = _named_backends(args.options)
    rows, payload = [], []
    for info in list_backends():
        if named and info.name not in named:
            continue
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
            if args.options is not None:
                entry["options"] = {
                    name: {"type": type_name(tp), "default": default_of(f), "doc": f.metadata.get("doc", "")}
                    for name, (tp, f) in option_fields(cls.Options).items()
                }
        except EnvlayerError as exc:
            entry["error"] = error_object(exc)
        payload.append(entry)
        rows.append([info.name, info.distribution, info.version, _capabilities_cell(entry)])
    if args.json:
        print_json(payload)
        return 0
    print(table(rows, ["BACKEND", "PACKAGE", "VERSION", "CAPABILITIES"]))
    if args.options is not None:
        print_backend_options(payload, with_docs=bool(named))
    return 0


def _named_backends(names: list[str] | None) -> set[str]:
    """``--options BACKEND...``: the names, each an installed backend (else
    :class:`BackendNotFound` with the nearest name)."""
    installed = backend_names()
    for name in names or ():
        if name not in installed:
            raise BackendNotFound(name, installed, None)
    return set(names or ())


def _capabilities_cell(entry: dict[str, Any]) -> str:
    """The CAPABILITIES cell of ``backends``: the capabilities, or why it is unavailable."""
    if entry["error"]:
        return f"unavailable: {entry['error']['message']}"
    caps = ", ".join(entry.get("capabilities", [])) or "-"
    if not entry["declared"]:
        caps += " (introspected)"
    if entry.get("unusable"):
        caps += "; unusable: " + ", ".join(entry["unusable"])
    return caps


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
            env = open_task_environment(plan.settings, args.task, replace=args.replace)
    except EnvlayerError as exc:
        return exec_failed(args, console, exc)

    def release() -> tuple[list[str], bool]:
        outcome = release_after_exec(env, args.rm, console)
        if args.rm:  # the sandbox is gone: a broker's session of this task must go too
            _release_from_brokers(args.task, plan.settings.profile, plan.settings.backend)
        return outcome

    return run_exec(args, plan, env, console, release)


def cmd_ls(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = sweep_targets(args, settings)
    profile = None if args.all_profiles else settings.profile
    return report(failures + lifecycle.list_sandboxes(specs, profile=profile), args, "listed")


def cmd_reap(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = sweep_targets(args, settings)
    max_age = args.max_age if args.max_age is not None else 2 * max(60.0, settings.lifetime_seconds)
    with progress("looking for orphaned sandboxes" if args.dry_run else "reaping orphaned sandboxes"):
        outcomes = lifecycle.reap_orphans(specs, profile=settings.profile, max_age=max_age, dry_run=args.dry_run)
    return report(failures + outcomes, args, "would be reaped" if args.dry_run else "reaped")


def cmd_rm(args: argparse.Namespace) -> int:
    from envlayer.cli.remove import cmd_rm as remove_tasks

    return remove_tasks(args, _release_from_brokers)


def _release_from_brokers(task: str, profile: str, backend: str | None) -> list[lifecycle.SweepOutcome]:
    """Make the session brokers let go of ``task``'s environments (``rm``, in-process
    ``exec --rm``): one outcome per environment released, as ``rm`` reports it."""
    from envlayer.cli.broker import control

    return [
        lifecycle.SweepOutcome(
            held["backend"],
            supported=True,
            sandboxes=[SandboxInfo(held["backend"], f"broker {held['pid']}", task, profile, "session released")],
        )
        for held in control.drop(task, profile, backend)
    ]


CONFIG_ERRORS = frozenset({"ConfigError", "OptionError"})
"""Failures of the configuration itself, not of a backend's reach: ``doctor`` exits 1 on them."""


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
        for name in selected_backends(args):
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
        print_json(results)
    else:
        for r in results:
            mark = "ok  " if r["ok"] else "FAIL"
            chosen = " (selected)" if r["selected"] and r["backend"] != "(config)" else ""
            error = r["error"] or {}
            print(f"{mark} {r['backend']}{chosen}" + (f": {error['message']}" if error else ""))
            if error.get("hint"):
                print(f"     fix: {error['hint']}")
    # A backend that is merely not set up here (no daemon, no credentials) is a finding; a
    # configuration that is wrong (an unknown option, a bad value) is broken whichever
    # backend it is for.
    broken = any(not r["ok"] and (r["selected"] or (r["error"] or {}).get("type") in CONFIG_ERRORS) for r in results)
    return 1 if broken else 0


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
        print_json({"files": settings.files, "settings": core, "options": opts})
        return 0
    print("# files read: " + (", ".join(settings.files) or "none"))
    for k, v in core.items():
        print(toml_line(k, v["value"], v["source"]))
    print(f"\n[backends.{toml_key(settings.backend)}]")
    for k, v in opts.items():
        print(toml_line(k, v["value"], v["source"]))
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from envlayer.cli.broker import control

    if args.action == "serve":
        from envlayer.cli.broker import runtime_dir, server

        return server.serve(control.directory(), runtime_dir.INSTALLATION_DIGEST)
    brokers = control.status() if args.action == "status" else control.stop(args.every)
    if args.json:
        print_json(brokers)
        return 0
    if not brokers:
        print(control.nothing_running(args.action, args.every))
    for b in brokers:
        print(control.describe(b))
        rows = control.status_rows(b["environments"], task_cell)
        if rows and "stopped" not in b:
            print(table(rows, control.STATUS_HEADERS))
    return 0 if all(b.get("stopped", True) for b in brokers) else 1


def cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(build_parser(), args.shell, backend_names()))
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "backends": cmd_backends,
    "exec": cmd_exec,
    "broker": cmd_broker,
    "ls": cmd_ls,
    "reap": cmd_reap,
    "rm": cmd_rm,
    "doctor": cmd_doctor,
    "config": cmd_config,
    "completion": cmd_completion,
}
"""The function that runs each command of :data:`envlayer.cli.parser.COMMANDS`."""


def _handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function for the parsed command (the snapshot and bench commands name theirs)."""
    return HANDLERS.get(args.cmd) or args.func


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
        return int(_handler(args)(args))
    except SandboxOptionsDiffer as exc:  # refused to replace the task's sandbox: envlayer did not run it
        _error(exc)
        return ENVLAYER_FAILURE
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
