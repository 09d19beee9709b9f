"""The environment variables an agent's commands get: safe defaults, no credentials.

* :data:`COMMAND_DEFAULTS` (``PAGER=cat``, ``GIT_PAGER=cat``) are set for commands on
  every backend, so ``git log`` or ``man`` never wait for a key press; the backend's
  ``env`` option and a call's ``env`` override them.
* :func:`inherited_environment` is what the local backend passes from this process to a
  command: everything except names matching a credential pattern
  (:data:`CREDENTIAL_PATTERNS`, case-insensitive shell globs such as ``*_API_KEY``),
  unless the name is forwarded explicitly.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping

COMMAND_DEFAULTS: Mapping[str, str] = {"PAGER": "cat", "GIT_PAGER": "cat"}

CREDENTIAL_PATTERNS: tuple[str, ...] = (
    "*_API_KEY",
    "*_APIKEY",
    "*_API_TOKEN",
    "*_TOKEN",
    "*_TOKEN_ID",
    "*_SECRET",
    "*_SECRET_KEY",
    "*_SECRET_ACCESS_KEY",
    "*_ACCESS_KEY",
    "*_ACCESS_KEY_ID",
    "*_PRIVATE_KEY",
    "*_PASSWORD",
    "*_PASSWD",
    "*_CREDENTIALS",
    "*_AUTH",
    "AWS_*",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "CLOUDSDK_AUTH_*",
    "DIGITALOCEAN_ACCESS_TOKEN",
    "DOCKER_AUTH_CONFIG",
    "KAGGLE_KEY",
    "NETRC",
)
"""Names (shell globs, matched case-insensitively) of variables that carry credentials:
provider API keys, tokens, secrets and passwords, and the cloud SDKs' credential
variables. Kept out of local commands unless forwarded by name."""


def is_credential(name: str, patterns: Iterable[str] = CREDENTIAL_PATTERNS) -> bool:
    """True when ``name`` matches one of ``patterns`` (case-insensitive). Pure."""
    return _matcher(tuple(patterns))(name.upper()) is not None


@functools.lru_cache(maxsize=32)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    """Matches an upper-cased name against all of ``patterns`` (globs, upper-cased, as
    ``fnmatch.fnmatchcase`` matches each) with one compiled expression: a local one-shot
    command filters this process's whole environment, and matching the globs one by one
    cost about 0.5 ms a command. No pattern: nothing matches."""
    return re.compile("|".join(fnmatch.translate(pattern.upper()) for pattern in patterns) or "(?!)").match


def inherited_environment(
    environ: Mapping[str, str], *, blocklist: Iterable[str], forward: Iterable[str]
) -> dict[str, str]:
    """``environ`` without the names matching ``blocklist``, except those in ``forward``
    (explicit opt-in, exact names). Pure."""
    matches = _matcher(tuple(blocklist))
    allowed = set(forward)
    return {k: v for k, v in environ.items() if k in allowed or matches(k.upper()) is None}


def with_command_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` over :data:`COMMAND_DEFAULTS`. Pure."""
    return {**COMMAND_DEFAULTS, **env}
