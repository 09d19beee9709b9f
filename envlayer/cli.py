"""The ``envlayer`` command line.

Commands: ``backends``, ``exec``, ``ls``, ``reap``, ``rm``, ``doctor``, ``config``.
Every command takes ``--config``, ``--backend``, ``--profile``; those that print
tables take ``--json``. Exit codes: ``exec`` returns the command's own code (124 on
timeout, 130 on interrupt) and 125 when envlayer itself failed; the other commands
return 0 on success, 1 on failure, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from envlayer import lifecycle
from envlayer.capabilities import capabilities_of
from envlayer.config import CORE_KEYS, Settings, load_settings
from envlayer.errors import BackendUnavailable, EnvlayerError
from envlayer.factory import open_environment
from envlayer.options import default_of, option_fields, type_name
from envlayer.registry import backend_names, list_backends, load_backend
from envlayer.result import INTERRUPT_EXIT_CODE

ENVLAYER_FAILURE = 125
"""``exec`` exit code when envlayer failed before or around the command (as `docker run`)."""


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


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
    overrides: dict[str, Any] = {}
    for key, text in _parse_assignments(getattr(args, "option", None) or [], "-o").items():
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = text
    return load_settings(
        config_path=args.config, backend=args.backend, profile=args.profile, backend_options=overrides or None
    )


# --- commands -------------------------------------------------------------------


def cmd_backends(args: argparse.Namespace) -> int:
    rows, payload = [], []
    for info in list_backends():
        entry: dict[str, Any] = info._asdict()
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
            entry["error"] = exc.message
            entry["hint"] = exc.hint
        payload.append(entry)
        caps = ", ".join(entry.get("capabilities", [])) or "-"
        if "error" in entry:
            caps = f"unavailable: {entry['error']}"
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


def cmd_exec(args: argparse.Namespace) -> int:
    command: str | list[str] = args.command[0] if len(args.command) == 1 else list(args.command)
    try:
        settings = _settings(args)
        env_vars = _parse_assignments(args.env or [], "-e")
        stdin = sys.stdin.buffer.read() if args.stdin else None
        env = open_environment(task_id=args.task, settings=settings)
    except EnvlayerError as exc:
        print(f"envlayer: error: {exc}", file=sys.stderr)
        return ENVLAYER_FAILURE

    def forward(stream: str, chunk: bytes) -> None:
        target = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        target.write(chunk)
        target.flush()

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
        print(f"envlayer: error: {exc}", file=sys.stderr)
        return ENVLAYER_FAILURE
    finally:
        lifecycle.cleanup(env, force_remove=args.rm)
        lifecycle.wait_for_cleanup(env, 30.0)
    if args.json:
        _print_json(
            {
                "exit_code": result.exit_code,
                "timed_out": result.timed_out,
                "duration": result.duration,
                "stdout": result.stdout_text,
                "stderr": result.stderr_text,
                "stdout_truncation": result.stdout_truncation and dataclasses.asdict(result.stdout_truncation),
                "stderr_truncation": result.stderr_truncation and dataclasses.asdict(result.stderr_truncation),
            }
        )
    elif result.timed_out:
        print(f"envlayer: command timed out after {result.timeout}s and was killed", file=sys.stderr)
    elif result.truncated:
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
            failures.append(lifecycle.SweepOutcome(name, supported=True, error=str(exc)))
    return specs, failures


def _report(outcomes: list[lifecycle.SweepOutcome], args: argparse.Namespace, verb: str) -> int:
    if args.json:
        _print_json([dataclasses.asdict(o) for o in outcomes])
    else:
        rows = []
        for o in outcomes:
            for s in o.sandboxes:
                rows.append([s.backend, s.id[:12], s.detail.get("name", ""), s.task, s.profile, s.status, s.created])
        if rows:
            print(_table(rows, ["BACKEND", "ID", "NAME", "TASK", "PROFILE", "STATUS", "CREATED"]))
        else:
            print(f"nothing {verb}")
        for o in outcomes:
            if o.error:
                print(f"{o.backend}: error: {o.error}", file=sys.stderr)
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
        results.append({"backend": "(config)", "ok": False, "problem": exc.message, "fix": exc.hint})
        settings = None
    if settings is not None:
        for name in _selected_backends(args, settings):
            entry: dict[str, Any] = {"backend": name, "ok": True, "problem": "", "fix": ""}
            try:
                cls = load_backend(name)
                cls.check_available(settings.options_for(name, cls.Options))
            except EnvlayerError as exc:
                entry.update(ok=False, problem=exc.message, fix=exc.hint)
            entry["selected"] = name == settings.backend
            results.append(entry)
    if args.json:
        _print_json(results)
    else:
        for r in results:
            mark = "ok  " if r["ok"] else "FAIL"
            chosen = " (selected)" if r.get("selected") else ""
            print(f"{mark} {r['backend']}{chosen}" + (f": {r['problem']}" if r["problem"] else ""))
            if r["fix"]:
                print(f"     fix: {r['fix']}")
    selected_broken = any(not r["ok"] and (r.get("selected") or r["backend"] == "(config)") for r in results)
    return 1 if selected_broken else 0


def cmd_config(args: argparse.Namespace) -> int:
    settings = _settings(args)
    cls = load_backend(settings.backend)
    options = settings.options_for(settings.backend, cls.Options)
    core = {k: {"value": getattr(settings, k), "source": settings.source_of(k)} for k in CORE_KEYS}
    sources = settings.option_sources(settings.backend)
    opts = {k: {"value": getattr(options, k), "source": sources.get(k, "default")} for k in option_fields(cls.Options)}
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
        help="backend option override; VALUE is parsed as JSON when it can be (repeatable)",
    )
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument("-v", "--verbose", action="store_true", help="also report backends lacking the capability")

    parser = argparse.ArgumentParser(prog="envlayer", description="Run commands and manage sandboxes for AI agents.")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("backends", parents=[common], help="list installed backends, their package and capabilities")
    p.add_argument("--options", action="store_true", help="also list every option of each backend")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser(
        "exec",
        parents=[common],
        help="run a command in a sandbox",
        description="Run CMD in the sandbox of TASK. One argument is a shell string; several are an argv list.",
    )
    p.add_argument("--task", default="default", help="task id (default: %(default)s)")
    p.add_argument("--timeout", type=float, help="seconds before the command's process tree is killed (exit 124)")
    p.add_argument("--cwd", help="working directory for this command")
    p.add_argument("-e", "--env", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    p.add_argument("-i", "--stdin", action="store_true", help="forward this process's stdin to the command")
    p.add_argument("--rm", action="store_true", help="remove the sandbox afterwards, even in persist mode")
    p.add_argument("command", nargs="+", metavar="CMD", help="command (after --)")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("ls", parents=[common], help="list managed sandboxes (backends that can list)")
    p.add_argument("--all-profiles", action="store_true", help="list every profile, not only the current one")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("reap", parents=[common], help="remove sandboxes left by dead processes")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument(
        "--max-age",
        type=float,
        metavar="SECONDS",
        help="only sandboxes stopped longer than this (default 2 x max(60, lifetime_seconds))",
    )
    p.set_defaults(func=cmd_reap)

    p = sub.add_parser("rm", parents=[common], help="remove the sandbox of a task")
    p.add_argument("task", metavar="TASK")
    p.add_argument("--force", action="store_true", help="also remove it while it is running")
    p.add_argument("--purge", action="store_true", help="also delete the task's durable data (Docker workspace)")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("doctor", parents=[common], help="check whether each backend works here, and how to fix it")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "config", parents=[common], help="show the effective configuration and where each value came from"
    )
    p.set_defaults(func=cmd_config)
    return parser


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
