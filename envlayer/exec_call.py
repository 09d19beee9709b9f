"""One ``exec`` call prepared for one backend: :func:`prepare_call`.

The only code that turns a caller's ``exec`` keywords into an
:class:`~envlayer.request.ExecRequest` for a given backend: it validates them
(:meth:`ExecRequest.build <envlayer.request.ExecRequest.build>`), checks the keywords that
need a capability against what the backend has (:mod:`envlayer.capabilities`) and applies
each keyword's rule (:data:`envlayer.request.KEYWORD_RULES`): refuse (``user``), drop
(``cancel``), or deliver at the end (``on_output``). :func:`envlayer.run` (the one way in)
and ``Environment.exec`` (the same call, made on an environment object) use it; nothing
else builds a request from keywords.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Unpack

from envlayer.capabilities import Capability, absence_note, capabilities_of
from envlayer.errors import UnsupportedArgument
from envlayer.request import KEYWORD_RULES, Command, ExecArguments, ExecRequest, OutputCallback
from envlayer.result import ExecResult

log = logging.getLogger("envlayer.lifecycle")


@dataclass(frozen=True)
class PreparedCall:
    """One ``exec`` call, ready for the backend.

    ``request`` is the checked request, without what the backend cannot take;
    ``keywords`` are the caller's keywords minus the same, and minus those that need a
    capability and are unset (what a backend written to the older keyword contract
    receives: never a keyword it does not declare); ``late_output`` is an ``on_output`` the backend
    cannot stream, to be given the output once the command has finished
    (:meth:`finish`); ``note`` says why ("" when it streams). A dropped keyword is
    only logged (DEBUG, ``envlayer.lifecycle``)."""

    command: Command
    request: ExecRequest
    keywords: dict[str, Any]
    late_output: OutputCallback | None = None
    note: str = ""

    @property
    def streamed(self) -> bool:
        """False when ``on_output`` was asked for and the backend cannot stream."""
        return self.late_output is None

    def finish(self, result: ExecResult) -> ExecResult:
        """``result``, after giving a late ``on_output`` the whole output (stdout, then
        stderr); whatever the callback raises propagates."""
        if self.late_output is not None:
            if result.stdout:
                self.late_output("stdout", result.stdout)
            if result.stderr:
                self.late_output("stderr", result.stderr)
        return result


def exec_request(env: Any, command: Command, /, **arguments: Unpack[ExecArguments]) -> ExecRequest:
    """``command`` and ``arguments`` checked into a request for ``env`` (an
    :class:`~envlayer.environment.Environment`), with ``env.options.timeout`` as the
    default timeout, not yet fitted to what ``env`` can take: for a call with no keyword,
    which needs no fitting, this is the whole of :func:`prepare_call`.

    Raises ``TypeError`` for a keyword ``exec`` does not have,
    :class:`~envlayer.errors.InvalidArgument` (nothing ran) for a bad value,
    :class:`~envlayer.errors.EnvironmentClosed` after cleanup.
    """
    ensure_open = getattr(env, "_ensure_open", None)
    if ensure_open is not None:
        ensure_open()
    options = getattr(env, "options", None)
    return ExecRequest.build(command, default_timeout=getattr(options, "timeout", None), **arguments)


def prepare_call(env: Any, command: Command, /, **arguments: Unpack[ExecArguments]) -> PreparedCall:
    """``command`` and ``arguments`` checked and fitted to ``env`` (an
    :class:`~envlayer.environment.Environment`), with ``env.options.timeout`` as the
    default timeout.

    Raises ``TypeError`` for a keyword ``exec`` does not have;
    :class:`~envlayer.errors.InvalidArgument` (nothing ran) for a bad value, its
    subclass :class:`~envlayer.errors.UnsupportedArgument` for a keyword the backend must
    refuse; :class:`~envlayer.errors.EnvironmentClosed` after cleanup.
    """
    request = exec_request(env, command, **arguments)
    if not arguments:
        return PreparedCall(command, request, {})
    asked = [name for name in KEYWORD_RULES if getattr(request, name) is not None]
    keywords = {k: v for k, v in arguments.items() if k not in KEYWORD_RULES or k in asked}
    late: OutputCallback | None = None
    note = ""
    if not asked:  # most calls: nothing that needs a capability, nothing to look up
        return PreparedCall(command, request, keywords)
    have = capabilities_of(env)
    for name in asked:
        rule, value = KEYWORD_RULES[name], getattr(request, name)
        capability = Capability(rule.capability)
        if capability in have:
            continue
        why = absence_note(env, capability)
        if rule.when_absent == "refuse":
            raise UnsupportedArgument(name, f"{why}: it cannot {rule.refusal.format(value=value)}", hint=rule.hint)
        request = dataclasses.replace(request, **{name: None})
        keywords.pop(name, None)
        if rule.when_absent == "at_end":
            late, note = value, f"{why}; output is shown when the command ends"
            log.debug(note)
        else:
            log.debug("%s; %s is not passed on", why, name)
    return PreparedCall(command, request, keywords, late, note)
