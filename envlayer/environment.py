"""The ``Environment`` contract every backend implements.

Required: :meth:`Environment.handle_request` (run one checked
:class:`~envlayer.request.ExecRequest`; a plugin written to the older keyword contract
implements :meth:`Environment.exec` instead), and the abstract
:meth:`Environment.read_file`, :meth:`Environment.write_file`, :meth:`Environment.cleanup`.

Optional, declared through ``capabilities`` (see :mod:`envlayer.capabilities`) and never
called by envlayer on a backend that lacks them:

* ``cleanup(force_remove=...)``, ``wait_for_cleanup(timeout) -> bool``;
* classmethods ``reap_orphans``, ``list_sandboxes``, ``remove_sandbox``;
* the request's ``on_output`` (``streaming``), ``cancel`` (``cancel``), ``user``
  (``exec_as_user``: that one command runs as another user of the sandbox, in a process
  of its own; see "Running as another user" below) and ``unset_env`` (``unset_env``);
  the rule for each without it is :data:`envlayer.request.KEYWORD_RULES`;
* ``upload_dir`` / ``download_dir`` returning a
  :class:`~envlayer.transfer.TransferSummary` (see :mod:`envlayer.transfer`).

Run commands through :func:`envlayer.run` (or ``env.exec``, the same call) and the other
optional parts through :mod:`envlayer.dispatch`, which checks first.

Contract shared by all backends:

* ``command`` is a shell string (run by ``/bin/sh -c``) or an argv list (run without a
  shell). ``cwd``, ``env`` and ``stdin`` apply to that call only.
* Arguments are checked before anything runs, the same way on every backend (see
  :mod:`envlayer.request`): a timeout that is negative, NaN, infinite or over one week,
  an empty argv, a NUL byte in a command, path, ``cwd`` or variable, or an ``env`` name
  that is not an identifier (``[A-Za-z_][A-Za-z0-9_]*``) raise
  :class:`~envlayer.errors.InvalidArgument` (a ``ValueError``). ``timeout=0`` means no
  limit, ``None`` the environment's default.
* A command that exceeds its timeout is killed together with every process it started
  inside the sandbox; the result has ``timed_out=True`` and exit code 124, with the
  output produced until then. The kill never waits for the command's output to be
  read: a command flooding its output returns within the timeout plus the kill's grace
  (about two seconds). The next call works normally.
* If the calling thread is interrupted (``KeyboardInterrupt``) during ``exec``, the
  command's process tree is killed before the exception propagates.
* Optional (``cancel``): ``cancel=token`` (a :class:`~envlayer.cancel_token.CancelToken`)
  kills the command's tree when the token is cancelled from another thread, and returns
  the output so far with ``cancelled=True`` and exit code 130 (every built-in backend).
* Optional (``unset_env``): ``unset_env=["NAME", ...]`` runs the command without those
  variables, whether the configuration or the sandbox itself sets them (every built-in
  backend); a name also in ``env`` is refused.
* stdout and stderr are captured separately, capped at ``max_output_bytes`` each.
* When the sandbox or the connection to it is lost while a command runs, ``exec``
  raises :class:`~envlayer.errors.BackendUnavailable` (or a subclass) saying the command
  may or may not have finished; no exit code is ever invented for it.
* File paths are absolute or relative to the environment's working directory. With
  ``file_root`` set, paths resolving outside it raise ``SandboxPathError``.
* File operations act with the sandbox user's rights; a denial raises
  ``SandboxPermissionDenied`` (a ``PermissionError``).
* ``cleanup()`` is idempotent. After it, calls raise ``EnvironmentClosed``.
* An environment may be used from several threads at once.

Persistent sessions (capability ``persistent_session``; implemented once, in
:mod:`envlayer.execution.shell_session`, for every backend with a byte stream to a shell):

* A call without ``cwd``/``env`` runs in the session shell itself: ``cd``, ``export``,
  ``set`` options, variables and functions persist to the next call.
* A call with ``cwd`` or ``env`` runs in a subshell that applies them for that call only;
  nothing it changes persists. A relative ``cwd`` is taken from the session's current
  directory; a missing directory gives exit 126.
* A syntax error fails that call (exit 2 on most shells); the session goes on.
* A command that ends the shell (``exit N``, a failure under ``set -e``, an unset
  variable under ``set -u``) returns its status; the next call gets a new shell with the
  same working directory, exported variables and shell options (non-exported variables,
  functions, aliases and traps are gone). ``recovered`` stays empty: this is the rule.
* After a timeout or an interrupt (the shell is killed with the command) the next call
  gets a new shell in the last working directory with only the configured variables,
  and its ``recovered`` says so.

Running as another user (capability ``exec_as_user``; Docker has it):

* ``exec(command, user="nobody")`` runs that command as ``user`` (``NAME``, ``UID``,
  ``NAME:GROUP`` or ``UID:GID``, checked by :func:`envlayer.request.check_user`) in a
  process of its own, like a one-shot call: the session shell's ``cd``/``export`` state
  does not apply and nothing it changes persists. It starts in the session's current
  directory (or ``cwd``) with the environment's configured variables plus ``env``.
* A user the sandbox does not know fails that call with exit 126 and a message on
  stderr; nothing is evicted or recreated for it.
* Timeouts, interrupts and ``cancel`` kill its tree as for any command.
* Through :mod:`envlayer.dispatch` (and the manager, the tools, :mod:`envlayer.aio`),
  ``user=`` on a backend without the capability raises
  :class:`~envlayer.errors.InvalidArgument` before anything runs: a command is never run
  as a different user than the one asked for.
"""

from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Unpack

from envlayer.capabilities import Capability
from envlayer.errors import EnvironmentClosed, SandboxPathError
from envlayer.exec_call import prepare_call
from envlayer.options import BaseOptions
from envlayer.request import Command, ExecArguments, ExecRequest, check_path
from envlayer.result import ExecResult

DEFAULT_TASK = "default"
DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class SandboxInfo:
    """One sandbox as a backend lists it (for ``envlayer ls``, ``reap``, ``rm``)."""

    backend: str
    id: str
    task: str
    profile: str
    status: str
    created: str = ""
    detail: Mapping[str, str] = field(default_factory=dict)


class Environment(ABC):
    """A sandbox that runs commands and holds files, for one (profile, task).

    Subclasses set ``name`` (the backend name), ``Options`` (their options schema, a
    :class:`BaseOptions` subclass) and ``capabilities`` (a set of
    :class:`Capability`, or ``None`` to be introspected).

    Raises from the constructor: :class:`~envlayer.errors.BackendUnavailable` when the
    backend's infrastructure cannot be reached.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[BaseOptions]] = BaseOptions
    capabilities: frozenset[Capability] | None = None
    """Declared at class level; an instance may narrow it (e.g. a one-shot-mode Docker
    environment has no persistent session)."""

    def __init__(
        self,
        options: BaseOptions | None = None,
        *,
        task_id: str = DEFAULT_TASK,
        profile: str = DEFAULT_PROFILE,
    ) -> None:
        self.options = options if options is not None else self.Options()
        self.task_id = task_id
        self.profile = profile
        self._closed = False

    # --- required: run a request (or, the older contract, exec) -----------------------

    def handle_request(self, request: ExecRequest) -> ExecResult:
        """Run one checked :class:`~envlayer.request.ExecRequest` and return its result:
        what a backend implements (the request contract; httpx's ``handle_request``
        shape). The request holds only what the backend declared it can take:
        ``on_output`` only with ``streaming``, ``cancel`` only with ``cancel``, ``user``
        only with ``exec_as_user``; its ``timeout`` is the effective limit (``None``: no
        limit) and ``deadline`` the monotonic time at which to kill the command.

        A plugin written to the older keyword contract implements :meth:`exec` instead
        (it keeps working; see :mod:`envlayer.capabilities`). Raises like :meth:`exec`.
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither handle_request nor exec")

    def exec(self, command: Command, **arguments: Unpack[ExecArguments]) -> ExecResult:
        """Run ``command`` and return its result; the keywords are
        :class:`~envlayer.request.ExecArguments` (``cwd``, ``env``, ``timeout``,
        ``stdin``, ``on_output``, ``cancel``, ``user``).

        ``timeout`` defaults to ``options.timeout``; a timeout never raises, it is
        reported in the result. A keyword the backend lacks the capability for follows
        :data:`~envlayer.request.KEYWORD_RULES`: ``user`` is refused, ``cancel`` is not
        passed on, ``on_output`` gets the output when the command ends. The same call as
        :func:`envlayer.run` (:func:`envlayer.exec_call.prepare_call`, then
        :meth:`handle_request`), which front ends use.

        Raises ``TypeError`` for a keyword ``exec`` does not have;
        :class:`~envlayer.errors.InvalidArgument` (nothing ran);
        :class:`~envlayer.errors.BackendUnavailable` when the sandbox cannot be reached
        (the command may not have run); :class:`~envlayer.errors.EnvironmentClosed`
        after :meth:`cleanup`.
        """
        call = prepare_call(self, command, **arguments)
        return call.finish(self.handle_request(call.request))

    @abstractmethod
    def read_file(self, path: str) -> bytes:
        """Return the file's bytes.

        Raises: ``SandboxFileNotFound`` (a ``FileNotFoundError``), ``SandboxIsADirectory``,
        ``SandboxPathError`` outside ``file_root``, ``FileTooLarge`` over ``max_file_bytes``,
        ``SandboxPermissionDenied`` (a ``PermissionError``) when the sandbox's user may not
        read it (checked with that user's rights, not a daemon's).
        """

    @abstractmethod
    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace the file, creating missing parent directories.

        ``str`` data is written as UTF-8. Raises ``SandboxPathError``, ``FileTooLarge``,
        ``SandboxIsADirectory``, ``SandboxPermissionDenied`` (a ``PermissionError``) when the
        sandbox's user may not write the file or create it there: a read-only file is never
        replaced, not even by an atomic rename, and nothing is changed.
        """

    @abstractmethod
    def cleanup(self) -> None:
        """Release what this object holds. Idempotent; never raises for an environment
        that is already gone. What happens to the sandbox itself (kept or removed) is
        the backend's documented lifecycle rule."""

    # --- conveniences shared by every backend -----------------------------------

    @classmethod  # noqa: B027 - an optional hook with a default, not an abstract method
    def check_available(cls, options: BaseOptions) -> None:
        """Raise :class:`~envlayer.errors.BackendUnavailable` (with a fix in its hint)
        when this backend cannot work on this machine with ``options``. Used by
        ``envlayer doctor``; the default accepts everything."""

    @property
    def closed(self) -> bool:
        """True after :meth:`cleanup`."""
        return self._closed

    def _ensure_open(self) -> None:
        if self._closed:
            raise EnvironmentClosed(
                f"the {self.name or type(self).__name__} environment for task {self.task_id!r} was cleaned up",
                hint="create a new environment",
            )

    def make_request(self, command: Command, **arguments: Unpack[ExecArguments]) -> ExecRequest:
        """The checked :class:`~envlayer.request.ExecRequest` for ``exec(command,
        **arguments)`` on this environment, as :func:`envlayer.exec_call.prepare_call`
        builds it (``options.timeout`` as the default timeout; keywords this backend
        lacks the capability for refused or left out).

        Raises :class:`~envlayer.errors.InvalidArgument` (nothing ran) and
        :class:`~envlayer.errors.EnvironmentClosed`.
        """
        return prepare_call(self, command, **arguments).request

    def resolve_path(self, path: str, cwd: str) -> str:
        """Normalize ``path`` (relative to ``cwd``) and enforce ``options.file_root``.

        Purely lexical: backends that can resolve symlinks should check the real path
        as well. Raises :class:`SandboxPathError` outside ``file_root`` and
        :class:`~envlayer.errors.InvalidArgument` for an empty path or a NUL byte.
        """
        check_path(path)
        full = posixpath.normpath(posixpath.join(cwd, path))
        root = self.options.file_root
        if root is not None:
            root_norm = posixpath.normpath(posixpath.join(cwd, root))
            if full != root_norm and not full.startswith(root_norm.rstrip("/") + "/"):
                raise SandboxPathError(path, root_norm)
        return full

    def read_text(self, path: str) -> str:
        """:meth:`read_file` decoded as UTF-8 (undecodable bytes become U+FFFD)."""
        return self.read_file(path).decode("utf-8", errors="replace")

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} task={self.task_id!r} profile={self.profile!r} {state}>"
