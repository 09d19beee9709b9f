"""Retrying a control-plane call that a service throttled or could not serve for a moment.

Cloud control planes answer 429 (with ``Retry-After``) when a caller is throttled and
502/503/504 when a gateway or the service is briefly unavailable. None of these means the
call was wrong, and a first throttle must never fail an agent's tool call. Each plugin
says how to read its SDK's exceptions (:class:`Transient` from a ``classify`` function);
this module owns the loop: bounded attempts, exponential backoff with full jitter capped
by ``max_delay``, a server's ``Retry-After`` honoured (but never beyond the remaining
budget), every retry logged at WARNING with what was being done.

Only calls that are safe to repeat go through :func:`call_with_retries`: reads, and
writes the service makes idempotent (a create by unique name, a delete, a start). A
command's exec never does: a command is never run twice.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
"""HTTP statuses that say "try again shortly", whatever the service."""


@dataclass(frozen=True)
class Transient:
    """What a plugin's ``classify`` returns for an error worth retrying."""

    reason: str
    """Short text for the log, e.g. ``"429 Too Many Requests"``."""
    retry_after: float | None = None
    """Seconds the service asked to wait (``Retry-After``), or None."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying. ``attempts`` counts every call, the first included."""

    attempts: int = 6
    base_delay: float = 0.25
    max_delay: float = 8.0
    budget: float = 60.0
    """Total seconds of waiting allowed across all retries of one call."""


DEFAULT_POLICY = RetryPolicy()


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value: delta-seconds or an HTTP date
    (RFC 9110, section 10.2.3). None for a missing or unreadable value; never negative."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """The ``Retry-After`` of a response's headers (case-insensitive), parsed."""
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == "retry-after":
            return parse_retry_after(value)
    return None


def backoff_delay(attempt: int, policy: RetryPolicy, retry_after: float | None) -> float:
    """The wait before retry number ``attempt`` (1-based): the server's ``Retry-After``
    when it gave one (capped by ``max_delay``), else full-jitter exponential backoff."""
    if retry_after is not None:
        return min(retry_after, policy.max_delay)
    ceiling = min(policy.max_delay, policy.base_delay * (2 ** (attempt - 1)))
    return random.uniform(ceiling / 2, ceiling)


def call_with_retries(
    fn: Callable[[], T],
    classify: Callable[[BaseException], Transient | None],
    *,
    doing: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    logger: logging.Logger | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Return ``fn()``, retrying while ``classify`` calls its error transient.

    An error ``classify`` maps to None is raised at once, unchanged. After the last
    attempt, or once the waiting budget is spent, the last transient error is raised
    unchanged (the caller translates it, e.g. into ``BackendUnavailable`` with a hint).
    ``doing`` names the call in the log ("creating the sandbox")."""
    log = logger or logging.getLogger("envlayer.retry")
    waited = 0.0
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            transient = classify(exc)
            if transient is None or attempt >= policy.attempts:
                raise
            delay = backoff_delay(attempt, policy, transient.retry_after)
            if waited + delay > policy.budget:
                raise
            log.warning(
                "%s: %s; retrying in %.1f s (attempt %d of %d)",
                doing,
                transient.reason,
                delay,
                attempt + 1,
                policy.attempts,
            )
            sleep(delay)
            waited += delay
