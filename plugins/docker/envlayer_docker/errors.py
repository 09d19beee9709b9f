"""The one place where Docker SDK and transport errors become envlayer errors.

Every call to the daemon runs inside :func:`translated`, a context manager in the manner
of httpx's ``map_httpcore_exceptions``: the mapping is one table (:data:`_TABLE`), read
top to bottom, first match wins. What it produces:

* :class:`ContainerGone` (internal): the daemon says the container does not exist or is
  not running, for an operation that then provably did not start; the caller may
  recover the container and retry once (see :meth:`envlayer.sandbox.base.SandboxEnvironment.with_recovery`);
* :class:`~envlayer.errors.BackendUnavailable`: the daemon refused (an API error, with
  its explanation) or cannot be reached (with the socket address and how to fix it);
  with ``during_command=True`` the message says the command may or may not have
  finished.

Errors that are not the daemon's (envlayer's own, bad input) pass through untouched.
Importing this module does not import the Docker SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from envlayer.errors import BackendUnavailable, EnvlayerError
from envlayer_docker import sdk
from envlayer_docker.client import unavailable
from envlayer_docker.options import DockerOptions


class ContainerGone(Exception):
    """The container is missing or not running: the operation did not start."""


def _explanation(exc: Any) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def _is_gone(exc: Any) -> bool:
    """NotFound for the container itself, or 409 "container is not running"."""
    text = _explanation(exc).lower()
    if getattr(exc, "status_code", None) == 404:
        return "no such container" in text
    return getattr(exc, "status_code", None) == 409 and ("not running" in text or "is paused" in text)


Rule = tuple[Callable[[BaseException], bool], Callable[[BaseException, str, DockerOptions, bool], Exception]]


def _rules() -> list[Rule]:
    api_error, request_error = sdk.errors.APIError, sdk.requests.exceptions.RequestException

    def refused(exc: BaseException, doing: str, options: DockerOptions, during: bool) -> Exception:
        if during:
            return _lost(exc, doing, options)
        return BackendUnavailable(
            f"Docker refused {doing}: {_explanation(exc)}",
            hint="check `docker ps -a` and the daemon log; `envlayer rm` removes a broken container",
        )

    def unreachable(exc: BaseException, doing: str, options: DockerOptions, during: bool) -> Exception:
        return _lost(exc, doing, options) if during else unavailable(exc, options)

    return [
        (lambda e: isinstance(e, api_error) and _is_gone(e), lambda e, d, o, w: ContainerGone(_explanation(e))),
        (lambda e: isinstance(e, api_error), refused),
        (lambda e: isinstance(e, sdk.errors.DockerException | request_error | ConnectionError), unreachable),
    ]


def _lost(exc: BaseException, doing: str, options: DockerOptions) -> BackendUnavailable:
    base = unavailable(exc, options)
    return BackendUnavailable(
        f"lost the Docker daemon while {doing}: {base.message}; the command may or may not have finished "
        "(and may still be running)",
        hint=f"check its effects before running it again; {base.hint}",
    )


@contextmanager
def translated(doing: str, options: DockerOptions, *, during_command: bool = False) -> Iterator[None]:
    """Run a block of daemon calls, turning SDK and transport errors into envlayer errors
    (see the module docstring). ``doing`` completes "Docker refused ..." / "while ...".

    ``KeyboardInterrupt``, :class:`ContainerGone` and envlayer's own errors propagate as is.
    """
    try:
        yield
    except (EnvlayerError, ContainerGone):
        raise
    except Exception as exc:
        for matches, build in _rules():
            if matches(exc):
                raise build(exc, doing, options, during_command) from exc
        raise
