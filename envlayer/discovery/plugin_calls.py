"""Turn a plugin's contract-breaking exception into the core's :class:`PluginError`.

A backend may raise any :class:`~envlayer.errors.EnvlayerError` (that is its contract).
Anything else escaping its constructor or one of its methods is a bug in the plugin; the
callers in envlayer (factory, dispatcher, CLI, manager) wrap those calls in
:func:`plugin_call`, so the user sees which backend and which distribution failed, and
where, instead of a traceback. ``KeyboardInterrupt`` and other ``BaseException`` pass
through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

from envlayer.capabilities import backend_name
from envlayer.errors import EnvlayerError, PluginError


def recording(callback: Callable[[str, bytes], None]) -> tuple[Callable[[str, bytes], None], list[BaseException]]:
    """``callback`` wrapped so that whatever it raises is recorded in the returned list
    (and re-raised): pass that list as :func:`plugin_call`'s ``passthrough`` so that the
    caller's own exception (a broken pipe while printing output) is not blamed on the
    plugin that called it."""
    raised: list[BaseException] = []

    def wrapped(stream: str, chunk: bytes) -> None:
        try:
            callback(stream, chunk)
        except BaseException as exc:
            raised.append(exc)
            raise

    return wrapped, raised


@contextmanager
def plugin_call(backend: Any, stage: str, *, passthrough: Collection[BaseException] = ()) -> Iterator[None]:
    """Run the body; re-raise an envlayer error as is, and any other ``Exception`` as a
    :class:`PluginError` naming ``backend`` (class or instance), its distribution and
    ``stage`` (e.g. ``"constructor"``, ``"exec"``), with the original chained.

    ``passthrough`` holds exceptions that are not the plugin's doing (e.g. raised by the
    caller's own streaming callback while the plugin ran): they propagate unchanged. It
    may be filled while the body runs."""
    try:
        yield
    except EnvlayerError:
        raise
    except Exception as exc:
        if any(exc is other for other in passthrough):
            raise
        raise plugin_error(backend, stage, exc) from exc


def plugin_error(backend: Any, stage: str, exc: Exception) -> PluginError:
    """The :class:`PluginError` for ``exc`` escaping ``backend`` at ``stage`` (what
    :func:`plugin_call` raises; a hot path with its own ``try`` raises it ``from exc``)."""
    from envlayer.discovery.backend_registry import distribution_of

    return PluginError(backend_name(backend), distribution_of(backend), stage, exc)
