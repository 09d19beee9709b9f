"""Optional capabilities: what a backend may support beyond the required interface.

A backend declares its capabilities in the class attribute ``capabilities``. A backend
that declares nothing (``capabilities = None``, typical of a third-party plugin written
against an older envlayer) is introspected instead: a capability counts as present only
when the method exists and accepts the keyword it needs. Nothing is ever assumed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Capability(StrEnum):
    """Optional parts of the :class:`~envlayer.Environment` contract."""

    FORCE_REMOVE = "force_remove"
    """``cleanup(force_remove=True)`` tears the sandbox down even in persist mode."""

    WAIT_FOR_CLEANUP = "wait_for_cleanup"
    """``wait_for_cleanup(timeout) -> bool`` blocks until background teardown is done."""

    REAP_ORPHANS = "reap_orphans"
    """classmethod ``reap_orphans(*, profile, max_age, dry_run, options) -> list[SandboxInfo]``."""

    LIST_SANDBOXES = "list_sandboxes"
    """classmethod ``list_sandboxes(*, profile, options) -> list[SandboxInfo]``."""

    REMOVE_SANDBOX = "remove_sandbox"
    """classmethod ``remove_sandbox(task_id, *, profile, options, force) -> list[SandboxInfo]``."""

    STREAMING = "streaming"
    """``exec(..., on_output=callback)`` delivers output chunks as they arrive."""

    PERSISTENT_SESSION = "persistent_session"
    """Commands share one shell: ``cd`` and ``export`` persist between calls."""

    DIRECTORY_TRANSFER = "directory_transfer"
    """``upload_dir(local, remote)`` and ``download_dir(remote, local)``."""

    PERSIST_ACROSS_PROCESSES = "persist_across_processes"
    """A later process asking for the same task attaches to the same sandbox."""


def _accepts_keyword(func: Any, name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(name)
    return param is not None and param.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def _introspect(backend: Any) -> frozenset[Capability]:
    found: set[Capability] = set()
    if _accepts_keyword(getattr(backend, "cleanup", None), "force_remove"):
        found.add(Capability.FORCE_REMOVE)
    if callable(getattr(backend, "wait_for_cleanup", None)):
        found.add(Capability.WAIT_FOR_CLEANUP)
    if callable(getattr(backend, "reap_orphans", None)):
        found.add(Capability.REAP_ORPHANS)
    if callable(getattr(backend, "list_sandboxes", None)):
        found.add(Capability.LIST_SANDBOXES)
    if callable(getattr(backend, "remove_sandbox", None)):
        found.add(Capability.REMOVE_SANDBOX)
    if _accepts_keyword(getattr(backend, "exec", None), "on_output"):
        found.add(Capability.STREAMING)
    if callable(getattr(backend, "upload_dir", None)) and callable(getattr(backend, "download_dir", None)):
        found.add(Capability.DIRECTORY_TRANSFER)
    return frozenset(found)


def capabilities_of(backend: Any) -> frozenset[Capability]:
    """The capabilities of a backend class or environment instance.

    Declared capabilities win. An instance may narrow its class's set (e.g. a Docker
    environment in one-shot mode has no persistent session) through an instance
    attribute of the same name. Undeclared backends are introspected.
    """
    declared = getattr(backend, "capabilities", None)
    if declared is not None:
        return frozenset(Capability(c) for c in declared)
    return _introspect(backend)


def supports(backend: Any, capability: Capability) -> bool:
    """True when ``backend`` (class or instance) has ``capability``."""
    return capability in capabilities_of(backend)
