"""One call to ``exec``, validated and normalised in one place: :class:`ExecRequest`.

The ``exec`` keywords are listed once, here (:class:`ExecArguments`, and
:data:`KEYWORD_RULES` for those that need a capability). :func:`envlayer.run` and
``Environment.exec`` build the request (:func:`envlayer.exec_call.prepare_call`) and hand
it, not a list of arguments, to the backend's ``handle_request``. All argument checks
live here, so every backend and the CLI refuse the same inputs with the same
:class:`~envlayer.errors.InvalidArgument`:

* ``timeout``: ``None`` means the environment's default; ``0`` means no limit; a
  positive finite number up to :data:`MAX_TIMEOUT` seconds is the limit. Negative, NaN,
  infinite or larger values, booleans and non-numbers are refused (``0`` is how to ask
  for no limit).
* ``command``: a non-empty string, or a non-empty argv of strings; no NUL byte anywhere
  (no shell or ``execve`` can carry one).
* ``cwd``: no NUL byte.
* ``env``: names are shell identifiers (``[A-Za-z_][A-Za-z0-9_]*``), values strings;
  no NUL byte in either.
* ``stdin``: bytes, or a string (sent as UTF-8).
* ``unset_env``: variable names (identifiers, none also in ``env``) removed from the
  command's environment (:func:`check_unset_env`).
* ``user``: ``None`` (the sandbox's configured user), or a user name or numeric uid,
  optionally followed by ``:group`` (name or gid), as ``docker exec --user`` takes it
  (:func:`check_user`). Only backends with the ``exec_as_user`` capability take it.

File paths go through :func:`check_path` (done by ``Environment.resolve_path``), file
payloads through :func:`file_payload` (encoding and the ``max_file_bytes`` check).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict, Unpack

from envlayer.cancel_token import CancelToken
from envlayer.errors import FileTooLarge, InvalidArgument
from envlayer.frozen import one_store_init
from envlayer.random_pool import RandomPool, chunks

MAX_TIMEOUT = 7 * 24 * 3600.0
"""The largest timeout accepted, in seconds (one week). Longer work belongs in the
background (``nohup cmd &``) with a short command polling it; ``0`` disables the limit."""

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""A valid environment variable name (a shell identifier)."""
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?\Z")
_NO_LIMIT_HINT = "pass a number of seconds up to one week, or 0 for no limit"

Command = str | Sequence[str]

OutputCallback = Callable[[str, bytes], None]
"""``on_output(stream, chunk)``: ``stream`` is ``"stdout"`` or ``"stderr"``; ``chunk`` is
what just arrived (uncapped)."""


def normalize_timeout(value: object, *, default: float | None, argument: str = "timeout") -> float | None:
    """The effective limit in seconds (``None`` = no limit) for a requested ``value``.

    ``None`` -> ``default`` (itself normalised); ``0`` -> ``None``; a positive finite
    number up to :data:`MAX_TIMEOUT` -> that number as a float.

    Raises:
        InvalidArgument: negative, NaN, infinite, over :data:`MAX_TIMEOUT`, a bool, or
            not a number.
    """
    if value is None:
        return None if default is None else normalize_timeout(default, default=None, argument=argument)
    if type(value) is float and 0 < value <= MAX_TIMEOUT:  # the common case, NaN excluded
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(argument, f"must be a number of seconds, got {value!r}", hint=_NO_LIMIT_HINT)
    seconds = float(value)
    if math.isnan(seconds):
        raise InvalidArgument(argument, "NaN is not a number of seconds", hint=_NO_LIMIT_HINT)
    if seconds < 0:
        raise InvalidArgument(argument, f"must be >= 0, got {value!r}", hint=_NO_LIMIT_HINT)
    if seconds > MAX_TIMEOUT:
        raise InvalidArgument(
            argument, f"{value!r} seconds is over the {MAX_TIMEOUT:.0f}-second maximum", hint=_NO_LIMIT_HINT
        )
    return None if seconds == 0 else seconds


def check_text(value: str, argument: str) -> str:
    """Return ``value``; raise :class:`InvalidArgument` if it is not a string or holds a NUL byte."""
    if not isinstance(value, str):
        raise InvalidArgument(argument, f"must be a string, got {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgument(
            argument, f"contains a NUL byte: {value[:60]!r}", hint="remove the \\0; no shell or path can hold one"
        )
    return value


def check_path(path: str, argument: str = "path") -> str:
    """A file path as given by a caller: a non-empty string without NUL bytes."""
    check_text(path, argument)
    if not path:
        raise InvalidArgument(argument, "is empty", hint="name a file, e.g. 'notes.txt' or '/tmp/out.log'")
    return path


def check_command(command: Command) -> str | tuple[str, ...]:
    """A command as accepted by ``exec``: a string, or an argv as a tuple of strings."""
    if isinstance(command, str):
        return check_text(command, "command")
    if isinstance(command, bytes) or not isinstance(command, Sequence):
        raise InvalidArgument("command", f"must be a string or a list of strings, got {type(command).__name__}")
    argv = tuple(command)
    if not argv:
        raise InvalidArgument("command", "the argv list is empty", hint="give at least the program to run")
    for arg in argv:
        check_text(arg, "command")
    return argv


def check_env(env: Mapping[str, str] | None, argument: str = "env") -> dict[str, str]:
    """A copy of ``env`` after checking every name is an identifier and no NUL byte occurs.

    Raises :class:`InvalidArgument` naming the first offending variable (never its value).
    """
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InvalidArgument(argument, f"must be a mapping of names to strings, got {type(env).__name__}")
    checked: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise InvalidArgument(
                argument,
                f"{name!r} is not a valid environment variable name",
                hint="use letters, digits and underscores, not starting with a digit",
            )
        if not isinstance(value, str):
            raise InvalidArgument(argument, f"the value of {name} must be a string, got {type(value).__name__}")
        if "\0" in value:
            raise InvalidArgument(argument, f"the value of {name} contains a NUL byte", hint="remove the \\0")
        checked[name] = value
    return checked


def check_unset_env(names: Sequence[str] | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """``unset_env`` as a tuple of variable names, each once, in order (``None`` -> ``()``).

    Raises :class:`InvalidArgument` for a name that is not an identifier, a bare string
    (``unset_env="HOME"`` would be five names), or a name that ``env`` also sets."""
    if names is None:
        return ()
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise InvalidArgument(
            "unset_env", f"must be a list of variable names, got {type(names).__name__}", hint='e.g. ["HTTP_PROXY"]'
        )
    checked: list[str] = []
    for name in names:
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise InvalidArgument(
                "unset_env",
                f"{name!r} is not a valid environment variable name",
                hint="use letters, digits and underscores, not starting with a digit",
            )
        if name in env:
            raise InvalidArgument("unset_env", f"{name} is also set by env", hint="set it or unset it, not both")
        if name not in checked:
            checked.append(name)
    return tuple(checked)


def check_user(user: object) -> str:
    """``user`` as ``exec`` takes it: ``NAME``, ``UID``, ``NAME:GROUP`` or ``UID:GID``
    (POSIX portable names: letters, digits, ``_``, ``.``, ``-``, not starting with ``.``
    or ``-``; a trailing ``$`` as Samba machine accounts have).

    Raises :class:`InvalidArgument` for anything else (an empty string, spaces, a NUL
    byte, a non-string): such a value would reach ``docker exec --user`` or ``su``
    unchecked."""
    if not isinstance(user, str):
        raise InvalidArgument("user", f"must be a user name or uid as a string, got {type(user).__name__}")
    if not _USER.match(user):
        raise InvalidArgument(
            "user",
            f"{user[:60]!r} is not a user name or uid",
            hint="pass NAME, UID, NAME:GROUP or UID:GID, e.g. 'nobody' or '1000:1000'",
        )
    return user


def encode_stdin(stdin: bytes | str | None) -> bytes | None:
    """``stdin`` as bytes (a string as UTF-8); ``None`` stays ``None`` (the command reads EOF)."""
    if stdin is None or isinstance(stdin, bytes):
        return stdin
    if isinstance(stdin, str):
        return stdin.encode()
    if isinstance(stdin, bytearray | memoryview):
        return bytes(stdin)
    raise InvalidArgument("stdin", f"must be bytes or a string, got {type(stdin).__name__}")


def file_payload(path: str, data: bytes | str, limit: int) -> bytes:
    """The bytes ``write_file`` sends: ``data`` (a string as UTF-8), checked against ``limit``.

    Raises :class:`FileTooLarge` (nothing is written) over ``limit``.
    """
    payload = data.encode() if isinstance(data, str) else bytes(data)
    if len(payload) > limit:
        raise FileTooLarge(path, len(payload), limit)
    return payload


_EXEC_IDS: RandomPool[str] = RandomPool(lambda raw: (piece.hex() for piece in chunks(raw, 16)), batch_bytes=16 * 256)


def new_exec_id() -> str:
    """A fresh random exec id: 32 hex digits (128 bits), from a pool filled 256 ids at a time
    (:class:`~envlayer.random_pool.RandomPool`: each id is used once)."""
    return _EXEC_IDS.take()


class ExecArguments(TypedDict, total=False):
    """The ``exec`` keywords after ``command``: the one list of them. A new keyword is
    added here, to :class:`ExecRequest` (its checked form) and, when only some backends
    can honour it, to :data:`KEYWORD_RULES`; :func:`envlayer.run`, ``Environment.exec``,
    the manager, :mod:`envlayer.aio`, the tools, the CLI and the adapters take it from
    here."""

    cwd: str | None
    env: Mapping[str, str] | None
    timeout: float | None
    stdin: bytes | str | None
    on_output: OutputCallback | None
    cancel: CancelToken | None
    user: str | None
    unset_env: Sequence[str] | None


EXEC_KEYWORDS: tuple[str, ...] = tuple(ExecArguments.__annotations__)
"""Every ``exec`` keyword, in order."""


@dataclass(frozen=True)
class KeywordRule:
    """How :func:`envlayer.run` treats an ``exec`` keyword that only a backend with
    ``capability`` (a :class:`~envlayer.capabilities.Capability` value) receives, when the
    caller sets it and the backend lacks the capability:

    * ``"refuse"``: :class:`~envlayer.errors.InvalidArgument` before anything runs; the
      message says the backend cannot ``refusal`` (``{value}`` is the caller's value);
    * ``"drop"``: the keyword is not passed on (a DEBUG line says so);
    * ``"at_end"``: the keyword is not passed on; the output is delivered to it once,
      when the command has finished (``on_output``)."""

    capability: str
    when_absent: Literal["refuse", "drop", "at_end"]
    refusal: str = ""
    hint: str = ""


KEYWORD_RULES: dict[str, KeywordRule] = {
    "on_output": KeywordRule("streaming", "at_end"),
    "cancel": KeywordRule("cancel", "drop"),
    "user": KeywordRule(
        "exec_as_user",
        "refuse",
        "run a command as {value!r}",
        "leave user unset to run as the backend's configured user (its `user` option, where it has one), "
        "or use a backend that has exec_as_user (docker)",
    ),
    "unset_env": KeywordRule(
        "unset_env",
        "refuse",
        "remove {value} from a command's environment",
        "leave unset_env empty, or use a backend that has unset_env (every built-in backend)",
    ),
}
"""The keywords that need a capability, and what happens without it. Running a command
other than as asked (as another user, with a variable it must not see) is never the
nearest correct thing: refused. An unset keyword (``None``, or an empty ``unset_env``)
asks for nothing and needs nothing."""

PLAIN_KEYWORDS: tuple[str, ...] = tuple(k for k in EXEC_KEYWORDS if k not in KEYWORD_RULES)
"""The keywords every backend takes (``cwd``, ``env``, ``timeout``, ``stdin``)."""

_EXEC_ARGUMENT_NAMES = frozenset(EXEC_KEYWORDS)


def check_exec_keywords(arguments: Mapping[str, object]) -> None:
    """Raise ``TypeError`` (as Python does for a function's unknown keyword) when
    ``arguments`` has a key that is not an ``exec`` keyword of :class:`ExecArguments`."""
    unknown = arguments.keys() - _EXEC_ARGUMENT_NAMES
    if unknown:
        raise TypeError(f"exec() got unexpected keyword arguments: {', '.join(sorted(unknown))}")


@one_store_init
@dataclass(frozen=True)
class ExecRequest:
    """One validated call to ``exec``.

    ``timeout`` is the effective limit (``None`` = none) and ``deadline`` the
    ``time.monotonic()`` value at which the command is killed; ``start`` is when the
    call began (``ExecResult.duration`` counts from it). ``exec_id`` is a fresh random
    id: the command exports it as ``ENVLAYER_EXEC_ID`` so the kill path finds its whole
    process tree. ``stdin`` is ``None`` (the command reads EOF) or the bytes to feed.
    ``on_output(stream, chunk)`` receives ``"stdout"``/``"stderr"`` chunks as they
    arrive, uncapped, from the calling thread. ``user`` is ``None`` (the sandbox's
    configured user) or the checked user to run this one command as.
    """

    command: str | tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    stdin: bytes | None = None
    on_output: OutputCallback | None = None
    exec_id: str = field(default_factory=lambda: new_exec_id())
    start: float = field(default_factory=time.monotonic)
    deadline: float | None = None
    cancel: CancelToken | None = None
    """Cancelled from another thread: the backend kills the command as on a timeout and
    the result says ``cancelled`` (see :mod:`envlayer.cancel_token`)."""
    user: str | None = None
    unset_env: tuple[str, ...] | None = None
    """Variables removed from the command's environment (the environment's configured
    ones, the sandbox's own, e.g. an image's ``ENV``): ``None`` or a non-empty tuple of
    checked names (capability ``unset_env``)."""

    @property
    def cancelled(self) -> bool:
        """True when the request's token was cancelled."""
        return self.cancel is not None and self.cancel.cancelled

    @classmethod
    def build(
        cls, command: Command, *, default_timeout: float | None = None, **arguments: Unpack[ExecArguments]
    ) -> ExecRequest:
        """Validate ``command`` and the ``exec`` keyword ``arguments`` (see the module
        docstring and :class:`ExecArguments`) and start the clock; ``default_timeout``
        applies when ``timeout`` is None.

        Raises :class:`InvalidArgument` for bad input; nothing has run then.
        """
        if not arguments:  # the common call: only the command to check
            limit = (
                default_timeout
                if type(default_timeout) is float and 0 < default_timeout <= MAX_TIMEOUT
                else normalize_timeout(None, default=default_timeout)
            )
            start = time.monotonic()
            deadline = None if limit is None else start + limit
            return cls(check_command(command), None, {}, limit, None, None, new_exec_id(), start, deadline)
        check_exec_keywords(arguments)
        cwd, user = arguments.get("cwd"), arguments.get("user")
        on_output, cancel = arguments.get("on_output"), arguments.get("cancel")
        limit = normalize_timeout(arguments.get("timeout"), default=default_timeout)
        if on_output is not None and not callable(on_output):
            raise InvalidArgument("on_output", "must be a callable (stream, chunk) -> None")
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise InvalidArgument("cancel", f"must be an envlayer.CancelToken, got {type(cancel).__name__}")
        env = check_env(arguments.get("env"))
        unset = check_unset_env(arguments.get("unset_env"), env)
        start = time.monotonic()
        return cls(
            command=check_command(command),
            cwd=None if cwd is None else check_text(cwd, "cwd"),
            env=env,
            timeout=limit,
            stdin=encode_stdin(arguments.get("stdin")),
            on_output=on_output,
            exec_id=new_exec_id(),
            start=start,
            deadline=None if limit is None else start + limit,
            cancel=cancel,
            user=None if user is None else check_user(user),
            unset_env=unset or None,
        )

    def process_command(self, shell: str) -> str | tuple[str, ...]:
        """The command to start as a process of its own: :attr:`command`, or with
        :attr:`unset_env`, the same command after ``unset -v`` of those names (a string
        gets an ``unset -v`` line first; an argv runs as ``shell -c 'unset -v ...; exec
        "$@"'``). The names are checked identifiers: nothing needs quoting."""
        if not self.unset_env:
            return self.command
        unset = "unset -v " + " ".join(self.unset_env)
        if isinstance(self.command, str):
            return f"{unset}\n{self.command}"
        return (shell, "-c", f'{unset}; exec "$@"', "envlayer", *self.command)

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative); ``None`` without a limit."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline


@one_store_init
@dataclass(frozen=True)
class ScriptRequest(ExecRequest):
    """A call whose command is envlayer's own shell script (a file call's), run in the
    session by :func:`~envlayer.execution.shell_script.script_call` (no ``eval``, its
    status whatever ``set -e`` says), never one-shot. ``raw_input``: bytes the script
    takes from the session's stdin with ``__el_take FILE`` (any byte, no encoding);
    when the shell could not take them it ends itself unread, the call's exit status is
    :data:`~envlayer.execution.shell_script.INPUT_LOST` and the next call's result says
    the shell was restarted."""

    raw_input: bytes | None = None
    in_shell: bool = False
    """Run the script in the session shell itself (a brace group, not a subshell: one fork
    less), for a script that leaves the shell as it found it: it returns instead of
    exiting, keeps its variables local and restores the options it sets (see
    :func:`~envlayer.execution.shell_script.script_call`). Not with ``raw_input``."""
