"""What the sweeping commands (``ls``, ``reap``, ``rm``, ``snapshots``) share: which
backends they run on, and how their outcomes are printed (a table, notes and errors on
stderr, or ``--json``) and turned into an exit code."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.cli.console import ENVLAYER_FAILURE, json_text
from envlayer.cli.table_cells import ago_cell, last_used_cell, size_cell
from envlayer.config import Settings
from envlayer.discovery.backend_registry import backend_names
from envlayer.errors import BackendConflict, BackendLoadError, PluginError
from envlayer.factory import backend_specs

PLUGIN_FAILURES = (PluginError, BackendLoadError, BackendConflict)
"""Errors that mean a backend plugin is broken: exit code 125 from every command."""


def note(text: str) -> None:
    """``envlayer: note: TEXT`` on stderr."""
    print(f"envlayer: note: {text}", file=sys.stderr)


def print_json(data: Any) -> None:
    """``data`` as ``--json`` output on stdout."""
    print(json_text(data))


def table(rows: list[list[str]], headers: list[str]) -> str:
    """``rows`` under ``headers`` in columns two spaces apart."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def task_cell(task: str) -> str:
    """A task id as `envlayer rm` takes it on a shell command line ('' for the empty id)."""
    return shlex.quote(task)


def selected_backends(args: argparse.Namespace) -> list[str]:
    """``--backend``'s backend, else every installed one."""
    return [args.backend] if args.backend else backend_names()


def sweep_targets(
    args: argparse.Namespace, settings: Settings
) -> tuple[list[lifecycle.BackendSpec], list[lifecycle.SweepOutcome]]:
    """The backends a sweep runs on, and an outcome for each one that cannot be loaded:
    an error when it was named with ``--backend``, else a note (a broken plugin the
    user did not ask for never fails the command)."""
    specs, failures = backend_specs(settings, selected_backends(args))
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
            message = f"backend {failure.backend!r} skipped: {exc.message}"
            outcomes.append(lifecycle.SweepOutcome(failure.backend, supported=False, note=message))
    return specs, outcomes


def outcome_json(outcome: lifecycle.SweepOutcome) -> dict[str, Any]:
    """The ``--json`` form of one backend's sweep outcome."""
    data = dataclasses.asdict(outcome)
    hint = data.pop("hint")
    data["error"] = outcome.error and {"type": "SweepError", "message": outcome.error, "hint": hint}
    return data


def _print_table(outcomes: list[lifecycle.SweepOutcome], verb: str) -> None:
    """The sandboxes as a table: full ids (what ``rm`` and ``snapshots rm`` take), times
    as ``2h 5m ago``."""
    sandboxes = [s for o in outcomes for s in o.sandboxes]
    headers = ["BACKEND", "ID", "NAME", "TASK", "PROFILE", "STATUS", "CREATED"]
    rows = [
        [s.backend, s.id, s.detail.get("name", ""), task_cell(s.task), s.profile, s.status, ago_cell(s.created)]
        for s in sandboxes
    ]
    if any("last_used" in s.detail or "size_bytes" in s.detail for s in sandboxes):
        headers += ["LAST USED", "SIZE"]
        for row, s in zip(rows, sandboxes, strict=True):
            row += [last_used_cell(s.detail.get("last_used")), size_cell(s.detail.get("size_bytes"))]
    print(table(rows, headers) if rows else f"nothing {verb}")


def _print_ids(outcomes: list[lifecycle.SweepOutcome]) -> None:
    """``-q``: one id a line, nothing else on stdout (``envlayer rm $(envlayer ls -q)``)."""
    for sandbox in (s for o in outcomes for s in o.sandboxes):
        print(sandbox.id)


def _skipped_notes(skipped: list[lifecycle.SweepOutcome], verbose: bool) -> None:
    """Backends the user did not name that cannot be reached here (``unavailable``):
    each with its reason under ``-v``, else one line naming them all."""
    if verbose:
        for o in skipped:
            note(f"backend {o.backend!r} skipped: {(o.error or '').splitlines()[0]}")
    elif skipped:
        names = ", ".join(sorted({o.backend for o in skipped}))
        note(f"skipped backends not set up here: {names} (-v says why)")


def report(outcomes: list[lifecycle.SweepOutcome], args: argparse.Namespace, verb: str) -> int:
    """Print the outcomes of a sweep; return the exit code. Without ``--backend``, a
    backend that cannot be reached here (``unavailable``) is skipped with one note for
    all of them (each reason under ``-v``), and one that cannot be loaded with a note of
    its own: neither is a failure, the user did not ask for it."""
    failed = [o for o in outcomes if o.error and (args.backend or not o.unavailable)]
    if args.json:
        print_json([outcome_json(o) for o in outcomes])
    else:
        _print_ids(outcomes) if getattr(args, "quiet", False) else _print_table(outcomes, verb)
        for o in outcomes:
            if o in failed:
                print(f"{o.backend}: error: {o.error}" + (f"\n  hint: {o.hint}" if o.hint else ""), file=sys.stderr)
            elif not o.supported and (args.verbose or args.backend or " skipped: " in o.note):
                note(o.note)
        _skipped_notes([o for o in outcomes if o.error and o not in failed], args.verbose)
    if any(o.plugin_failure for o in failed):
        return ENVLAYER_FAILURE
    return 1 if failed else 0
