"""The one exception hierarchy of envlayer.

Every error envlayer raises on purpose is an :class:`EnvlayerError`. Each carries a
``hint``: one sentence telling the user what to do next. ``str(error)`` includes it.

File errors also subclass the matching built-in (``FileNotFoundError``,
``PermissionError``, ``IsADirectoryError``) so code written against plain Python
file semantics keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable


class EnvlayerError(Exception):
    """Base class. ``message`` says what went wrong, ``hint`` what to do about it."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        self.message = message
        self.hint = hint
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


# --- backends and the registry ------------------------------------------------


class BackendNotFound(EnvlayerError):
    """No installed distribution registers a backend under this name. ``package`` is the
    distribution known to provide it (None when none is known), ``install`` how to install
    it from where the user is (default: ``pip install``; the registry says more, see
    :mod:`envlayer.discovery.install_hints`)."""

    def __init__(
        self, name: str, installed: Iterable[str], package: str | None, *, source: str = "", install: str = ""
    ) -> None:
        self.name = name
        self.installed = sorted(installed)
        self.package = package
        self.source = source
        """Where the name was configured (a file and key, ``$ENVLAYER_BACKEND``); "" when
        it was passed in code or on the command line."""
        self.install = install or (f"install it with `pip install {package}`" if package else "")
        listed = ", ".join(self.installed) or "none"
        import difflib

        close = difflib.get_close_matches(name, self.installed, n=1)
        if package:
            hint = self.install
        elif close:
            hint = f"did you mean {close[0]!r}?"
        else:
            hint = "check the spelling, or install the package that provides it"
        where = f"{source}: " if source else ""
        super().__init__(f"{where}unknown backend {name!r}; installed backends: {listed}", hint=hint)


class BackendLoadError(EnvlayerError):
    """A backend is registered but cannot be used: its module failed to import
    (``reason="import"``), or its entry point does not name an
    :class:`~envlayer.Environment` subclass (``reason="not_environment"``). The original
    exception is chained."""

    def __init__(
        self, name: str, distribution: str, target: str, cause: BaseException, *, reason: str = "import"
    ) -> None:
        self.name = name
        self.distribution = distribution
        self.target = target
        self.reason = reason
        if reason == "not_environment":
            hint = (
                f"the entry point {name} = {target} of {distribution} must name an envlayer.Environment subclass: "
                f"a bug in {distribution}; report it to its authors, or uninstall it (`pip uninstall {distribution}`)"
            )
        else:
            hint = (
                f"reinstall it (`pip install --force-reinstall {distribution}`) "
                "or check that its dependencies are installed; `envlayer --debug` shows the traceback"
            )
        super().__init__(
            f"backend {name!r} from {distribution} ({target}) failed to load: {type(cause).__name__}: {cause}",
            hint=hint,
        )


class PluginError(EnvlayerError):
    """A backend raised something its contract does not allow (not an
    :class:`EnvlayerError`) while being constructed or called: a bug in the plugin.
    ``backend``, ``distribution`` and ``stage`` (e.g. ``"constructor"``, ``"exec"``) say
    where; the original exception is chained (``__cause__``)."""

    def __init__(self, backend: str, distribution: str, stage: str, cause: BaseException) -> None:
        self.backend = backend
        self.distribution = distribution
        self.stage = stage
        super().__init__(
            f"backend {backend!r} from {distribution} failed in {stage}: {type(cause).__name__}: {cause}",
            hint=f"a bug in {distribution}: report it to its authors (`envlayer --debug` shows the traceback), "
            "or use another backend",
        )


class BackendConflict(EnvlayerError):
    """Two installed distributions register the same backend name."""

    def __init__(self, name: str, distributions: Iterable[str]) -> None:
        self.name = name
        self.distributions = sorted(distributions)
        super().__init__(
            f"backend name {name!r} is registered by more than one package: " + ", ".join(self.distributions),
            hint="uninstall all but one of them",
        )


class BackendUnavailable(EnvlayerError):
    """The backend's infrastructure cannot be reached: daemon down, host unreachable,
    connection lost, credentials refused. The environment may be rebuilt later."""


class ImageBuildFailed(EnvlayerError):
    """Building the sandbox's image from its ``dockerfile`` failed: a step of the Dockerfile
    failed (``log`` holds the end of the build log) or the builder refused the context.
    Nothing was created; fix the Dockerfile and try again."""

    def __init__(self, message: str, *, log: str = "", hint: str = "") -> None:
        self.log = log
        super().__init__(message + (f"\n{log}" if log else ""), hint=hint)


# --- configuration ------------------------------------------------------------


class ConfigError(EnvlayerError):
    """A configuration value is malformed. ``source`` names the file or variable,
    ``key`` the offending key."""

    def __init__(self, message: str, *, source: str, key: str | None = None, hint: str = "") -> None:
        self.source = source
        self.key = key
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {message}", hint=hint)


# --- environments -------------------------------------------------------------


class InvalidArgument(EnvlayerError, ValueError):
    """A call's argument is malformed: a timeout that is negative, NaN, infinite or
    absurdly large, a NUL byte in a command, path or variable, an environment variable
    name that is not an identifier, an empty argv. Raised before anything is sent to
    the sandbox: nothing ran, nothing changed, and the environment stays usable (it is
    bad input, not an outage, so agent managers never evict for it).

    ``argument`` names the offending parameter (``timeout``, ``env``, ``path``...).
    Also a ``ValueError``, so plain-Python callers can catch it as one."""

    def __init__(self, argument: str, message: str, *, hint: str = "") -> None:
        self.argument = argument
        super().__init__(f"{argument}: {message}", hint=hint)


class UnsupportedArgument(InvalidArgument):
    """A well-formed ``exec`` keyword that this backend lacks the capability for and that
    must not be dropped (``user`` without ``exec_as_user``): refused before anything ran."""


class EnvironmentClosed(EnvlayerError):
    """The environment was cleaned up; create a new one."""


class ExecTimeout(EnvlayerError):
    """Raised by :meth:`ExecResult.check` for a command that hit its timeout.
    The process tree was killed; ``result`` holds the partial output."""

    def __init__(self, result: object, timeout: float | None) -> None:
        self.result = result
        super().__init__(
            f"command timed out after {timeout}s and was killed",
            hint="raise the timeout, or run long jobs in the background",
        )


class CommandFailed(EnvlayerError):
    """Raised by :meth:`ExecResult.check` for a non-zero exit code."""

    def __init__(self, result: object, exit_code: int) -> None:
        self.result = result
        self.exit_code = exit_code
        super().__init__(f"command exited with code {exit_code}")


class SandboxPathError(EnvlayerError, PermissionError):
    """A file path resolves outside the directory the environment confines files to."""

    def __init__(self, path: str, root: str) -> None:
        self.path = path
        self.root = root
        super().__init__(
            f"path {path!r} is outside the sandbox root {root!r}",
            hint=f"use a path under {root}",
        )


class SandboxFileNotFound(EnvlayerError, FileNotFoundError):
    """The file does not exist inside the environment."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"no such file in the environment: {path!r}")


class SandboxPermissionDenied(EnvlayerError, PermissionError):
    """The sandbox's user lacks the rights for a file operation: reading a file it cannot
    read, replacing a read-only file, creating a file where it cannot write. Nothing was
    changed. Backends check with the sandbox user's rights, never with the daemon's."""

    def __init__(self, path: str, operation: str, detail: str = "") -> None:
        self.path = path
        self.filename = path
        self.operation = operation
        super().__init__(
            f"permission denied: cannot {operation} {path!r}" + (f" ({detail})" if detail else ""),
            hint="change the mode or owner inside the sandbox (chmod/chown), or run as a user with the rights",
        )


class SandboxIsADirectory(EnvlayerError, IsADirectoryError):
    """A file operation named a directory."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"is a directory: {path!r}", hint="name a file, or use the directory transfer API")


class SandboxFileError(EnvlayerError, OSError):
    """A file operation failed inside the sandbox for another reason than a missing path or
    a denied permission: a full disk, a read-only filesystem, an archive the sandbox could
    not pack or unpack. ``detail`` quotes the sandbox's own error."""

    def __init__(self, path: str, operation: str, detail: str) -> None:
        self.path = path
        self.filename = path
        self.operation = operation
        super().__init__(f"cannot {operation} {path!r} in the sandbox: {detail}", hint=_file_error_hint(detail))


def _file_error_hint(detail: str) -> str:
    """What to do about a sandbox's file error, by its own words."""
    low = detail.lower()
    if "read-only" in low or "permission denied" in low or "operation not permitted" in low:
        return "the destination cannot be written there (a read-only or special filesystem): use a writable path"
    if "tar" in low and any(word in low for word in ("archive", "header", "format", "short read", "unexpected eof")):
        return "the data is not a whole tar archive: give `-` a stream that `tar -c` writes"
    if "no space" in low or "quota" in low:
        return "free space in the sandbox or give it more (a larger disk or tmpfs)"
    return "free space in the sandbox or give it more (a larger disk or tmpfs), or use a writable path"


class FileTooLarge(EnvlayerError):
    """A file is larger than the configured ``max_file_bytes``. Nothing was transferred."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        self.path = path
        self.size = size
        self.limit = limit
        super().__init__(
            f"{path!r} is {size} bytes, over the {limit}-byte limit",
            hint="raise max_file_bytes for this backend, or read it in parts with exec (e.g. `head -c`)",
        )


# --- agent tools ----------------------------------------------------------------


class ToolArgumentError(EnvlayerError, ValueError):
    """Tool-call arguments do not match the tool's schema; the message says which and why."""


class JobError(EnvlayerError):
    """A background job could not be started, or its id is malformed or unknown."""
