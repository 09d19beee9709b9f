"""A CLI command's way to a task's sandbox: the options the sandbox was created with are
the defaults, and a call whose options differ never replaces it unless ``--replace``.

Every command that opens a task's sandbox (``exec`` in-process and through the broker,
``shell``, ``cp``, ``snapshot``, ``fork``) goes through :func:`open_task`:

1. open with the configured options under ``on_fingerprint_mismatch = "error"`` (the
   common case: the options agree, or there is no sandbox yet);
2. when the sandbox records other options
   (:class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer`), open again with the
   recorded values as the defaults of every option no file, variable or ``-o`` sets;
3. when an explicitly set option still differs: with ``--replace``, or on a backend whose
   options change in place (``options_change_in_place``: local), open under
   ``"recreate"`` (the backend replaces the sandbox, or takes the options, and says so in
   the first result's notice); without it, refuse (:class:`~envlayer.sandbox.recorded_options.SandboxOptionsDiffer`
   naming each option, old -> new, exit 125).

A backend without ``on_fingerprint_mismatch`` (``ssh``) records nothing and is opened as
configured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from envlayer.config import Settings
from envlayer.environment import Environment
from envlayer.factory import load_configured_backend, open_environment
from envlayer.options import option_fields
from envlayer.sandbox.recorded_options import REPLACE_HINT, SandboxOptionsDiffer, defaults_from

MODE = "on_fingerprint_mismatch"
REPLACE_HELP = (
    "replace the task's sandbox if it was created with other options than this call's (default: refuse, exit "
    "125); the old sandbox's files outside a durable workspace and its processes are lost"
)


def with_arguments(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """``settings`` with ``values`` added to the selected backend's argument options
    (a copy; ``settings`` is not changed)."""
    arguments = {name: dict(given) for name, given in settings.argument_options.items()}
    arguments.setdefault(settings.backend, {}).update(values)
    return dataclasses.replace(settings, argument_options=arguments)


def _mode(settings: Settings, options_cls: type, mode: str) -> Settings:
    """``settings`` with ``on_fingerprint_mismatch = mode`` when the backend has that option."""
    return with_arguments(settings, {MODE: mode}) if MODE in option_fields(options_cls) else settings


def refusal(differ: SandboxOptionsDiffer) -> SandboxOptionsDiffer:
    """``differ`` as the CLI reports it: the hint names ``--replace``."""
    return SandboxOptionsDiffer(differ.what, differ.changes, differ.recorded, hint=REPLACE_HINT)


def open_task(
    settings: Settings,
    cls: type[Environment],
    open_with: Callable[[Settings], Environment],
    *,
    replace: bool = False,
    environ: Mapping[str, str] | None = None,
    remembered: MutableMapping[str, Settings] | None = None,
    key: Callable[[], str] = str,
    before_replacing: Callable[[], None] = lambda: None,
) -> tuple[Environment, Settings]:
    """The environment ``open_with(settings)`` opens, following the module's steps, and
    the settings it was opened with.
    ``cls`` is the backend's class; ``environ`` the caller's variables (for
    which options they set); ``remembered[key()]`` (the broker's) keeps the settings a
    call needed, so the next call with the same key opens with them at once (``key`` is
    called only when something is or will be remembered);
    ``before_replacing()`` is called before the sandbox is replaced (or its options changed
    in place), so the broker lets go of what the old options made.

    Raises :class:`SandboxOptionsDiffer` (refused: the hint names ``--replace``) and
    whatever ``open_with`` raises."""
    known = remembered.get(key()) if remembered and not replace else None
    if remembered is not None and known is not None:
        try:
            return open_with(known), known
        except SandboxOptionsDiffer:
            remembered.pop(key(), None)  # the sandbox was replaced since: learn its options again
    chosen = _mode(settings, cls.Options, "error")
    try:
        return open_with(chosen), chosen
    except SandboxOptionsDiffer as exc:
        differ = exc
    if differ.recorded:
        explicit = settings.option_sources(settings.backend, env=environ)
        chosen = with_arguments(chosen, defaults_from(differ.recorded, explicit))
        try:
            env = open_with(chosen)
        except SandboxOptionsDiffer as exc:
            differ = exc
        else:
            if remembered is not None:
                remembered[key()] = chosen
            return env, chosen
    if not (replace or getattr(cls, "options_change_in_place", False)):
        raise refusal(differ) from None
    before_replacing()
    chosen = _mode(chosen, cls.Options, "recreate")
    return open_with(chosen), chosen


def open_task_environment(settings: Settings, task: str, *, replace: bool = False) -> Environment:
    """:func:`open_task` in this process: the environment of ``task`` on the backend
    ``settings`` select (raises like :func:`~envlayer.factory.open_environment`)."""
    cls = load_configured_backend(settings)

    def open_with(chosen: Settings) -> Environment:
        return open_environment(task_id=task, settings=chosen, backends={chosen.backend: cls})

    return open_task(settings, cls, open_with, replace=replace)[0]
