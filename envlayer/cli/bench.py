"""``envlayer bench``: its arguments and what it prints (docs/cli.md, "envlayer bench").

Every ``envlayer`` command builds the parser, so this module imports only what
:func:`add_bench_parser` needs; the bench's own modules (85 modules, about 60 ms of CPU
per CLI start) are imported when ``bench`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envlayer.bench.target import BackendTarget

HELP = "measure start, exec, file transfer and floods per backend, against baselines in the same run"

EXAMPLES = """examples:
  envlayer bench                                     # the configured backend
  envlayer bench --backend local --backend docker --quick
  envlayer bench --backend docker -o image=python:3.11-slim --json
  envlayer bench --backend local --backend docker --output docs/bench --page docs/benchmarks.md

exit codes: 0 measured and cleaned up, 1 failure (reason and hint on stderr) or something
left behind, 2 usage error, 130 interrupted (Ctrl-C, SIGTERM: 143) after the cleanup"""


def add_bench_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on the CLI's subcommands ``sub``."""
    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Everything it creates (sandboxes in a profile of its "
        "own, files) is removed at the end, on an error, Ctrl-C or SIGTERM.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", metavar="PATH", help="read only this config file (default: user and ./envlayer.toml)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        action="append",
        help="a backend to measure (repeatable; default: the configured one)",
    )
    p.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="[BACKEND.]KEY=VALUE",
        help="backend option override, for every selected backend that has KEY or for BACKEND only (repeatable)",
    )
    p.add_argument("--quick", action="store_true", help="fewer and smaller runs (seconds on local, not minutes)")
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="measure the local backend's session where its shells land, not on one CPU (see docs/cli.md)",
    )
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.add_argument(
        "--output", metavar="DIR", help="write bench.json, bench.md and PNG plots into DIR (needs matplotlib)"
    )
    p.add_argument("--page", metavar="PATH", help="write a Markdown page of the run at PATH (plots from --output)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="print tracebacks and debug logs")
    p.set_defaults(func=cmd_bench)
    return p


def targets_of(args: argparse.Namespace) -> list[BackendTarget]:
    """The backends to measure, each with its ``-o`` options, under one new profile.

    Raises: EnvlayerError for an unknown backend or an option no selected backend has."""
    from envlayer.bench.ledger import new_profile
    from envlayer.bench.target import BackendTarget, split_options
    from envlayer.cli.console import parse_assignments
    from envlayer.config import load_settings
    from envlayer.factory import backend_class

    names = list(dict.fromkeys(args.backend or [load_settings(config_path=args.config).backend]))
    for name in names:
        backend_class(name)
    per = split_options(parse_assignments(args.option or [], "-o"), names)
    profile = new_profile()
    targets = [BackendTarget(name, profile, args.config, per[name]) for name in names]
    for target in targets:
        target.settings().options_for(target.name, backend_class(target.name).Options)
    return targets


def command_line(args: argparse.Namespace, targets: list[BackendTarget]) -> list[str]:
    """The command that repeats this run (recorded with its figures)."""
    words = ["envlayer", "bench"]
    for target in targets:
        words += ["--backend", target.name]
    words += [w for o in args.option or [] for w in ("-o", o)]
    words += ["--quick"] if args.quick else []
    words += ["--no-pin"] if args.no_pin else []
    words += ["--output", args.output] if args.output else []
    words += ["--page", args.page] if args.page else []
    return words


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the bench; print the figures (a table, or JSON with ``--json``)."""
    from envlayer.bench.interrupts import Terminated, exit_code_of
    from envlayer.bench.machine import machine_info, pinnable_cpu
    from envlayer.bench.measure import Plan
    from envlayer.bench.report import document, text_table, write_output, write_page
    from envlayer.bench.runner import run_bench
    from envlayer.cli.progress import progress

    targets = targets_of(args)
    if args.output:
        from envlayer.bench.plots import pyplot

        pyplot()  # before the run: a missing extra fails in a second, not after minutes
    local_cpu = None if args.no_pin else pinnable_cpu()
    machine = machine_info([t.name for t in targets], pinned_cpu=local_cpu)
    print(f"envlayer: bench: sandboxes in profile {targets[0].profile}, all removed at the end", file=sys.stderr)
    try:
        figures, problems = run_bench(targets, Plan.of(args.quick, local_cpu=local_cpu), progress)
    except KeyboardInterrupt as stop:
        word = "terminated" if isinstance(stop, Terminated) else "interrupted"
        print(f"envlayer: bench {word}; what it created was removed", file=sys.stderr)
        return exit_code_of(stop)
    doc = document(figures, machine, command_line(args, targets), args.quick)
    if args.output:
        for path in write_output(doc, Path(args.output), markdown=not args.page):
            print(f"envlayer: wrote {path}", file=sys.stderr)
    if args.page:
        write_page(doc, Path(args.page), Path(args.output) if args.output else None)
    print(json.dumps(doc, indent=2) if args.json else text_table(doc))
    return 1 if problems else 0
