"""The options that sandbox backends share, written once.

Three layers, each a :class:`~envlayer.options.BaseOptions` subclass a backend's
``Options`` derives from (option names, defaults, config keys and validation messages
are those every built-in backend had):

* :class:`SandboxOptions`: ``exec_mode`` (every backend built on
  :class:`~envlayer.sandbox.base.SandboxEnvironment`: local, ssh, docker, kubernetes,
  modal, daytona).
* :class:`ManagedSandboxOptions`: a sandbox that envlayer creates and finds again by
  (profile, task): ``persist_across_processes``, ``on_fingerprint_mismatch``,
  ``max_transfer_bytes``, an absolute ``cwd``, valid variable names in ``env``
  (docker, kubernetes, modal, daytona).
* :class:`ContainerOptions`: a container-like sandbox with a ``shell`` option and
  ``/workspace`` as its default working directory, :attr:`ContainerOptions.workdir`
  (docker, kubernetes, modal).

:class:`HostVariablesOptions` adds ``forward_env`` to a backend whose commands can get
variables of this machine's environment (docker, kubernetes). :class:`DockerfileOptions`
adds ``dockerfile`` and ``build_context``: an image built from a Dockerfile (docker,
modal, daytona; kubernetes refuses them, it needs an image in a registry).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal

from envlayer.options import BaseOptions, OptionError, option
from envlayer.request import ENV_NAME

EXEC_MODES = ("session", "oneshot")
DEFAULT_WORKDIR = "/workspace"


def check_variable_names(key: str, names: Iterable[str]) -> None:
    """Raise :class:`OptionError` for ``key`` naming the first of ``names`` that is not a
    valid environment variable name (see :data:`envlayer.request.ENV_NAME`)."""
    for name in names:
        if not ENV_NAME.match(name):
            raise OptionError(key, f"{name!r} is not a valid variable name")


@dataclass(kw_only=True)
class SandboxOptions(BaseOptions):
    """Options of every backend built on :class:`~envlayer.sandbox.base.SandboxEnvironment`."""

    exec_mode: Literal["session", "oneshot"] = option(
        "session",
        doc="`session`: commands share one persistent shell (cd, export, shell options and functions persist); "
        "`oneshot`: every command runs in a fresh process, nothing persists.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.exec_mode not in EXEC_MODES:
            raise OptionError("exec_mode", f"must be one of {', '.join(EXEC_MODES)}")


@dataclass(kw_only=True)
class ManagedSandboxOptions(SandboxOptions):
    """Options of a sandbox envlayer creates, finds by (profile, task) and removes."""

    where: ClassVar[str] = "sandbox"
    """What the sandbox is called in messages ("must be an absolute path inside the ...")."""

    persist_across_processes: bool = option(
        True,
        doc="Share one long-lived sandbox per (profile, task) across processes; cleanup() leaves it running. "
        "False: a private sandbox per environment, removed by cleanup(). Per-process setting.",
    )
    on_fingerprint_mismatch: Literal["recreate", "error"] = option(
        "recreate",
        doc="What to do when the (profile, task) sandbox was made from different options: `recreate` removes "
        "it and creates a new one; `error` raises. Per-process setting.",
    )
    max_transfer_bytes: int = option(
        1_073_741_824, doc="Largest directory archive upload_dir/download_dir will move, in bytes. Per-process setting."
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cwd is not None and not self.cwd.startswith("/"):
            raise OptionError("cwd", f"must be an absolute path inside the {self.where}")
        if self.max_transfer_bytes < 0:
            raise OptionError("max_transfer_bytes", "must be >= 0")
        check_variable_names("env", self.env)


@dataclass(kw_only=True)
class ContainerOptions(ManagedSandboxOptions):
    """A managed sandbox with a configurable ``shell`` whose working directory defaults
    to ``/workspace``."""

    shell: str = option("/bin/sh", doc="Shell for the session and for string commands. Per-process setting.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.shell.startswith("/"):
            raise OptionError("shell", "must be an absolute path, e.g. /bin/sh")

    @property
    def workdir(self) -> str:
        """The sandbox's working directory (``cwd`` or ``/workspace``)."""
        return self.cwd or DEFAULT_WORKDIR


@dataclass(kw_only=True)
class HostVariablesOptions(BaseOptions):
    """``forward_env``: variables of this machine's environment passed to every command."""

    forward_env: list[str] = option(
        doc="Names of host environment variables whose values are passed to every command (read when the "
        "environment is created; the values never go into the sandbox's spec, labels, argv or logs).",
        factory=list,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_variable_names("forward_env", self.forward_env)


@dataclass(kw_only=True)
class DockerfileOptions(BaseOptions):
    """``dockerfile`` and ``build_context``: the sandbox's image built from a Dockerfile
    (see :mod:`envlayer.sandbox.dockerfile`)."""

    dockerfile: str | None = option(
        None,
        doc="Build the sandbox's image from this Dockerfile (a path on this machine; relative to the current "
        "directory) instead of using `image`. The image is cached by a digest of the Dockerfile and every file of "
        "the build context (.dockerignore respected): an unchanged context reuses it, a changed one rebuilds and "
        "replaces the sandbox.",
    )
    build_context: str | None = option(
        None,
        doc="Directory whose files the Dockerfile's COPY and ADD read (its `.dockerignore` applies); the "
        "Dockerfile's own directory when unset. Only with `dockerfile`.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.build_context and not self.dockerfile:
            raise OptionError("build_context", "is only used with dockerfile; set dockerfile too, or remove it")
