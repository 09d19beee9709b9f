"""The capability dispatcher, against the real toy plugin (declares nothing, lacks every
optional capability) and against small backends that do have them."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, TypedDict, Unpack

import pytest

from envlayer import Capability, Environment, SandboxInfo, capabilities_of
from envlayer import dispatch as lifecycle
from envlayer.capabilities import names_keyword
from envlayer.discovery.backend_registry import load_backend
from envlayer.errors import InvalidArgument
from envlayer.execution.cancel import takes_cancel
from envlayer.local.backend import LocalEnvironment
from envlayer.options import BaseOptions
from envlayer.request import ExecArguments
from envlayer.result import ExecResult


@pytest.fixture
def toy() -> Any:
    env = load_backend("toy")()
    yield env
    env.cleanup()


class Recording(Environment):
    """Declares every lifecycle capability and records what it receives."""

    name = "recording"
    capabilities = frozenset({Capability.FORCE_REMOVE, Capability.WAIT_FOR_CLEANUP, Capability.REAP_ORPHANS})
    calls: ClassVar[list[tuple[str, Any]]] = []

    def exec(self, command: Any, **kw: Any) -> ExecResult:
        return ExecResult(0)

    def read_file(self, path: str) -> bytes:
        return b""

    def write_file(self, path: str, data: bytes | str) -> None:
        pass

    def cleanup(self, *, force_remove: bool = False) -> None:
        self.calls.append(("cleanup", force_remove))
        self._closed = True

    def wait_for_cleanup(self, timeout: float) -> bool:
        self.calls.append(("wait", timeout))
        return False

    @classmethod
    def reap_orphans(cls, *, profile: str, max_age: float, dry_run: bool, options: BaseOptions) -> list[SandboxInfo]:
        cls.calls.append(("reap", (profile, max_age, dry_run)))
        return [SandboxInfo("recording", "id1", "t", profile, "exited")]


class Undeclared(Recording):
    """Same methods, but declares nothing: introspection must find them."""

    capabilities = None


class Failing(Recording):
    @classmethod
    def reap_orphans(cls, **kw: Any) -> list[SandboxInfo]:
        raise RuntimeError("daemon hiccup")


def test_toy_plugin_is_introspected_to_no_lifecycle_capability(toy: Any) -> None:
    assert type(toy).capabilities is None
    caps = capabilities_of(toy)
    assert Capability.FORCE_REMOVE not in caps
    assert Capability.WAIT_FOR_CLEANUP not in caps
    assert Capability.REAP_ORPHANS not in caps


def test_force_remove_degrades_to_plain_cleanup_on_toy(toy: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="envlayer.lifecycle"):
        outcome = lifecycle.cleanup(toy, force_remove=True)
    assert toy.closed
    assert outcome.forced is False and "no force_remove" in outcome.note
    assert any("no force_remove" in r.getMessage() for r in caplog.records)


def test_wait_for_cleanup_on_toy_means_nothing_to_wait_for(toy: Any) -> None:
    toy.cleanup()
    assert lifecycle.wait_for_cleanup(toy, 5.0) is True


def test_reap_on_toy_reports_no_reaper_and_does_not_fail(toy: Any) -> None:
    (outcome,) = lifecycle.reap_orphans([(type(toy), toy.options)], profile="p", max_age=60)
    assert outcome.supported is False and outcome.error is None and outcome.sandboxes == []
    assert "no reap_orphans" in outcome.note


def test_streaming_falls_back_to_one_delivery_on_toy(toy: Any) -> None:
    chunks: list[tuple[str, bytes]] = []
    result = lifecycle.exec_streaming(toy, "echo a; echo b >&2", lambda s, c: chunks.append((s, c)))
    assert chunks == [("stdout", b"a\n"), ("stderr", b"b\n")]
    assert result.stdout == b"a\n"


def test_streaming_is_forwarded_to_a_streaming_backend(tmp_path: Any) -> None:
    chunks: list[bytes] = []
    with LocalEnvironment(LocalEnvironment.Options(cwd=str(tmp_path))) as env:
        lifecycle.exec_streaming(env, "echo one; sleep 0.2; echo two", lambda s, c: chunks.append(c))
    assert b"".join(chunks) == b"one\ntwo\n" and len(chunks) == 2


@pytest.mark.parametrize("cls", [Recording, Undeclared])
def test_capable_backends_receive_the_keywords(cls: type[Recording]) -> None:
    Recording.calls.clear()
    env = cls()
    assert lifecycle.cleanup(env, force_remove=True).forced is True
    assert lifecycle.wait_for_cleanup(env, 2.5) is False
    (outcome,) = lifecycle.reap_orphans([(cls, env.options)], profile="p", max_age=120, dry_run=True)
    assert [s.id for s in outcome.sandboxes] == ["id1"]
    assert Recording.calls == [("cleanup", True), ("wait", 2.5), ("reap", ("p", 120, True))]


def test_plain_cleanup_never_passes_the_keyword() -> None:
    Recording.calls.clear()
    lifecycle.cleanup(Recording(), force_remove=False)
    assert Recording.calls == [("cleanup", False)]


def test_one_failing_backend_does_not_stop_the_sweep(toy: Any) -> None:
    outcomes = lifecycle.reap_orphans(
        [(Failing, BaseOptions()), (Recording, BaseOptions()), (type(toy), toy.options)], profile="p", max_age=60
    )
    assert [o.backend for o in outcomes] == ["recording", "recording", "toy"]
    assert "daemon hiccup" in (outcomes[0].error or "")
    assert [s.id for s in outcomes[1].sandboxes] == ["id1"]
    assert outcomes[2].supported is False


# --- introspection by signature: the dispatcher never raises TypeError --------------------


def _backend(capabilities: Any = None, **methods: Any) -> type[Environment]:
    """A backend class with ``methods`` added to :class:`Recording`'s required ones."""
    return type("Shaped", (Recording,), {"capabilities": capabilities, "name": "shaped", **methods})


def _wait_no_timeout(self: Any) -> bool:
    return True


def _wait_varargs(self: Any, *args: Any) -> bool:
    Recording.calls.append(("wait", args))
    return True


def _wait_positional_only(self: Any, timeout: float, /) -> bool:
    Recording.calls.append(("wait", timeout))
    return True


def _wait_keyword_only(self: Any, *, timeout: float) -> bool:
    return True


@pytest.mark.parametrize(
    ("method", "usable"),
    [(_wait_no_timeout, False), (_wait_varargs, True), (_wait_positional_only, True), (_wait_keyword_only, False)],
)
def test_wait_for_cleanup_counts_only_when_it_takes_the_timeout(method: Any, usable: bool) -> None:
    for declared in (None, frozenset({Capability.WAIT_FOR_CLEANUP})):
        cls = _backend(declared, wait_for_cleanup=method)
        assert (Capability.WAIT_FOR_CLEANUP in capabilities_of(cls)) is usable
        assert (Capability.WAIT_FOR_CLEANUP in capabilities_of(cls())) is usable
        Recording.calls.clear()
        assert lifecycle.wait_for_cleanup(cls(), 3.0) is True  # never a TypeError
        assert Recording.calls == ([("wait", (3.0,) if method is _wait_varargs else 3.0)] if usable else [])


def test_signature_problem_names_the_signature_and_the_call() -> None:
    from envlayer.capabilities import signature_problem

    cls = _backend(None, wait_for_cleanup=_wait_no_timeout)
    problem = signature_problem(cls, Capability.WAIT_FOR_CLEANUP)
    assert problem == "wait_for_cleanup() does not accept the dispatcher's call wait_for_cleanup(timeout)"
    assert signature_problem(Recording, Capability.WAIT_FOR_CLEANUP) is None


def test_reaper_taking_kwargs_receives_everything() -> None:
    got: list[dict[str, Any]] = []

    def reap_orphans(cls: Any, **kwargs: Any) -> list[SandboxInfo]:
        got.append(kwargs)
        return []

    cls = _backend(None, reap_orphans=classmethod(reap_orphans))
    (outcome,) = lifecycle.reap_orphans([(cls, BaseOptions())], profile="p", max_age=5, dry_run=True)
    assert outcome.supported and got[0]["dry_run"] is True
    assert set(got[0]) == {"profile", "max_age", "dry_run", "options"}


def test_reaper_without_dry_run_reaps_without_it_and_refuses_a_dry_run() -> None:
    got: list[tuple[str, float]] = []

    def reap_orphans(cls: Any, *, profile: str, max_age: float, options: Any) -> list[SandboxInfo]:
        got.append((profile, max_age))
        return []

    cls = _backend(frozenset({Capability.REAP_ORPHANS}), reap_orphans=classmethod(reap_orphans))
    assert Capability.REAP_ORPHANS in capabilities_of(cls)
    (refused,) = lifecycle.reap_orphans([(cls, BaseOptions())], profile="p", max_age=5, dry_run=True)
    assert refused.supported is False and "cannot do a dry run" in refused.note and got == []
    (reaped,) = lifecycle.reap_orphans([(cls, BaseOptions())], profile="p", max_age=5)
    assert reaped.supported is True and reaped.error is None and got == [("p", 5)]


def test_reaper_lacking_options_is_absent_even_when_declared() -> None:
    def reap_orphans(cls: Any, profile: str, max_age: float) -> list[SandboxInfo]:
        raise AssertionError("must not be called")

    cls = _backend(frozenset({Capability.REAP_ORPHANS}), reap_orphans=classmethod(reap_orphans))
    assert Capability.REAP_ORPHANS not in capabilities_of(cls)
    (outcome,) = lifecycle.reap_orphans([(cls, BaseOptions())], profile="p", max_age=5)
    assert outcome.supported is False and outcome.error is None
    assert "has no usable reap_orphans (reap_orphans(profile, max_age) does not accept" in outcome.note


def test_force_remove_needs_the_keyword_by_that_name() -> None:
    def cleanup_force(self: Any, *, force: bool = False) -> None:
        Recording.calls.append(("cleanup", force))

    def cleanup_positional(self: Any, force_remove: bool = False) -> None:
        Recording.calls.append(("cleanup", force_remove))

    Recording.calls.clear()
    outcome = lifecycle.cleanup(_backend(None, cleanup=cleanup_force)(), force_remove=True)
    assert outcome.forced is False and Recording.calls == [("cleanup", False)]
    Recording.calls.clear()
    outcome = lifecycle.cleanup(_backend(None, cleanup=cleanup_positional)(), force_remove=True)
    assert outcome.forced is True and Recording.calls == [("cleanup", True)]


def test_streaming_needs_every_exec_keyword() -> None:
    def exec_on_output_only(self: Any, command: Any, *, on_output: Any = None) -> ExecResult:
        return ExecResult(0, b"late\n")

    cls = _backend(frozenset({Capability.STREAMING}), exec=exec_on_output_only)
    assert Capability.STREAMING not in capabilities_of(cls)
    chunks: list[bytes] = []
    outcome = lifecycle.exec_with_output(cls(), "x", lambda s, c: chunks.append(c))
    assert outcome.streamed is False and chunks == [b"late\n"] and "no usable streaming" in outcome.note


def test_a_plugin_exception_during_a_dispatched_call_is_a_plugin_error() -> None:
    from envlayer.errors import PluginError

    def wait_for_cleanup(self: Any, timeout: float) -> bool:
        raise KeyError("state")

    env = _backend(None, wait_for_cleanup=wait_for_cleanup)()
    with pytest.raises(PluginError, match=r"backend 'shaped' from module .* failed in wait_for_cleanup: KeyError"):
        lifecycle.wait_for_cleanup(env, 1.0)


def test_the_callers_own_callback_error_is_not_blamed_on_the_plugin(tmp_path: Any) -> None:
    def closed_reader(stream: str, chunk: bytes) -> None:
        raise BrokenPipeError("reader went away")

    with (
        LocalEnvironment(LocalEnvironment.Options(cwd=str(tmp_path))) as env,
        pytest.raises(BrokenPipeError, match="reader went away"),
    ):
        lifecycle.exec_streaming(env, "echo one; sleep 5", closed_reader)


class SwitchesUsers(Recording):
    """Declares exec_as_user and records the user each call asked for."""

    capabilities = frozenset({Capability.EXEC_AS_USER})

    def exec(self, command: Any, *, user: str | None = None, **kw: Any) -> ExecResult:
        self.calls.append(("exec", user))
        return ExecResult(0)


def test_user_is_passed_to_a_backend_with_exec_as_user() -> None:
    env = SwitchesUsers()
    assert lifecycle.user_keywords(env, "nobody") == {"user": "nobody"}
    assert lifecycle.user_keywords(env, None) == {}


def test_user_on_a_backend_without_exec_as_user_is_refused_before_anything_runs(toy: Any, tmp_path: Any) -> None:
    """Never the nearest correct thing: running as the configured user instead would be wrong."""
    local = LocalEnvironment(LocalEnvironment.Options(cwd=str(tmp_path)))
    try:
        for env in (toy, local):
            with pytest.raises(InvalidArgument, match="exec_as_user") as caught:
                lifecycle.user_keywords(env, "nobody")
            assert caught.value.hint
    finally:
        local.cleanup()


def test_malformed_user_is_refused_even_where_the_capability_exists() -> None:
    with pytest.raises(InvalidArgument, match="user"):
        lifecycle.user_keywords(SwitchesUsers(), "a b")


def test_exec_as_user_needs_user_by_name_when_undeclared() -> None:
    class Named(Undeclared):
        def exec(self, command: Any, *, user: str | None = None, **kw: Any) -> ExecResult:
            return ExecResult(0)

    assert Capability.EXEC_AS_USER in capabilities_of(Named)
    assert Capability.EXEC_AS_USER not in capabilities_of(Undeclared)  # **kw alone is no promise


class _NoCancel(TypedDict, total=False):
    cwd: str | None
    timeout: float | None


class _KeywordsVia(Environment):
    """Undeclared backends whose ``exec`` keywords come from a TypedDict (as
    SandboxEnvironment declares them) or from a bare ``**kwargs``."""

    name = "keywords-via"
    capabilities = None

    def read_file(self, path: str) -> bytes:
        return b""

    def write_file(self, path: str, data: bytes | str) -> None:
        pass

    def cleanup(self) -> None:
        self._closed = True


class _TypedKeywords(_KeywordsVia):
    def exec(self, command: Any, **arguments: Unpack[ExecArguments]) -> ExecResult:
        return ExecResult(0)


class _TypedWithoutCancel(_KeywordsVia):
    def exec(self, command: Any, **arguments: Unpack[_NoCancel]) -> ExecResult:
        return ExecResult(0)


class _BareKeywords(_KeywordsVia):
    def exec(self, command: Any, **kwargs: Any) -> ExecResult:
        return ExecResult(0)


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (_TypedKeywords, {"cancel", "on_output", "user", "cwd", "timeout"}),
        (_TypedWithoutCancel, {"cwd", "timeout"}),
        (_BareKeywords, set()),
    ],
)
def test_keywords_declared_in_a_typeddict_count_as_named(backend: type[Environment], expected: set[str]) -> None:
    names = {"cancel", "on_output", "user", "cwd", "timeout", "nosuch"}
    assert {n for n in names if names_keyword(backend.exec, n)} == expected
    env = backend()
    try:
        assert takes_cancel(env) == ("cancel" in expected)
        found = capabilities_of(env)
        assert (Capability.STREAMING in found) == ("on_output" in expected)
        assert (Capability.EXEC_AS_USER in found) == ("user" in expected)
    finally:
        env.cleanup()


def test_the_sandbox_base_declares_exec_keywords_once() -> None:
    """Every built-in sandbox backend's exec takes each ExecArguments keyword by name."""
    for name in ExecArguments.__annotations__:
        assert names_keyword(LocalEnvironment.exec, name), name
    with pytest.raises(TypeError, match="unexpected keyword arguments: nosuch"):
        env = LocalEnvironment()
        try:
            env.exec("true", nosuch=1)  # type: ignore[call-arg]
        finally:
            env.cleanup()
