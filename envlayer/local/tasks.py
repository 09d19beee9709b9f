"""The options a local task was opened with, kept in a file so that later calls on the
task (``envlayer exec --task T`` from anywhere) take them as defaults and a call whose
options differ is refused or announced (see :mod:`envlayer.sandbox.recorded_options`).

Only for a named task (``--task``: the default task runs wherever it is called) under
``on_fingerprint_mismatch = "error"`` or ``"recreate"`` (the CLI sets one of them); the
default ``"none"`` keeps no record: commands on this machine leave nothing behind to
replace. The record of (profile, task) is
``${XDG_STATE_HOME:-~/.local/state}/envlayer/local-tasks/<profile>/<task slug>-<hash>.json``,
written atomically (a temporary file renamed over it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from typing import Any

from envlayer.options import BaseOptions
from envlayer.sandbox import recorded_options
from envlayer.sandbox.tags import slug

log = logging.getLogger("envlayer.local")

SHAPING_OPTIONS = ("cwd", "env", "shell", "inherit_env", "env_blocklist", "forward_env")
"""The options that make a local task what it is, recorded in its file."""


def record_path(profile: str, task: str) -> str:
    """Where the record of (``profile``, ``task``) lives (the module docstring)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    digest = hashlib.sha256(task.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return os.path.join(base, "envlayer", "local-tasks", slug(profile, 63), f"{slug(task, 40)}-{digest}.json")


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".record-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _unusable(options: BaseOptions) -> str:
    """Why this machine cannot run commands with ``options`` ("" when it can)."""
    cwd = getattr(options, "cwd", None)
    if cwd is not None and not os.path.isdir(os.path.expanduser(cwd)):
        return f"cwd {cwd!r} is not a directory"
    shell = getattr(options, "shell", None)
    if shell and not shutil.which(shell):
        return f"shell {shell!r} is not an executable here"
    return ""


def claim(options: BaseOptions, *, profile: str, task: str, mode: str) -> str:
    """Record ``options`` as the task's, after comparing them with the record there is.
    Returns "" or, under ``mode = "recreate"`` when they differ, the notice of the change
    (also logged); raises :class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer`
    under ``"error"`` when they differ (the record is kept). Options this machine cannot
    use (a ``cwd`` that is not a directory, a ``shell`` that is not an executable) are
    never recorded: the command fails with its own error and the record, if any, stays,
    so one mistyped call does not stick to every later one."""
    unusable = _unusable(options)
    if unusable:
        log.info("local task %r: not recording its options: %s", task, unusable)
        return ""
    path = record_path(profile, task)
    requested = recorded_options.record_of(options, SHAPING_OPTIONS)
    try:
        with open(path) as fh:
            found: str | None = fh.read()
    except FileNotFoundError:
        found = None
    recorded: dict[str, Any] | None = recorded_options.decode(found)
    notice = ""
    if recorded is not None:
        if not recorded_options.option_changes(recorded, requested):
            return ""
        notice = recorded_options.settle_mismatch(
            what=f"local task {task!r}",
            mode=mode,
            found=found,
            requested=requested,
            logger=log,
            outcome="takes the new ones in place (nothing was removed)",
        )
    _write(path, recorded_options.encode(requested))
    return notice
