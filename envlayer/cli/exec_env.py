"""Per-command environment variables for ``envlayer exec``: ``-e`` and ``--env-file``.

Forms, as ``docker run`` takes them:

* ``-e NAME=VALUE``: the value as written (visible to every user of the machine in
  envlayer's own command line, e.g. through ``ps``: use it for non-secrets only);
* ``-e NAME``: the value of ``NAME`` in envlayer's own environment (it never appears in
  any command line); an unset ``NAME`` is an error;
* ``--env-file FILE``: one ``NAME=VALUE`` or ``NAME`` (taken from the environment) per
  line; blank lines and lines starting with ``#`` are skipped; values are taken
  literally (no quotes removed, no expansion).

Later entries win: files first (in order), then ``-e`` flags. Errors name the flag or the
file and line, never a value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from envlayer.errors import EnvlayerError


def _entry(text: str, environ: Mapping[str, str], where: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "a").isalnum():
        raise EnvlayerError(
            f"{where}: expected NAME=VALUE or NAME with NAME a variable name, got {name[:40]!r}",
            hint="write NAME=VALUE, or NAME alone to pass the variable from this environment",
        )
    if sep:
        return name, value
    if name not in environ:
        raise EnvlayerError(
            f"{where}: {name} is not set in envlayer's environment",
            hint=f"export {name} first, or write {name}=VALUE",
        )
    return name, environ[name]


def read_env_file(path: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of one ``--env-file`` (see the module docstring).
    Raises :class:`EnvlayerError` naming the file (and line) when it cannot be used."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise EnvlayerError(
            f"--env-file {path}: cannot read: {reason}", hint="check the path and its permissions"
        ) from None
    out = {}
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, value = _entry(line.lstrip(), environ, f"--env-file {path}, line {number}")
        out[name] = value
    return out


def exec_env(flags: Sequence[str], files: Sequence[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables for one command from ``--env-file`` files then ``-e`` flags."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for path in files:
        out.update(read_env_file(path, environ))
    for text in flags:
        name, value = _entry(text, environ, "-e")
        out[name] = value
    return out
