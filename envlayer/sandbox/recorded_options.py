"""The options a task's sandbox was created with: recorded with the sandbox, compared
with those of every later call, and used as that call's defaults by the CLI.

A backend names the options that shape its sandbox (those its fingerprint covers) and
stores :func:`encode` ``(record_of(options, names))`` with the sandbox when it creates it
(a Docker label, a Kubernetes annotation, a Modal tag, a Daytona label, a local file). When
it later finds the task's sandbox with another fingerprint, :func:`settle_mismatch` is the
one decision every backend takes: under ``on_fingerprint_mismatch = "error"`` it raises
:class:`SandboxOptionsDiffer`; under ``"recreate"`` it logs a warning and returns the
notice that the first :class:`~envlayer.result.ExecResult` after the replacement carries.
Both name each differing option, old -> new (:func:`option_changes`).

What is recorded is safe to store where anyone who can list sandboxes reads it: secret
options are left out, ``env`` keeps its names and only the values of variables that are
not credentials (:func:`envlayer.sandbox.command_env.is_credential`); a credential's
value is recorded as ``null`` (withheld). ``env`` is compared by names only, as the
fingerprints do: its values reach commands, not the sandbox.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.options import BaseOptions, is_secret, option_fields
from envlayer.sandbox.command_env import is_credential

REPLACE_HINT = (
    "run it again with --replace to replace the sandbox (a container or remote sandbox loses its processes and "
    "the files outside its durable workspace), "
    "drop the options that differ, or use another --task"
)
"""What the CLI tells a user whose options differ from the task's (see :class:`SandboxOptionsDiffer`)."""
API_HINT = 'remove it (`envlayer rm TASK --force`), or set on_fingerprint_mismatch = "recreate" to replace it'
"""The same for a Python caller under ``on_fingerprint_mismatch = "error"``."""


@dataclass(frozen=True)
class OptionChange:
    """One option whose requested value differs from the recorded one."""

    option: str
    old: Any
    """The value the sandbox was created with."""
    new: Any
    """The value asked for now."""

    def __str__(self) -> str:
        return f"{self.option}: {json.dumps(self.old)} -> {json.dumps(self.new)}"


class SandboxOptionsDiffer(BackendUnavailable):
    """The task's sandbox was created with different options and was not replaced
    (``on_fingerprint_mismatch = "error"``, the CLI without ``--replace``).

    ``changes`` names each differing option (empty when the sandbox carries no record,
    made before envlayer recorded options); ``recorded`` is the record (``None``: none)."""

    def __init__(
        self, what: str, changes: list[OptionChange], recorded: dict[str, Any] | None, *, hint: str = API_HINT
    ) -> None:
        self.what = what
        self.changes = changes
        self.recorded = recorded
        super().__init__(f"{what} was created with different options: {describe(changes)}", hint=hint)


def record_of(options: BaseOptions, names: Iterable[str]) -> dict[str, Any]:
    """The record of ``options``' ``names`` (see the module docstring): JSON values,
    secret options left out, credential values of ``env`` withheld (``None``). Pure."""
    fields = option_fields(type(options))
    record: dict[str, Any] = {}
    for name in names:
        if is_secret(fields[name][1]):
            continue
        value = getattr(options, name)
        if name == "env":
            value = {key: None if is_credential(key) else text for key, text in sorted(value.items())}
        record[name] = json.loads(json.dumps(value, default=str))
    return record


def encode(record: Mapping[str, Any]) -> str:
    """``record`` as compact JSON, keys sorted: what a backend stores."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def decode(text: str | None) -> dict[str, Any] | None:
    """The record stored as ``text``; ``None`` when there is none or it is not a JSON object."""
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _comparable(name: str, value: Any) -> Any:
    """What is compared of ``name``'s recorded value: ``env`` by its sorted names."""
    if name == "env" and isinstance(value, Mapping):
        return sorted(value)
    return value


def option_changes(recorded: Mapping[str, Any], requested: Mapping[str, Any]) -> list[OptionChange]:
    """Each option in both records whose values differ, by name (``env``: its names).
    An option only one side has (a record made by another version) is not compared. Pure."""
    changes = []
    for name in sorted(set(recorded) & set(requested)):
        old, new = _comparable(name, recorded[name]), _comparable(name, requested[name])
        if old != new:
            changes.append(OptionChange(name, old, new))
    return changes


def describe(changes: Iterable[OptionChange]) -> str:
    """``option: old -> new`` for each change, joined by ``; ``; a fallback sentence when
    there are none (the sandbox has no record, or only derived inputs differ)."""
    text = "; ".join(str(change) for change in changes)
    return text or "the difference is not recorded (made by an older envlayer, or the host's inputs changed)"


def defaults_from(recorded: Mapping[str, Any], explicit: Collection[str]) -> dict[str, Any]:
    """The recorded values a later call takes as its options' defaults: every option not
    in ``explicit`` (set by a file, a variable or ``-o``); ``env`` without its withheld
    credential values. Pure."""
    defaults = {name: value for name, value in recorded.items() if name not in explicit}
    if isinstance(defaults.get("env"), Mapping):
        defaults["env"] = {key: value for key, value in defaults["env"].items() if value is not None}
    return defaults


REPLACED = "was replaced (its processes, and its files outside a durable workspace, are gone)"
"""What happened to a sandbox with other options, as :func:`settle_mismatch`'s notice says by default."""


def settle_mismatch(
    *,
    what: str,
    mode: str,
    found: str | None,
    requested: Mapping[str, Any],
    logger: logging.Logger,
    outcome: str = REPLACED,
) -> str:
    """The one decision on a sandbox ``what`` found with another fingerprint: its stored
    record ``found`` against the ``requested`` record. ``mode`` ``"error"`` raises
    :class:`SandboxOptionsDiffer`; otherwise a warning is logged on ``logger`` and the
    notice for the first result after the replacement is returned (the caller replaces it;
    ``outcome`` says what happened to it)."""
    recorded = decode(found)
    changes = option_changes(recorded or {}, requested)
    if mode == "error":
        raise SandboxOptionsDiffer(what, changes, recorded)
    notice = f"{what} was created with different options and {outcome}: {describe(changes)}"
    logger.warning("%s", notice)
    return notice
