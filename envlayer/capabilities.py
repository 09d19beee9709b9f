"""Optional capabilities: what a backend may support beyond the required interface.

A backend declares its capabilities in the class attribute ``capabilities``. A backend
that implements the request contract (``handle_request``, see
:class:`~envlayer.environment.Environment`) is taken at its word for the ``exec``
keywords it declares (``streaming``, ``cancel``, ``exec_as_user``): its ``exec`` is
never read.

Reading signatures is a bridge for plugins written to the older keyword contract (they
implement ``exec(command, cwd=..., ...)`` themselves): such a backend that declares
nothing (``capabilities = None``) is introspected, and its ``exec`` counts as taking
``cancel`` when it names that keyword (``cancel`` was never declared before it became a
capability). Nothing is ever assumed.

A capability backed by a method counts as present only when that method exists and its
signature accepts every argument the dispatcher (:mod:`envlayer.dispatch`) passes, by
name and kind (``*args``/``**kwargs`` count). A declared capability whose method does not
fit is dropped too, so the dispatcher falls back instead of raising ``TypeError``;
:func:`signature_problem` says why, and the conformance kit fails on it.

**Partial signatures.** One keyword may be left out of a signature: ``dry_run`` of
``reap_orphans``. Such a reaper can only reap, so the dispatcher calls it without the
keyword for a real reap and refuses a dry run (the outcome says so; nothing is removed).
Every other missing argument makes the capability absent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from envlayer.request import KEYWORD_RULES, PLAIN_KEYWORDS

if TYPE_CHECKING:
    import inspect


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

    ARCHIVE_STREAM = "archive_stream"
    """``put_archive_stream(remote_dir, chunks)`` and ``get_archive_stream(remote)``: tar
    streams in bounded memory (see :class:`envlayer.transfer.SupportsArchiveStream`)."""

    PERSIST_ACROSS_PROCESSES = "persist_across_processes"
    """A later process asking for the same task attaches to the same sandbox."""

    EXEC_AS_USER = "exec_as_user"
    """``exec(..., user=NAME)`` runs that one command as another user of the sandbox."""

    UNSET_ENV = "unset_env"
    """``exec(..., unset_env=["NAME", ...])`` removes those variables from that command's
    environment (configured or the sandbox's own)."""

    CANCEL = "cancel"
    """``exec(..., cancel=token)``: ``token.cancel()`` from another thread kills the
    command's tree; the result says ``cancelled`` (see :mod:`envlayer.cancel_token`)."""

    SNAPSHOT = "snapshot"
    """``create_snapshot(name=...) -> Snapshot``, a constructor that takes
    ``from_snapshot=``, and classmethods ``list_snapshots(*, profile, options)`` and
    ``remove_snapshot(snapshot_id, *, options)`` (see :mod:`envlayer.snapshot`)."""


@dataclass(frozen=True)
class CallShape:
    """How the dispatcher calls one optional method: ``positional`` arguments (by
    position; the names are for messages), then ``keywords``. ``droppable`` keywords may
    be missing from the signature (see the module docstring)."""

    method: str
    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    classmethod: bool = False
    droppable: tuple[str, ...] = ()

    def describe(self) -> str:
        """The call as the dispatcher makes it, e.g. ``cleanup(force_remove=...)``."""
        args = [*self.positional, *(f"{k}=..." for k in self.keywords)]
        return f"{self.method}({', '.join(args)})"


EXEC_KEYWORDS = PLAIN_KEYWORDS
"""The keywords every ``exec`` call may receive (:data:`envlayer.request.PLAIN_KEYWORDS`)."""

EXEC_KEYWORD_OF: dict[Capability, str] = {Capability(rule.capability): name for name, rule in KEYWORD_RULES.items()}
"""The capabilities that are one ``exec`` keyword (:data:`envlayer.request.KEYWORD_RULES`)."""

CALL_SHAPES: dict[Capability, tuple[CallShape, ...]] = {
    Capability.FORCE_REMOVE: (CallShape("cleanup", keywords=("force_remove",)),),
    Capability.WAIT_FOR_CLEANUP: (CallShape("wait_for_cleanup", positional=("timeout",)),),
    Capability.REAP_ORPHANS: (
        CallShape(
            "reap_orphans",
            keywords=("profile", "max_age", "dry_run", "options"),
            classmethod=True,
            droppable=("dry_run",),
        ),
    ),
    Capability.LIST_SANDBOXES: (CallShape("list_sandboxes", keywords=("profile", "options"), classmethod=True),),
    Capability.REMOVE_SANDBOX: (
        CallShape(
            "remove_sandbox", positional=("task_id",), keywords=("profile", "options", "force"), classmethod=True
        ),
    ),
    **{
        capability: (CallShape("exec", positional=("command",), keywords=(*EXEC_KEYWORDS, keyword)),)
        for capability, keyword in EXEC_KEYWORD_OF.items()
    },
    Capability.DIRECTORY_TRANSFER: (
        CallShape("upload_dir", positional=("local", "remote")),
        CallShape("download_dir", positional=("remote", "local")),
    ),
    Capability.ARCHIVE_STREAM: (
        CallShape("put_archive_stream", positional=("remote_dir", "chunks")),
        CallShape("get_archive_stream", positional=("remote",)),
    ),
    Capability.SNAPSHOT: (
        CallShape("create_snapshot", keywords=("name",)),
        CallShape("__init__", positional=("options",), keywords=("task_id", "profile", "from_snapshot")),
        CallShape("list_snapshots", keywords=("profile", "options"), classmethod=True),
        CallShape("remove_snapshot", positional=("snapshot_id",), keywords=("options",), classmethod=True),
    ),
}
"""Every capability backed by a method, and how the dispatcher calls it. The others
(``persistent_session``, ``persist_across_processes``) are behaviour, not methods: they
count only when declared."""


MARKER_PARAMETERS: dict[Capability, tuple[str, str]] = {
    Capability.FORCE_REMOVE: ("cleanup", "force_remove"),
    **{capability: ("exec", keyword) for capability, keyword in EXEC_KEYWORD_OF.items()},
}
"""Capabilities that are one parameter of a required method, as (method, parameter): an
undeclared backend has them only when that parameter is named in the signature."""


def _signature(backend: Any, shape: CallShape) -> inspect.Signature | None:
    """The signature of ``shape.method`` as the dispatcher will see it (bound: no
    ``self``/``cls``), or None when the method is missing or has no signature."""
    import inspect  # lazily: ~10 ms, and most processes never introspect

    func = getattr(backend, shape.method, None)
    if not callable(func):
        return None
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    if isinstance(backend, type) and not shape.classmethod:
        # an instance method looked up on the class still has ``self``
        raw = inspect.getattr_static(backend, shape.method, None)
        if not isinstance(raw, classmethod | staticmethod):
            params = list(signature.parameters.values())[1:]
            signature = signature.replace(parameters=params)
    return signature


def _binds(signature: inspect.Signature, positional: tuple[str, ...], keywords: tuple[str, ...]) -> bool:
    try:
        signature.bind(*positional, **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def accepts_keyword(backend: Any, method: str, name: str) -> bool:
    """True when ``backend.method`` accepts the keyword argument ``name`` (by name, or
    through ``**kwargs``)."""
    import inspect

    func = getattr(backend, method, None)
    try:
        params = inspect.signature(func).parameters.values() if callable(func) else ()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) or p.kind is p.VAR_KEYWORD
        for p in params
    )


def shape_problem(backend: Any, shape: CallShape) -> str | None:
    """Why the dispatcher cannot call ``shape`` on ``backend``; None when it can.
    A signature that lacks only droppable keywords fits. Answers for an instance
    whose method comes from its class are cached per class (the dispatcher asks on
    every call)."""
    if not isinstance(backend, type) and shape.method not in getattr(backend, "__dict__", {}):
        cls: Any = type(backend)
        return _class_shape_problem(cls, shape)
    return _shape_problem(backend, shape)


def _shape_problem(backend: Any, shape: CallShape) -> str | None:
    signature = _signature(backend, shape)
    if signature is None:
        if callable(getattr(backend, shape.method, None)):
            return f"{shape.method} has no inspectable signature"
        return f"no method {shape.method}"
    required = tuple(k for k in shape.keywords if k not in shape.droppable)
    if _binds(signature, shape.positional, shape.keywords) or _binds(signature, shape.positional, required):
        return None
    bare = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    shown = signature.replace(parameters=bare, return_annotation=signature.empty)
    return f"{shape.method}{shown} does not accept the dispatcher's call {shape.describe()}"


_class_shape_problem = functools.lru_cache(maxsize=1024)(_shape_problem)


def handles_requests(backend: Any) -> bool:
    """True when ``backend`` (class or instance) implements the request contract: the
    nearest definition of ``exec`` or ``handle_request`` (an instance's own first, then
    along its class's MRO) is a ``handle_request``. False for a plugin written to the
    older keyword contract, whose own ``exec`` is what :func:`envlayer.run` calls."""
    if not isinstance(backend, type):
        own = getattr(backend, "__dict__", _NOTHING)
        if "exec" in own or "handle_request" in own:
            return "handle_request" in own
        backend = type(backend)
    known = _CLASSES_HANDLING_REQUESTS.get(backend)
    if known is None:
        known = _CLASSES_HANDLING_REQUESTS[backend] = _class_handles_requests(backend)
    return known


_NOTHING: dict[str, object] = {}
_CLASSES_HANDLING_REQUESTS: dict[type, bool] = {}
""":func:`handles_requests` of each class asked about (asked on every ``envlayer.run``)."""


def _class_handles_requests(cls: type) -> bool:
    for klass in cls.__mro__:
        if "handle_request" in vars(klass):
            return True
        if "exec" in vars(klass):
            return False
    return False


def signature_problem(backend: Any, capability: Capability) -> str | None:
    """Why ``capability`` cannot be used on ``backend`` (class or instance) through the
    dispatcher, or None when every method it needs exists and accepts the dispatcher's
    arguments. Always None for capabilities that are behaviour, not methods, and for
    the ``exec`` keywords of a backend with the request contract (declared, not read)."""
    if capability in EXEC_KEYWORD_OF and handles_requests(backend):
        return None
    for shape in CALL_SHAPES.get(capability, ()):
        problem = shape_problem(backend, shape)
        if problem is not None:
            return problem
    return None


def defines_method_for(backend: Any, capability: Capability) -> bool:
    """True when ``backend`` has some method (or parameter) meant for ``capability``,
    whether or not its signature fits: what a plugin author evidently tried to provide.
    Used by the conformance kit to catch signatures the dispatcher cannot call."""
    if capability in MARKER_PARAMETERS:
        return _has_parameter(backend, *MARKER_PARAMETERS[capability])
    shapes = CALL_SHAPES.get(capability, ())
    return any(callable(getattr(backend, s.method, None)) for s in shapes if s.method not in _ALWAYS_DEFINED)


_ALWAYS_DEFINED = frozenset({"__init__"})
"""Methods every class has: their presence says nothing about what a plugin tried to provide."""


def _has_parameter(backend: Any, method: str, name: str) -> bool:
    func = getattr(backend, method, None)
    return callable(func) and names_keyword(func, name)


def names_keyword(func: Any, name: str) -> bool:
    """True when ``func`` takes keyword ``name`` by name: a named parameter, or a
    ``**kwargs: Unpack[SomeTypedDict]`` whose TypedDict has ``name`` (the way
    :class:`~envlayer.sandbox.base.SandboxEnvironment` declares ``exec``'s keywords once,
    in :class:`~envlayer.request.ExecArguments`). A bare ``**kwargs`` does not count: a
    wrapper forwarding it to a backend without the keyword would fail."""
    func = getattr(func, "__func__", func)
    try:
        return name in _keyword_names(func)
    except TypeError:  # an unhashable callable: read it uncached
        return name in _keyword_names.__wrapped__(func)


@functools.lru_cache(maxsize=1024)
def _keyword_names(func: Any) -> frozenset[str]:
    import inspect
    import typing

    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    names = {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    for p in parameters:
        if p.kind is p.VAR_KEYWORD and p.annotation is not p.empty:
            annotation = p.annotation
            if isinstance(annotation, str):  # ``from __future__ import annotations``: evaluated
                # in the function's own module, as typing.get_type_hints does
                try:
                    annotation = eval(annotation, getattr(inspect.unwrap(func), "__globals__", {}))
                except Exception:
                    continue  # a name only imported for type checkers: no promise we can read
            if typing.get_origin(annotation) is typing.Unpack:
                (typed_dict,) = typing.get_args(annotation)
                names |= set(getattr(typed_dict, "__annotations__", ()))
    return frozenset(names)


def _introspect(backend: Any) -> frozenset[Capability]:
    found = set()
    requests = handles_requests(backend)
    for capability, shapes in CALL_SHAPES.items():
        if requests and capability in EXEC_KEYWORD_OF:
            continue  # the request contract declares these; its ``exec`` is never read
        if capability in MARKER_PARAMETERS and not _has_parameter(backend, *MARKER_PARAMETERS[capability]):
            continue  # a bare ``**kwargs`` is no promise to stream, force or switch users
        if all(shape_problem(backend, shape) is None for shape in shapes):
            found.add(capability)
    return frozenset(found)


def capabilities_of(backend: Any) -> frozenset[Capability]:
    """The capabilities of a backend class or environment instance, as the dispatcher
    will use them.

    Declared capabilities win, minus any whose method the dispatcher could not call
    (see :func:`signature_problem`). An instance may narrow its class's set (e.g. a
    Docker environment in one-shot mode has no persistent session) through an instance
    attribute of the same name. Undeclared backends are introspected. A backend written
    to the older keyword contract has ``cancel`` when its ``exec`` names the keyword (the
    bridge; see the module docstring).
    """
    declared = getattr(backend, "capabilities", None)
    if declared is None:
        return _introspect(backend)
    usable = frozenset(c for c in map(Capability, declared) if signature_problem(backend, c) is None)
    if Capability.CANCEL not in usable and _bridges_cancel(backend):
        usable |= {Capability.CANCEL}
    return usable


def _bridges_cancel(backend: Any) -> bool:
    """True for a backend of the older keyword contract whose ``exec`` names ``cancel``
    and whose capabilities are its class's (an instance's own set, as a managed handle
    narrows its backend's, is the whole truth)."""
    if handles_requests(backend) or "capabilities" in getattr(backend, "__dict__", {}):
        return False
    return _has_parameter(backend, "exec", "cancel")


def declared_capabilities(backend: Any) -> frozenset[Capability] | None:
    """The capabilities ``backend`` declares (None when it declares nothing), before
    any signature check."""
    declared = getattr(backend, "capabilities", None)
    return None if declared is None else frozenset(map(Capability, declared))


def supports(backend: Any, capability: Capability) -> bool:
    """True when ``backend`` (class or instance) has ``capability``."""
    return capability in capabilities_of(backend)


def backend_name(backend: Any) -> str:
    """The backend name of a class or instance (its ``name``, else its class name)."""
    cls = backend if isinstance(backend, type) else type(backend)
    return getattr(backend, "name", "") or cls.__name__


def absence_note(backend: Any, capability: Capability) -> str:
    """Why ``backend`` lacks ``capability``, for a fallback's note or a refusal: names a
    signature the dispatcher cannot call when the backend evidently tried to have it."""
    name = backend_name(backend)
    problem = signature_problem(backend, capability)
    if problem is not None and defines_method_for(backend, capability):
        return f"backend {name!r} has no usable {capability.value} ({problem})"
    return f"backend {name!r} has no {capability.value}"
