"""The walk of one ``timeout`` from ``envlayer exec`` to the backend, as the code runs it.

Runs ``envlayer exec --no-broker --timeout 7.25 ...`` in this interpreter under a profile
hook and records every Python function whose frame holds the timeout: a local equal to
7.25, or a local object whose ``timeout`` attribute is 7.25 (the plan, the request). Prints
the files in the order the value first reaches them, how many distinct files it crossed,
and how many times it came back to a file it had left (a "return": base -> plugin -> base).

    .venv/bin/python benchmarks/timeout_walk.py [--root DIR] [--backend docker] [-o image=...] [--steps]

``--root`` walks another checkout (for instance a clone at an older commit): its
``envlayer`` and plugins are put first on ``sys.path``. The command run is ``true``, as a
task of its own that ``--rm`` removes afterwards (nothing is left behind).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from types import FrameType
from typing import Any

MARK = 7.25
"""The timeout asked for: a value no default or constant in envlayer has."""


def holds_timeout(frame: FrameType) -> bool:
    """True when a local of ``frame`` is the timeout, carries it as ``.timeout``, or is a
    dict (keyword arguments, a parsed namespace's ``vars``) holding it as ``timeout``."""
    for value in list(frame.f_locals.values()):
        if type(value) is float and value == MARK:
            return True
        if isinstance(value, dict) and value.get("timeout") == MARK:
            return True
        try:
            if getattr(value, "timeout", None) == MARK:
                return True
        except Exception:  # a proxy's attribute access may raise anything
            continue
    return False


def walk(argv: list[str], root: str) -> list[tuple[str, str]]:
    """(file relative to ``root``, function) of each frame holding the timeout, in order:
    a frame is counted when it is called with the timeout among its arguments, or else when
    it returns holding it (the frame that computed it)."""
    seen: list[tuple[str, str]] = []
    entered: set[int] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        path = frame.f_code.co_filename
        if not path.startswith(root) or "/tests/" in path or path.endswith("timeout_walk.py"):
            return
        if event == "return" and id(frame) in entered:
            entered.discard(id(frame))
            return
        if holds_timeout(frame):
            if event == "call":
                entered.add(id(frame))
            seen.append((os.path.relpath(path, root), frame.f_code.co_name))

    from envlayer.cli.app import main

    sys.setprofile(profile)
    try:
        main(argv)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    return seen


def report(seen: list[tuple[str, str]], steps: bool = False) -> str:
    """Files in first-reached order (or, with ``steps``, every frame in order), the distinct
    count and the returns."""
    order: list[str] = []
    runs: list[str] = []
    for path, _ in seen:
        if path not in order:
            order.append(path)
        if not runs or runs[-1] != path:
            runs.append(path)
    returns = len(runs) - len(set(runs))
    shown = [f"{path}:{function}" for path, function in seen] if steps else order
    lines = [f"{i + 1:2}. {item}" for i, item in enumerate(shown)]
    lines.append(f"files crossed: {len(order)}; functions: {len({f for f in seen})}; returns to a file left: {returns}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--backend", default="docker")
    parser.add_argument("-o", dest="options", action="append", default=[])
    parser.add_argument("--steps", action="store_true", help="every function in order, not only the files")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    plugins = os.path.join(root, "plugins")
    sys.path[:0] = [root] + [os.path.join(plugins, name) for name in sorted(os.listdir(plugins))]
    options = [word for item in args.options for word in ("-o", item)]
    task = f"timeout-walk-{uuid.uuid4().hex[:8]}"
    argv = ["exec", "--no-broker", "--rm", "--task", task, "--backend", args.backend, *options]
    argv += ["--timeout", str(MARK), "--", "true"]
    print(report(walk(argv, root), steps=args.steps))


if __name__ == "__main__":
    main()
