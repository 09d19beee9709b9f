"""``envlayer exec``: from parsed arguments to the command's exit code, shared by the
in-process CLI and the session broker (:mod:`envlayer.cli.broker`), so both parse, resolve
and report exactly alike.

* :func:`plan_exec` resolves the arguments (timeout check, command words, configuration,
  ``-e``/``--env-file``, stdin) into an :class:`ExecPlan`, before any sandbox exists.
* :func:`run_exec` runs the plan on an environment and reports on a :class:`Console`:
  output streamed as it arrives (or the ``--json`` object), notes, the timeout line, and
  returns the exit code (the command's own, 124 on timeout, 130 interrupted or cancelled,
  141 when our reader went away, 125 when envlayer failed).

The caller decides where the environment comes from and what "release" means: the
in-process CLI opens one per call and cleans it up (:func:`release_after_exec`); the
broker keeps its environments for the next call.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.cancel_token import CancelToken
from envlayer.cli.console import (
    BROKEN_PIPE_EXIT_CODE,
    ENVLAYER_FAILURE,
    INTERRUPTED_LINE,
    Console,
    error_object,
    settings_of,
)
from envlayer.cli.exec_env import exec_env
from envlayer.cli.state_loss import state_loss_note
from envlayer.cli.task_sandbox import refusal
from envlayer.config import Settings
from envlayer.environment import Command, Environment
from envlayer.errors import EnvlayerError
from envlayer.request import check_user, normalize_timeout
from envlayer.result import INTERRUPT_EXIT_CODE, ExecResult
from envlayer.sandbox.recorded_options import SandboxOptionsDiffer


@dataclass(frozen=True)
class ExecPlan:
    """One ``exec``, resolved: what to run, with which configuration and arguments."""

    command: Command
    settings: Settings
    exec_kwargs: dict[str, Any]
    """``cwd``, ``env``, ``timeout``, ``stdin`` for :func:`envlayer.run`."""
    user: str | None = None
    """``--user``: passed on only to a backend with ``exec_as_user`` (else exit 125)."""


def command_of(words: Sequence[str]) -> Command:
    """The command from the rest of the line: one word is a shell string, several an argv."""
    words = list(words[1:] if words and words[0] == "--" else words)
    if not words:
        raise EnvlayerError("no command given", hint="write it after the options: envlayer exec [OPTIONS] CMD [ARG...]")
    return words[0] if len(words) == 1 else words


def plan_exec(
    args: argparse.Namespace,
    read_stdin: Callable[[], bytes],
    settings: Settings | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> ExecPlan:
    """Resolve ``exec``'s arguments; ``read_stdin()`` is called only with ``-i``;
    ``settings`` defaults to :func:`settings_of` ``(args)``; ``environ`` and ``cwd`` (the
    caller's, through the broker; default this process's) give ``-e NAME`` its value and
    a relative ``--env-file`` its directory.
    Raises :class:`EnvlayerError` (nothing ran, no sandbox was made for it)."""
    normalize_timeout(args.timeout, default=None)
    command = command_of(args.command)
    settings = settings if settings is not None else settings_of(args)
    env_files = [os.path.join(cwd, path) if cwd else path for path in args.env_file or []]
    env_vars = exec_env(args.env or [], env_files, environ)
    stdin = read_stdin() if args.stdin else None
    kwargs = {"cwd": args.cwd, "env": env_vars or None, "timeout": args.timeout, "stdin": stdin}
    user = None if args.user is None else check_user(args.user)
    return ExecPlan(command, settings, kwargs, user)


def output_fields(stream: str, data: bytes) -> dict[str, str]:
    """``STREAM`` and ``STREAM_encoding`` of the ``--json`` object: the text with
    ``"utf-8"`` when ``data`` is valid UTF-8, else base64 of the exact bytes with
    ``"base64"`` (nothing is replaced by U+FFFD)."""
    try:
        return {stream: data.decode("utf-8"), f"{stream}_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {stream: base64.b64encode(data).decode("ascii"), f"{stream}_encoding": "base64"}


def exec_json(result: ExecResult | None, notes: list[str], exc: BaseException | None = None) -> dict[str, Any]:
    """The ``--json`` object of one exec: every field always present (null when unknown)."""

    def truncation(value: Any) -> Any:
        return value and dataclasses.asdict(value)

    return {
        "exit_code": result.exit_code if result else ENVLAYER_FAILURE,
        "timed_out": bool(result and result.timed_out),
        "timeout": result.timeout if result else None,
        "duration": result.duration if result else None,
        **output_fields("stdout", result.stdout if result else b""),
        **output_fields("stderr", result.stderr if result else b""),
        "stdout_truncation": truncation(result.stdout_truncation) if result else None,
        "stderr_truncation": truncation(result.stderr_truncation) if result else None,
        "recovered": result.recovered if result else "",
        "notice": result.notice if result else "",
        "notes": notes,
        "error": error_object(exc),
    }


def exec_failed(args: argparse.Namespace, console: Console, exc: EnvlayerError, notes: list[str] | None = None) -> int:
    """Report a failure of envlayer itself (``--json``: the exec object with ``error``); 125.
    A sandbox found with other options mid-call (replaced by another process) gets the
    CLI's hint (``--replace``)."""
    if isinstance(exc, SandboxOptionsDiffer):
        exc = refusal(exc)
    if args.json:
        console.json(exec_json(None, notes or [], exc))
    console.error(exc)
    return ENVLAYER_FAILURE


Release = Callable[[], tuple[list[str], bool]]
"""``release() -> (notes, ok)``: what to do with the environment after the command; the
notes are printed (or put in ``--json``), ``ok`` False means envlayer failed (125)."""


def _execute(
    args: argparse.Namespace,
    plan: ExecPlan,
    env: Environment,
    console: Console,
    forward: Callable[[str, bytes], None],
    cancel: CancelToken | None,
) -> tuple[ExecResult, bool]:
    """Run ``plan``'s command on ``env``: its result, and whether its output was streamed
    through ``forward`` (never under ``--json``, which prints one object at the end)."""
    kwargs = {**plan.exec_kwargs, "cancel": cancel, "user": plan.user}
    if args.json:
        return lifecycle.run(env, plan.command, **kwargs), False
    outcome = lifecycle.run_with_output(env, plan.command, on_output=forward, **kwargs)
    if outcome.note and args.backend:
        console.note(outcome.note)
    return outcome.result, outcome.streamed


def _report_result(
    args: argparse.Namespace,
    console: Console,
    result: ExecResult,
    notes: list[str],
    *,
    quiet_stderr: bool,
    streamed: bool,
) -> int:
    """Print what is left to say about a finished command; its exit code.
    ``quiet_stderr``: its stderr was already forwarded; ``streamed``: its output was."""
    if result.cancelled:
        console.line(INTERRUPTED_LINE)
        return INTERRUPT_EXIT_CODE
    if result.recovered:
        console.note(state_loss_note(result.recovered))
    if args.json:
        console.json(exec_json(result, notes))
        return result.exit_code
    if result.notice:  # the command ran somewhere else than asked (a deleted directory)
        console.note(result.notice)
    if result.stderr and not quiet_stderr:
        # A message the backend put in the result without streaming it (a command that
        # could not start: 127, a missing working directory: 126) must still be seen.
        console.write("stderr", result.stderr)
    if result.timed_out:
        after = f" after {result.timeout}s" if result.timeout is not None else ""
        console.line(f"envlayer: command timed out{after} and was killed")
    elif result.truncated and not streamed:
        console.line("envlayer: output exceeded max_output_bytes and was truncated")
    return result.exit_code


def run_exec(
    args: argparse.Namespace,
    plan: ExecPlan,
    env: Environment,
    console: Console,
    release: Release,
    cancel: CancelToken | None = None,
) -> int:
    """Run ``plan`` on ``env``, report on ``console``, call ``release`` once; return the
    exit code (see the module docstring). ``cancel`` is passed to ``exec`` when given."""
    stderr_forwarded = False

    def forward(stream: str, chunk: bytes) -> None:
        nonlocal stderr_forwarded
        stderr_forwarded = stderr_forwarded or (stream == "stderr" and bool(chunk))
        console.write(stream, chunk)

    def finish() -> tuple[list[str], bool]:
        notes, ok = release()
        if not args.json:
            for note in notes:
                console.note(note)
        return notes, ok

    try:
        result, streamed = _execute(args, plan, env, console, forward, cancel)
    except KeyboardInterrupt:
        console.line(INTERRUPTED_LINE)
        finish()
        return INTERRUPT_EXIT_CODE
    except BrokenPipeError:  # our reader went away (`envlayer exec -- yes | head`): stop, as sh would
        finish()
        console.silence_stdout()
        return BROKEN_PIPE_EXIT_CODE
    except EnvlayerError as exc:
        notes, _ = finish()
        return exec_failed(args, console, exc, notes)
    except BaseException:
        finish()
        raise
    notes, cleaned = finish()
    if not cleaned:
        return ENVLAYER_FAILURE
    return _report_result(args, console, result, notes, quiet_stderr=stderr_forwarded, streamed=streamed)


def release_after_exec(env: Environment, remove: bool, console: Console) -> tuple[list[str], bool]:
    """Clean ``env`` up after an in-process ``exec`` and wait for its teardown; ``remove``
    (``--rm``, as ``docker run --rm``): the sandbox goes with its durable data (``purge``).
    Returns the fallback notes and whether cleanup succeeded (a failure is reported on
    ``console``)."""
    notes = []
    try:
        cleaned = lifecycle.cleanup(env, purge=remove)
        if cleaned.note:
            notes.append(cleaned.note)
        if not lifecycle.wait_for_cleanup(env, 30.0):
            notes.append("the sandbox's teardown was still running after 30s; it continues in the background")
    except EnvlayerError as exc:
        console.error(exc, "cleanup failed")
        return notes, False
    return notes, True
