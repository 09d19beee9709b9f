"""The CLI's shared console: where a command's output and envlayer's messages go
(:class:`Console`), the exit codes every command shares, the ``--json`` text and error
object, and the configuration a command's flags select (:func:`settings_of`). Used by every
command, in process and through the session broker alike."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from envlayer.cli.config_check import check_backend_tables
from envlayer.config import Settings, load_settings
from envlayer.errors import EnvlayerError

ENVLAYER_FAILURE = 125
"""Exit code when envlayer or a backend plugin failed (for ``exec``: before or around the
command, as `docker run`)."""

BROKEN_PIPE_EXIT_CODE = 141
"""``exec`` exit code when envlayer's own stdout was closed by its reader (128 + SIGPIPE,
as a shell reports it); the command's tree was killed."""

INTERRUPTED_LINE = "envlayer: interrupted; the command was killed"


def silence_stdout() -> None:
    """Point this process's stdout at /dev/null once its reader went away, so nothing
    more fails on it (not even the interpreter's flush at exit)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def error_object(exc: BaseException | None) -> dict[str, str] | None:
    """The ``--json`` form of a failure, the same in every command (None: no failure)."""
    if exc is None:
        return None
    if isinstance(exc, EnvlayerError):
        return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    return {"type": type(exc).__name__, "message": str(exc), "hint": ""}


def json_text(data: Any) -> str:
    """The text every ``--json`` output uses (indented, sorted keys)."""
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def parse_assignments(items: Sequence[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` words as a dict. Raises :class:`EnvlayerError` naming ``flag``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EnvlayerError(f"{flag} expects KEY=VALUE, got {item!r}", hint=f"write {flag} KEY=VALUE")
        out[key] = value
    return out


FLAG_NAMES = {"backend": "--backend", "profile": "--profile"}
"""The flags that set core settings, as errors and ``envlayer config`` name them."""


def settings_of(
    args: argparse.Namespace, *, environ: Mapping[str, str] | None = None, cwd: str | None = None
) -> Settings:
    """The configuration for a command's ``--config``, ``--backend``, ``--profile``, ``-o``;
    ``environ`` and ``cwd``: the caller's (through the broker; default this process's)."""
    texts = parse_assignments(getattr(args, "option", None) or [], "-o")
    config = os.path.join(cwd, args.config) if cwd and args.config else args.config
    settings = load_settings(
        config_path=config,
        env=environ,
        cwd=cwd,
        backend=args.backend,
        profile=args.profile,
        option_texts=texts or None,
        flag_names=FLAG_NAMES,
    )
    check_backend_tables(settings)
    return settings


@dataclass
class Console:
    """Where one command's output and envlayer's messages go: two byte streams (the
    process's own in-process, the client's through the broker)."""

    stdout: BinaryIO
    stderr: BinaryIO
    debug: bool = False
    silence_stdout: Callable[[], None] = lambda: None
    """Called when stdout's reader went away, so nothing more is written to it."""

    @classmethod
    def of_process(cls, *, debug: bool = False) -> Console:
        """This process's stdout and stderr."""

        return cls(sys.stdout.buffer, sys.stderr.buffer, debug, silence_stdout)

    def write(self, stream: str, chunk: bytes) -> None:
        """Write ``chunk`` to ``"stdout"`` or ``"stderr"`` at once (flushed)."""
        target = self.stdout if stream == "stdout" else self.stderr
        target.write(chunk)
        target.flush()

    def line(self, text: str) -> None:
        """One line on stderr."""
        self.write("stderr", (text + "\n").encode())

    def note(self, text: str) -> None:
        """``envlayer: note: TEXT`` on stderr."""
        self.line(f"envlayer: note: {text}")

    def error(self, exc: BaseException, prefix: str = "error") -> None:
        """``envlayer: PREFIX: EXC`` on stderr, after its traceback under ``--debug``."""
        if self.debug:
            self.write("stderr", "".join(traceback.format_exception(exc)).encode())
        self.line(f"envlayer: {prefix}: {exc}")

    def json(self, data: Any) -> None:
        """``data`` as ``--json`` output on stdout."""
        self.write("stdout", (json_text(data) + "\n").encode())
