"""envlayer results and errors in Inspect's terms.

* a timed-out command (its process tree already killed by envlayer) -> ``TimeoutError``;
* a stream over Inspect's exec output limit (or cut by envlayer's cap) ->
  ``OutputLimitExceededError`` carrying the kept output;
* an argv command the sandbox could not execute (exit 126, the shell or runtime
  reporting "permission denied" for ``argv[0]``) -> ``PermissionError``; a missing
  program stays an ordinary failed result (127), as Inspect's contract asks;
* the sandbox unreachable or closed -> ``SandboxUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from inspect_ai.util import ExecResult, OutputLimitExceededError, SandboxEnvironmentLimits, SandboxUnavailableError

from envlayer.errors import BackendUnavailable, EnvironmentClosed, FileTooLarge
from envlayer.result import ExecResult as EnvlayerResult

CANNOT_EXECUTE = 126


def to_inspect(result: EnvlayerResult, argv: Sequence[str], timeout: float | None) -> ExecResult[str]:
    """Inspect's ``ExecResult`` for ``result``; raises as the module docstring says."""
    if result.timed_out:
        raise TimeoutError(f"command timed out after {timeout} seconds (its process tree was killed)")
    limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
    if result.truncated or len(result.stdout) > limit or len(result.stderr) > limit:
        raise OutputLimitExceededError(
            SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, result.stdout[:limit].decode("utf-8", "replace")
        )
    if _not_executable(result, argv):
        raise PermissionError(f"permission denied executing {argv[0]!r}: {result.stderr_text.strip()[:300]}")
    return ExecResult(
        success=result.exit_code == 0,
        returncode=result.exit_code,
        stdout=result.stdout_text,
        stderr=result.stderr_text,
    )


def _not_executable(result: EnvlayerResult, argv: Sequence[str]) -> bool:
    if result.exit_code != CANNOT_EXECUTE or not argv or result.stdout:
        return False
    lines = result.stderr_text.strip().splitlines()
    return len(lines) == 1 and argv[0] in lines[0] and "permission denied" in lines[0].lower()


@contextmanager
def unavailable_as_inspect() -> Iterator[None]:
    """Re-raise envlayer's "the sandbox cannot be reached / was closed" as
    ``SandboxUnavailableError`` (Inspect reports it apart from command failures)."""
    try:
        yield
    except (BackendUnavailable, EnvironmentClosed) as exc:
        raise SandboxUnavailableError(str(exc)) from exc


@contextmanager
def file_limit_as_inspect() -> Iterator[None]:
    """envlayer's ``FileTooLarge`` on a read as Inspect's ``OutputLimitExceededError``."""
    try:
        yield
    except FileTooLarge as exc:
        raise read_limit_exceeded() from exc


def read_limit_exceeded() -> OutputLimitExceededError:
    """The error for a file over Inspect's current ``read_file`` limit."""
    return OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None)
