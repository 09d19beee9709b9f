"""The ``envlayer`` command line.

Commands: ``backends``, ``exec``, ``ls``, ``reap``, ``rm``, ``doctor``, ``config``,
``completion``. Every command takes ``--config``, ``--backend``, ``--profile``, ``-o``
and ``--json``. Exit codes: ``exec`` returns the command's own code (124 on timeout,
130 on interrupt) and 125 when envlayer itself failed; the other commands return 0 on
success, 1 on failure, 2 on a usage error.

``--json`` output has one shape per object whatever the command: a failure is
``"error": {"type", "message", "hint"}`` (``null`` when there is none) on a backend entry
(``backends``, ``doctor``), a sweep outcome (``ls``, ``reap``, ``rm``) and an exec result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from envlayer import __version__, lifecycle
from envlayer.capabilities import Capability, capabilities_of, supports
from envlayer.cli_completion import SHELLS, completion_script
from envlayer.cli_env import exec_env
from envlayer.config import CORE_KEYS, Settings, load_settings
from envlayer.errors import BackendUnavailable, EnvlayerError
from envlayer.factory import load_configured_backend, open_environment
from envlayer.options import default_of, masked, option_fields, type_name
from envlayer.progress import progress
from envlayer.registry import backend_names, list_backends, load_backend
from envlayer.result import INTERRUPT_EXIT_CODE, ExecResult

ENVLAYER_FAILURE = 125
"""``exec`` exit code when envlayer failed before or around the command (as `docker run`)."""


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def error_object(exc: BaseException | None) -> dict[str, str] | None:
    """The ``--json`` form of a failure, the same in every command (None: no failure)."""
    if exc is None:
        return None
    if isinstance(exc, EnvlayerError):
        return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    return {"type": type(exc).__name__, "message": str(exc), "hint": ""}


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def _parse_assignments(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EnvlayerError(f"{flag} expects KEY=VALUE, got {item!r}", hint=f"write {flag} KEY=VALUE")
        out[key] = value
    return out


def _settings(args: argparse.Namespace) -> Settings:
    texts = _parse_assignments(getattr(args, "option", None) or [], "-o")
    return load_settings(
        config_path=args.config, backend=args.backend, profile=args.profile, option_texts=texts or None
    )


# --- commands -------------------------------------------------------------------


def cmd_backends(args: argparse.Namespace) -> int:
    rows, payload = [], []
    for info in list_backends():
        entry: dict[str, Any] = {**info._asdict(), "error": None}
        try:
            cls = load_backend(info.name)
            entry["capabilities"] = sorted(c.value for c in capabilities_of(cls))
            entry["declared"] = getattr(cls, "capabilities", None) is not None
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


def _command_of(words: Sequence[str]) -> str | list[str]:
    """The command from the rest of the line: one word is a shell string, several an argv."""
    words = list(words[1:] if words and words[0] == "--" else words)
    if not words:
        raise EnvlayerError("no command given", hint="write it after the options: envlayer exec [OPTIONS] CMD [ARG...]")
    return words[0] if len(words) == 1 else words


def _exec_json(result: ExecResult | None, exc: BaseException | None = None) -> dict[str, Any]:
    """The ``--json`` object of one exec: every field always present (null when unknown)."""

    def truncation(value: Any) -> Any:
        return value and dataclasses.asdict(value)

    return {
        "exit_code": result.exit_code if result else ENVLAYER_FAILURE,
        "timed_out": bool(result and result.timed_out),
        "timeout": result.timeout if result else None,
        "duration": result.duration if result else None,
        "stdout": result.stdout_text if result else "",
        "stderr": result.stderr_text if result else "",
        "stdout_truncation": truncation(result.stdout_truncation) if result else None,
        "stderr_truncation": truncation(result.stderr_truncation) if result else None,
        "recovered": result.recovered if result else "",
        "error": error_object(exc),
    }


def _fail(args: argparse.Namespace, exc: EnvlayerError, code: int = ENVLAYER_FAILURE) -> int:
    if args.json:
        _print_json(_exec_json(None, exc))
    print(f"envlayer: error: {exc}", file=sys.stderr)
    return code


def cmd_exec(args: argparse.Namespace) -> int:
    try:
        command = _command_of(args.command)
        settings = _settings(args)
        env_vars = exec_env(args.env or [], args.env_file or [])
        stdin = sys.stdin.buffer.read() if args.stdin else None
        with progress(f"starting the {settings.backend} sandbox of task {args.task!r}"):
            env = open_environment(task_id=args.task, settings=settings)
    except EnvlayerError as exc:
        return _fail(args, exc)

    stderr_forwarded = False

    def forward(stream: str, chunk: bytes) -> None:
        nonlocal stderr_forwarded
        target = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        stderr_forwarded = stderr_forwarded or (stream == "stderr" and bool(chunk))
        target.write(chunk)
        target.flush()

    streamed = not args.json and supports(env, Capability.STREAMING)
    try:
        if args.json:
            result = env.exec(command, cwd=args.cwd, env=env_vars or None, timeout=args.timeout, stdin=stdin)
        else:
            result = lifecycle.exec_streaming(
                env, command, forward, cwd=args.cwd, env=env_vars or None, timeout=args.timeout, stdin=stdin
            )
    except KeyboardInterrupt:
        print("envlayer: interrupted; the command was killed", file=sys.stderr)
        return INTERRUPT_EXIT_CODE
    except EnvlayerError as exc:
        return _fail(args, exc)
    finally:
        lifecycle.cleanup(env, force_remove=args.rm)
        lifecycle.wait_for_cleanup(env, 30.0)
    if args.json:
        _print_json(_exec_json(result))
        return result.exit_code
    if result.stderr and not stderr_forwarded:
        # A message the backend put in the result without streaming it (a command that
        # could not start: 127, a missing working directory: 126) must still be seen.
        sys.stderr.buffer.write(result.stderr)
        sys.stderr.flush()
    if result.timed_out:
        print(f"envlayer: command timed out after {result.timeout}s and was killed", file=sys.stderr)
    elif result.truncated and not streamed:
        print("envlayer: output exceeded max_output_bytes and was truncated", file=sys.stderr)
    return result.exit_code


def _selected_backends(args: argparse.Namespace, settings: Settings) -> list[str]:
    return [args.backend] if args.backend else backend_names()


def _specs_and_failures(
    args: argparse.Namespace, settings: Settings
) -> tuple[list[lifecycle.BackendSpec], list[lifecycle.SweepOutcome]]:
    specs, failures = [], []
    for name in _selected_backends(args, settings):
        try:
            cls = load_backend(name)
            specs.append((cls, settings.options_for(name, cls.Options)))
        except EnvlayerError as exc:
            failures.append(lifecycle.SweepOutcome(name, supported=True, error=exc.message, hint=exc.hint))
    return specs, failures


def _outcome_json(outcome: lifecycle.SweepOutcome) -> dict[str, Any]:
    data = dataclasses.asdict(outcome)
    hint = data.pop("hint")
    data["error"] = outcome.error and {"type": "SweepError", "message": outcome.error, "hint": hint}
    return data


def _task_cell(task: str) -> str:
    """A task id as `envlayer rm` takes it on a shell command line ('' for the empty id)."""
    return shlex.quote(task)


def _report(outcomes: list[lifecycle.SweepOutcome], args: argparse.Namespace, verb: str) -> int:
    if args.json:
        _print_json([_outcome_json(o) for o in outcomes])
    else:
        rows = []
        for o in outcomes:
            for s in o.sandboxes:
                rows.append(
                    [s.backend, s.id[:12], s.detail.get("name", ""), _task_cell(s.task), s.profile, s.status, s.created]
                )
        if rows:
            print(_table(rows, ["BACKEND", "ID", "NAME", "TASK", "PROFILE", "STATUS", "CREATED"]))
        else:
            print(f"nothing {verb}")
        for o in outcomes:
            if o.error:
                print(f"{o.backend}: error: {o.error}" + (f"\n  hint: {o.hint}" if o.hint else ""), file=sys.stderr)
            elif not o.supported and args.verbose:
                print(f"{o.backend}: {o.note}", file=sys.stderr)
    return 1 if any(o.error for o in outcomes) else 0


def cmd_ls(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = _specs_and_failures(args, settings)
    profile = None if args.all_profiles else settings.profile
    return _report(failures + lifecycle.list_sandboxes(specs, profile=profile), args, "listed")


def cmd_reap(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = _specs_and_failures(args, settings)
    max_age = args.max_age if args.max_age is not None else 2 * max(60.0, settings.lifetime_seconds)
    with progress("looking for orphaned sandboxes" if args.dry_run else "reaping orphaned sandboxes"):
        outcomes = lifecycle.reap_orphans(specs, profile=settings.profile, max_age=max_age, dry_run=args.dry_run)
    return _report(failures + outcomes, args, "would be reaped" if args.dry_run else "reaped")


def cmd_rm(args: argparse.Namespace) -> int:
    settings = _settings(args)
    specs, failures = _specs_and_failures(args, settings)
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
        for name in _selected_backends(args, settings):
            entry: dict[str, Any] = {"backend": name, "ok": True, "error": None}
            try:
                cls = load_backend(name)
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


_COMMON_EPILOG = """exit codes: 0 success, 1 failure (reason and hint on stderr), 2 usage error"""


def _sub(sub: Any, name: str, common: argparse.ArgumentParser, help: str, examples: str, exits: str = "") -> Any:
    """A subcommand whose help ends with examples and its exit codes."""
    epilog = f"examples:\n{examples}\n\n{exits or _COMMON_EPILOG}"
    return sub.add_parser(
        name,
        parents=[common],
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", metavar="PATH", help="read only this config file (default: user and ./envlayer.toml)"
    )
    common.add_argument("--backend", metavar="NAME", help="backend to use (overrides config and $ENVLAYER_BACKEND)")
    common.add_argument("--profile", metavar="NAME", help="profile namespace (overrides config and $ENVLAYER_PROFILE)")
    common.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="backend option override, VALUE read as the option's type (repeatable; see `backends --options`)",
    )
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument("-v", "--verbose", action="store_true", help="also report backends lacking the capability")

    parser = argparse.ArgumentParser(
        prog="envlayer",
        description="Run commands and manage sandboxes for AI agents.",
        epilog="examples:\n  envlayer exec uname -a\n  envlayer exec --backend docker -o image=python:3.11-slim "
        "--task t1 python -V\n  envlayer doctor\n\nRun `envlayer COMMAND --help` for a command's options, "
        "examples and exit codes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"envlayer {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = _sub(
        sub,
        "backends",
        common,
        "list installed backends, their package and capabilities",
        "  envlayer backends\n  envlayer backends --options      # every option, its type and default",
    )
    p.add_argument("--options", action="store_true", help="also list every option of each backend")
    p.set_defaults(func=cmd_backends)

    p = _sub(
        sub,
        "exec",
        common,
        "run a command in the sandbox of a task",
        "  envlayer exec ls -la /tmp                         # the rest of the line is the command\n"
        "  envlayer exec 'make test | tail -3'               # one word: a shell string\n"
        "  envlayer exec --task t1 --timeout 60 -- pytest -x  # -- is accepted before CMD\n"
        "  envlayer exec -e API_TOKEN --env-file .env -- ./deploy   # values from your environment / a file\n"
        "  envlayer exec --backend docker -o image=python:3.11-slim python -V",
        "exit codes: the command's own; 124 timed out (its process tree was killed); 130 interrupted;\n"
        "125 envlayer failed (unknown backend, bad config, backend unavailable), reason and hint on stderr",
    )
    p.description = (
        "Run CMD in the sandbox of TASK. Everything after exec's own options is the command: one word is a "
        "shell string, several are an argv list run without a shell. Put exec's options before CMD."
    )
    p.add_argument("--task", default="default", help="task id (default: %(default)s)")
    p.add_argument("--timeout", type=float, help="seconds before the command's process tree is killed (exit 124)")
    p.add_argument("--cwd", help="working directory for this command")
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
    p.add_argument("--rm", action="store_true", help="remove the sandbox afterwards, even in persist mode")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD ...", help="the command and its arguments")
    p.set_defaults(func=cmd_exec)

    p = _sub(
        sub,
        "ls",
        common,
        "list managed sandboxes (backends that can list)",
        "  envlayer ls\n  envlayer ls --all-profiles --json",
    )
    p.add_argument("--all-profiles", action="store_true", help="list every profile, not only the current one")
    p.set_defaults(func=cmd_ls)

    p = _sub(
        sub,
        "reap",
        common,
        "remove sandboxes left by dead processes",
        "  envlayer reap --dry-run         # what would be removed\n  envlayer reap --backend docker --max-age 600",
        "exit codes: 0 success, 1 a backend's sweep failed (the others still ran), 2 usage error",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument(
        "--max-age",
        type=float,
        metavar="SECONDS",
        help="only sandboxes stopped longer than this (default 2 x max(60, lifetime_seconds))",
    )
    p.set_defaults(func=cmd_reap)

    p = _sub(
        sub,
        "rm",
        common,
        "remove the sandbox of a task",
        "  envlayer rm build-42\n  envlayer rm build-42 --force --purge   # running, and its durable workspace",
    )
    p.add_argument("task", metavar="TASK", help="the task id, as `envlayer ls` shows it")
    p.add_argument("--force", action="store_true", help="also remove it while it is running")
    p.add_argument("--purge", action="store_true", help="also delete the task's durable data (Docker workspace)")
    p.set_defaults(func=cmd_rm)

    p = _sub(
        sub,
        "doctor",
        common,
        "check whether each backend works here, and how to fix it",
        "  envlayer doctor\n  envlayer doctor --backend docker --json",
        "exit codes: 0 the selected backend works, 1 it (or the configuration) is broken, 2 usage error",
    )
    p.set_defaults(func=cmd_doctor)

    p = _sub(
        sub,
        "config",
        common,
        "show the effective configuration and where each value came from",
        "  envlayer config\n  envlayer config --backend docker --json   # env values and secret options masked",
    )
    p.set_defaults(func=cmd_config)

    p = _sub(
        sub,
        "completion",
        common,
        "print a shell completion script",
        "  source <(envlayer completion bash)    # in ~/.bashrc\n  source <(envlayer completion zsh)     # in ~/.zshrc",
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=cmd_completion)
    return parser


def cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(build_parser(), args.shell, backend_names()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``envlayer`` script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BackendUnavailable as exc:
        print(f"envlayer: backend unavailable: {exc}", file=sys.stderr)
        return 1
    except EnvlayerError as exc:
        print(f"envlayer: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
