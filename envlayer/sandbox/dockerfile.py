"""An image built from a Dockerfile: its build context, what ``.dockerignore`` leaves in
it, and the digest that names and caches the image.

Backends that build (docker, modal, daytona) take the options ``dockerfile`` and
``build_context`` (:class:`~envlayer.sandbox.options.DockerfileOptions`) and call
:func:`resolve_build` once when they open a sandbox. The digest covers the Dockerfile's
bytes and every file the build can see (path, type, permission bits, content or link
target), so it changes exactly when a rebuild could give a different image; backends tag
the image with it and put it in the sandbox's fingerprint, so an unchanged context
reuses the cached image and the running sandbox, and a changed one builds a new image
and replaces the sandbox (with the fingerprint-mismatch notice).

``.dockerignore`` follows Docker's rules (the builder's ``patternmatcher``): one pattern
a line, ``#`` comments, ``!`` re-includes, a leading ``/`` or ``./`` ignored, ``*`` and
``?`` never cross ``/``, ``**`` crosses any number of directories, and a pattern that
matches a directory matches everything under it; the last matching pattern wins.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from envlayer.errors import ConfigError

IMAGE_REPOSITORY = "envlayer-build"
"""Repository of the images built from a Dockerfile; the tag is the start of the digest."""
_CHUNK = 1 << 20


@dataclass(frozen=True)
class DockerfileBuild:
    """A Dockerfile, its build context and their digest (see the module docstring)."""

    dockerfile: Path
    """Absolute path of the Dockerfile."""
    context: Path
    """Absolute path of the build context directory."""
    digest: str
    """sha256 (hex) of the Dockerfile and every file of the context the build can see."""

    @property
    def tag(self) -> str:
        """``envlayer-build:<first 32 hex digits of the digest>``: the image's name."""
        return f"{IMAGE_REPOSITORY}:{self.digest[:32]}"

    @property
    def dockerfile_in_context(self) -> str | None:
        """The Dockerfile's path relative to the context (POSIX form), None when it lies outside."""
        try:
            return self.dockerfile.relative_to(self.context).as_posix()
        except ValueError:
            return None

    def read_dockerfile(self) -> str:
        """The Dockerfile's text."""
        return self.dockerfile.read_text(encoding="utf-8")


def resolve_build(
    dockerfile: str | None, build_context: str | None, *, source: str = "options"
) -> DockerfileBuild | None:
    """The build of ``dockerfile`` (None when unset) with ``build_context`` (default: the
    Dockerfile's directory); relative paths are taken from the current directory.

    Raises:
        ConfigError: the Dockerfile is not a readable file or the context not a directory
            (naming the option and what to do).
    """
    if not dockerfile:
        return None
    path = Path(dockerfile).expanduser().absolute()
    if not path.is_file():
        raise ConfigError(
            f"{path} is not a file",
            source=source,
            key="dockerfile",
            hint="set dockerfile to the path of a Dockerfile on this machine "
            "(relative paths start at the current directory)",
        )
    context = Path(build_context).expanduser().absolute() if build_context else path.parent
    if not context.is_dir():
        raise ConfigError(
            f"{context} is not a directory",
            source=source,
            key="build_context",
            hint="set build_context to the directory the Dockerfile's COPY and ADD read from, or leave it unset "
            "(the Dockerfile's directory)",
        )
    return DockerfileBuild(dockerfile=path, context=context, digest=context_digest(path, context))


def context_digest(dockerfile: Path, context: Path) -> str:
    """sha256 (hex) of ``dockerfile`` and the files of ``context`` that ``.dockerignore``
    leaves in (see the module docstring). Unreadable files raise ``OSError``."""
    digest = hashlib.sha256()
    digest.update(b"dockerfile\0")
    _hash_file(digest, dockerfile)
    ignore = DockerIgnore.load(context)
    for relative, path in _walk(context):
        if ignore.excludes(relative):
            continue
        st = path.lstat()
        digest.update(f"\0{relative}\0{stat.S_IFMT(st.st_mode):o}\0{stat.S_IMODE(st.st_mode):o}\0".encode())
        if stat.S_ISLNK(st.st_mode):
            digest.update(os.readlink(path).encode())
        elif stat.S_ISREG(st.st_mode):
            _hash_file(digest, path)
    return digest.hexdigest()


def _hash_file(digest: hashlib._Hash, path: Path) -> None:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)


def _walk(context: Path) -> list[tuple[str, Path]]:
    """Every entry under ``context`` as (POSIX relative path, path), sorted; symlinks are
    entries, never followed."""
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(context, followlinks=False):
        base = Path(root)
        for name in dirs + files:
            path = base / name
            found.append((path.relative_to(context).as_posix(), path))
    return sorted(found)


class DockerIgnore:
    """The patterns of a context's ``.dockerignore`` (see the module docstring)."""

    def __init__(self, lines: list[str]) -> None:
        self._rules: list[tuple[re.Pattern[str], bool]] = []
        for line in lines:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            negated = text.startswith("!")
            text = os.path.normpath(text.removeprefix("!").strip()).lstrip("/")
            if text in ("", "."):
                continue
            self._rules.append((re.compile(_translate(text)), negated))

    @classmethod
    def load(cls, context: Path) -> DockerIgnore:
        """The rules of ``context/.dockerignore`` (none when the file is absent)."""
        path = context / ".dockerignore"
        return cls(path.read_text(encoding="utf-8").splitlines() if path.is_file() else [])

    def excludes(self, relative: str) -> bool:
        """Whether the build cannot see ``relative`` (a POSIX path inside the context)."""
        parts = relative.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for pattern, negated in self._rules:
            if any(pattern.fullmatch(c) for c in candidates):
                excluded = not negated
        return excluded


def _translate(pattern: str) -> str:
    """A ``.dockerignore`` pattern as a regular expression over POSIX relative paths."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            if body.startswith(("!", "^")):
                body = "^" + body[1:]
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
