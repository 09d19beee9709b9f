"""The conformance suite every backend runs against itself.

Usage, in a backend's test module::

    import pytest
    from envlayer.testing import EnvironmentConformance

    class TestMyBackend(EnvironmentConformance):
        @pytest.fixture
        def env(self):
            environment = MyEnvironment(MyEnvironment.Options(timeout=30))
            yield environment
            environment.cleanup()

The fixture must yield a fresh, working environment whose working directory is
writable. The kit sets ``env.options.timeout``, ``max_file_bytes`` and ``file_root``
for the duration of single checks (and restores them), so the backend must read them
from ``self.options`` at call time. The suite only uses the public interface and POSIX ``sh``
utilities (``echo``, ``cat``, ``printf``, ``head``, ``sleep``, ``kill``, ``pwd``, ``mkdir``, and
``renice`` where there is one), so it runs on a busybox image as well as on a full distribution.

Override a class attribute to describe the backend honestly (each default states the
strict contract):

* ``supports_stdin = True``
* ``kills_escaped_processes = True``: a timeout also kills children that called
  ``setsid``; set False only with a documented reason.
* ``handles_output_floods = True``: see :class:`ExecContractConformance`.
* ``replaces_files_atomically = True``: a reader never sees a file half replaced by
  ``write_file`` (``test_replace_is_atomic``).
* ``confines_symlinks = True``: with ``file_root`` set, a symlink inside the root that
  points out of it is refused (``test_symlink_out_of_file_root_refused``); False for a
  backend that confines paths lexically only.

The permission checks (``test_*_follows_the_users_rights``) check the sandbox user's rights,
no more and no less: a non-root user is denied (``SandboxPermissionDenied``), root is not
(its rights cover every file). Run the kit once as root and once with a fixture whose
sandbox user is not root (a ``user`` option, a non-root login, or the test process itself
as ``nobody``) to cover both.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest

from envlayer import dispatch as lifecycle
from envlayer.capabilities import (
    CALL_SHAPES,
    Capability,
    accepts_keyword,
    capabilities_of,
    declared_capabilities,
    defines_method_for,
    signature_problem,
)
from envlayer.environment import Environment
from envlayer.errors import (
    BackendUnavailable,
    EnvironmentClosed,
    FileTooLarge,
    InvalidArgument,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
    SandboxPermissionDenied,
    UnsupportedArgument,
)
from envlayer.options import BaseOptions
from envlayer.testing.hostile import at_lowest_priority


def _scratch() -> str:
    return f"envlayer-conformance-{uuid.uuid4().hex[:10]}"


@contextmanager
def _pidfile(env: Environment) -> Iterator[str]:
    """A scratch pid file in the sandbox's /tmp; afterwards, even when the test failed,
    every pid it lists is killed and the file removed (best effort)."""
    path = f"/tmp/{_scratch()}.pids"
    try:
        yield path
    finally:
        try:
            env.exec(f"[ -f {path} ] && kill -9 $(cat {path}) 2>/dev/null; rm -f {path}", timeout=30)
        except Exception:
            pass


@contextmanager
def _scratch_file(env: Environment) -> Iterator[str]:
    """A path in the sandbox's /tmp that does not exist yet; removed afterwards."""
    path = f"/tmp/{_scratch()}"
    try:
        yield path
    finally:
        try:
            env.exec(f"rm -f {path}", timeout=30)
        except Exception:
            pass


def _user_is_root(env: Environment) -> bool:
    """Whether the sandbox's user is root, whose rights cover every file: the permission
    checks then expect success where another user is denied (see the module docstring)."""
    return env.exec("id -u").stdout_text.strip() == "0"


@contextmanager
def _file_with_mode(env: Environment, content: bytes, mode: str) -> Iterator[str]:
    """A scratch file in the working directory holding ``content``, with ``chmod mode``;
    removed afterwards, even when the test failed."""
    name = _scratch()
    env.write_file(name, content)
    try:
        env.exec(f"chmod {mode} {name}").check()
        yield name
    finally:
        env.exec(f"chmod 600 {name}; rm -f {name}")


def _exists(env: Environment, path: str) -> bool:
    """Whether ``path`` exists in the sandbox, asked through ``read_file`` (not ``exec``)."""
    try:
        env.read_file(path)
    except FileNotFoundError:
        return False
    return True


def _assert_denied(action: Callable[[], object], path: str) -> None:
    """``action`` raises :class:`SandboxPermissionDenied` (a ``PermissionError``) naming ``path``."""
    with pytest.raises(PermissionError) as caught:
        action()
    assert isinstance(caught.value, SandboxPermissionDenied)
    assert path in str(caught.value)


def _report_alive(pids: str) -> str:
    """Shell that prints ``alive PID`` for each live pid in ``pids`` (a shell word list).
    A zombie counts as dead: it runs nothing, and some PID 1s never reap them."""
    return (
        f"for p in {pids}; do "
        "if [ -r /proc/$p/status ]; then "
        "s=$(sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' /proc/$p/status); "
        '[ -n "$s" ] && [ "$s" != Z ] && echo alive $p; '
        "elif kill -0 $p 2>/dev/null; then echo alive $p; fi; done"
    )


_FLOOD_CAP = 65536
"""``max_output_bytes`` during the flood tests (see there)."""


# --- exec contract: bad input, hostile output, session semantics (exec-core) -----------


class ExecContractConformance:
    """Checks of the exec contract that every backend shares: arguments refused the same
    way everywhere, output floods that must not defeat a timeout, and (for backends with
    ``persistent_session``) the one session semantics stated in the
    :class:`~envlayer.environment.Environment` contract. Use it next to
    :class:`EnvironmentConformance` (same ``env`` fixture)::

        class TestMyBackend(EnvironmentConformance, ExecContractConformance): ...

    ``handles_output_floods = True``: a command writing without pause (``yes``,
    ``cat /dev/zero``, run at the lowest CPU priority so that a parallel test run keeps its
    CPU) still times out on time, in bounded memory; set False only for a backend
    documented to buffer all output.
    """

    handles_output_floods: ClassVar[bool] = True

    # --- arguments refused before anything runs ----------------------------------------

    @pytest.mark.parametrize("timeout", [-1, -0.5, float("nan"), float("inf"), float("-inf"), 1e308, 10**9])
    def test_bad_timeout_is_refused(self, env: Environment, timeout: float) -> None:
        with _scratch_file(env) as path:
            with pytest.raises(InvalidArgument) as info:
                env.exec(f"echo ran > {path}", timeout=timeout)
            assert info.value.argument == "timeout" and info.value.hint
            assert env.exec(f"cat {path} 2>/dev/null || echo absent").stdout_text == "absent\n"

    def test_zero_timeout_means_no_limit(self, env: Environment) -> None:
        result = env.exec("echo unlimited", timeout=0)
        assert result.ok and result.timeout is None and result.stdout == b"unlimited\n"

    @pytest.mark.parametrize("name", ["X;echo INJECTED;", "1ABC", "A-B", "", "A B", "A=B", "$(id)"])
    def test_env_name_not_an_identifier_is_refused(self, env: Environment, name: str) -> None:
        with pytest.raises(InvalidArgument) as info:
            env.exec("echo ran", env={name: "v"})
        assert info.value.argument == "env"
        assert env.exec("echo still-fine").stdout == b"still-fine\n"

    @pytest.mark.parametrize(
        "call",
        [
            pytest.param(lambda e: e.exec("echo a\0b"), id="command"),
            pytest.param(lambda e: e.exec(["echo", "a\0b"]), id="argv"),
            pytest.param(lambda e: e.exec("pwd", cwd="/tmp\0x"), id="cwd"),
            pytest.param(lambda e: e.exec("true", env={"ENVLAYER_CONF_NUL": "a\0b"}), id="env-value"),
            pytest.param(lambda e: e.read_file("a\0b"), id="read_file"),
            pytest.param(lambda e: e.write_file("a\0b", b"x"), id="write_file"),
        ],
    )
    def test_nul_byte_is_bad_input_not_an_outage(self, env: Environment, call: Any) -> None:
        with pytest.raises(InvalidArgument) as info:
            call(env)
        assert not isinstance(info.value, BackendUnavailable)
        assert "NUL" in str(info.value)
        assert env.exec("echo still-fine").stdout == b"still-fine\n"

    def test_empty_argv_is_refused(self, env: Environment) -> None:
        with pytest.raises(InvalidArgument):
            env.exec([])

    # --- hostile output ------------------------------------------------------------------

    @pytest.mark.parametrize(
        "flood",
        [
            pytest.param("exec yes", id="yes"),
            pytest.param("exec cat /dev/zero", id="zero-no-newline"),
            pytest.param("exec yes >&2", id="stderr-only"),
            pytest.param("exec cat /dev/zero >&2", id="stderr-no-newline"),
        ],
    )
    def test_flood_times_out_on_time_and_leaves_nothing(self, env: Environment, flood: str) -> None:
        if not self.handles_output_floods:
            pytest.skip("backend documents that it buffers all output")
        # A cap of 64 KiB: a loaded machine may move less than the default 1 MiB through a
        # slow transport in 1 s, and then no cap would be hit; any flood passes 64 KiB (the
        # slowest transport, Daytona's, moved over 2 MiB in 1 s with six floods at once).
        previous_cap = env.options.max_output_bytes
        with _pidfile(env) as pidfile:
            env.options.max_output_bytes = _FLOOD_CAP
            try:
                # A flood never ends by itself: that the call returns at all, timed out with
                # the 1 s limit, shows the timeout ended it. How soon after the deadline is a
                # speed figure (benchmarks/timeouts.py), not a check: load stretches it.
                # At the lowest CPU priority (see envlayer.testing.hostile.LOWEST_PRIORITY).
                result = env.exec(f"echo $$ > {pidfile}; exec {at_lowest_priority(flood)}", timeout=1)
            finally:
                env.options.max_output_bytes = previous_cap
            assert result.timed_out and result.exit_code == 124 and result.timeout == 1
            noisy = result.stderr_truncation if ">&2" in flood else result.stdout_truncation
            assert noisy is not None and noisy.total > _FLOOD_CAP
            assert noisy.kept_head + noisy.kept_tail <= _FLOOD_CAP
            check = env.exec(_report_alive(f"$(cat {pidfile})"))
            assert check.stdout_text == "", f"the flood survived its timeout: {check.stdout_text}"
        assert env.exec("echo after-flood").stdout == b"after-flood\n"

    # --- one session semantics -------------------------------------------------------------

    @staticmethod
    @contextmanager
    def _session_home(env: Environment) -> Iterator[str]:
        """Skip without ``persistent_session``; else ``cd`` the session into a scratch
        directory (with a ``sub`` directory) and yield its path; afterwards reset the
        options these tests set, leave and remove it, even when the test failed."""
        if Capability.PERSISTENT_SESSION not in capabilities_of(env):
            pytest.skip("no persistent_session capability")
        home = f"/tmp/{_scratch()}"
        env.exec(f"mkdir -p {home}/sub && cd {home}").check()
        try:
            yield home
        finally:
            env.exec(f"set +e +u; cd / && rm -rf {home}")

    def test_session_per_call_cwd_and_env_do_not_persist(self, env: Environment) -> None:
        with self._session_home(env) as home:
            inner = env.exec("cd /; export ENVLAYER_CONF_INNER=1; pwd", cwd="sub", env={"ENVLAYER_CONF_ONCE": "x"})
            assert inner.stdout_text == "/\n"
            after = env.exec('pwd; printf "%s/%s" "${ENVLAYER_CONF_INNER:-unset}" "${ENVLAYER_CONF_ONCE:-unset}"')
            assert after.stdout_text == f"{home}\nunset/unset"
            assert env.exec("pwd", cwd="sub").stdout_text == f"{home}/sub\n"
            missing = env.exec("pwd", cwd=f"{home}/missing")
            assert missing.exit_code == 126 and b"missing" in missing.stderr

    def test_session_exit_n_keeps_cwd_exports_and_options(self, env: Environment) -> None:
        with self._session_home(env) as home:
            env.exec("export ENVLAYER_CONF_KEPT=yes; ENVLAYER_CONF_LOCAL=mem; set -u").check()
            assert env.exec("exit 7").exit_code == 7
            after = env.exec('pwd; printf "%s/%s/" "$ENVLAYER_CONF_KEPT" "${ENVLAYER_CONF_LOCAL:-gone}"; echo $-')
            assert after.recovered == ""
            lines = after.stdout_text.split("\n")
            assert lines[0] == home and lines[1].startswith("yes/gone/") and "u" in lines[1].split("/")[2]

    def test_session_syntax_error_loses_nothing(self, env: Environment) -> None:
        with self._session_home(env) as home:
            env.exec("ENVLAYER_CONF_LOCAL=mem").check()
            broken = env.exec("if then fi (")
            assert broken.exit_code not in (0, 124) and broken.stderr
            after = env.exec('pwd; printf %s "${ENVLAYER_CONF_LOCAL:-gone}"')
            assert after.stdout_text == f"{home}\nmem" and after.recovered == ""

    def test_session_set_e_ends_the_call_not_the_session(self, env: Environment) -> None:
        with self._session_home(env) as home:
            env.exec("export ENVLAYER_CONF_KEPT=yes; set -e").check()
            failed = env.exec("false; echo not-reached")
            assert failed.exit_code == 1 and failed.stdout == b""
            after = env.exec('pwd; printf %s "$ENVLAYER_CONF_KEPT"; case $- in *e*) echo " e-on";; esac; set +e')
            assert after.stdout_text == f"{home}\nyes e-on\n" and after.recovered == ""

    def test_session_redirected_fds_do_not_break_framing(self, env: Environment) -> None:
        with self._session_home(env):
            env.exec("exec 2>&1").check()
            assert env.exec("echo out; echo err >&2").stdout == b"out\nerr\n"
            env.exec("exec 2>/dev/null >/dev/null").check()
            result = env.exec("printf no-newline")
            assert result.exit_code == 0 and result.recovered == ""

    def test_session_set_x_stays_on_until_set_off_and_traces_only_the_command(self, env: Environment) -> None:
        """The trace shows the user's commands and none of the session's own (which would
        also show the call's marker seed), also across an ``exit`` (options persist)."""
        trace = re.compile(r"\++ ")
        with self._session_home(env):
            assert env.exec("set -x").stderr == b""
            for command, status in (("echo hi", 0), ("false", 1), ("echo hi", 0)):
                traced = env.exec(command)
                assert (traced.exit_code, traced.stdout_text) == (status, "hi\n" if status == 0 else "")
                assert trace.sub("+ ", traced.stderr_text) == f"+ {command}\n"
            gone = env.exec("exit 3")
            assert gone.exit_code == 3 and trace.sub("+ ", gone.stderr_text) == "+ exit 3\n"
            again = env.exec("echo hi")
            assert (again.stdout_text, trace.sub("+ ", again.stderr_text)) == ("hi\n", "+ echo hi\n")
            assert trace.sub("+ ", env.exec("set +x").stderr_text) == "+ set +x\n"
            assert env.exec("echo hi").stderr == b""

    def test_session_protocol_fds_are_out_of_reach(self, env: Environment) -> None:
        probe = 'for fd in 6 7 8; do { true >&"$fd"; } 2>/dev/null && echo "open $fd"; done; cat; echo eof'
        with self._session_home(env):
            assert env.exec(probe).stdout_text == "eof\n"
            env.exec("exec 6>/dev/null 7>/dev/null 8>/dev/null; exec 6>&- 7>&- 8>&-").check()
            after = env.exec(f"{probe}; echo err >&2")
            assert (after.stdout_text, after.stderr_text, after.recovered) == ("eof\n", "err\n", "")

    def test_session_timeout_restarts_the_shell_and_says_so(self, env: Environment) -> None:
        with self._session_home(env) as home:
            env.exec("export ENVLAYER_CONF_KEPT=yes").check()
            assert env.exec("sleep 30", timeout=1).timed_out
            after = env.exec('pwd; printf %s "${ENVLAYER_CONF_KEPT:-reset}"')
            assert after.stdout_text == f"{home}\nreset"
            assert after.recovered, "the first call after a killed session shell must say state was lost"
            assert env.exec("true").recovered == ""


class EnvironmentConformance:
    """Behaviour every :class:`~envlayer.Environment` must show. Subclass it and provide
    an ``env`` fixture; see the module docstring."""

    supports_stdin: ClassVar[bool] = True
    kills_escaped_processes: ClassVar[bool] = True
    replaces_files_atomically: ClassVar[bool] = True
    confines_symlinks: ClassVar[bool] = True

    # --- exec: exit codes, streams, cwd, env, stdin -------------------------------

    def test_exit_code_zero(self, env: Environment) -> None:
        result = env.exec("true")
        assert result.exit_code == 0
        assert result.ok
        assert not result.timed_out

    @pytest.mark.parametrize("code", [1, 3, 42, 255])
    def test_exit_code_nonzero(self, env: Environment, code: int) -> None:
        result = env.exec(f"exit {code}")
        assert result.exit_code == code
        assert not result.ok

    def test_stdout_and_stderr_kept_apart(self, env: Environment) -> None:
        result = env.exec("echo to-out; echo to-err >&2")
        assert result.stdout == b"to-out\n"
        assert result.stderr == b"to-err\n"

    def test_argv_list_is_not_shell_interpreted(self, env: Environment) -> None:
        result = env.exec(["echo", "$HOME; echo injected", "'quoted'"])
        assert result.stdout_text == "$HOME; echo injected 'quoted'\n"

    def test_command_not_found_exit_127(self, env: Environment) -> None:
        assert env.exec("definitely-not-a-command-xyz").exit_code == 127

    def test_cwd_per_call(self, env: Environment) -> None:
        name = _scratch()
        env.exec(f"mkdir -p {name}/sub").check()
        result = env.exec("pwd", cwd=f"{name}/sub")
        assert result.stdout_text.strip().endswith(f"{name}/sub")
        env.exec(f"rm -rf {name}")

    def test_env_per_call(self, env: Environment) -> None:
        value = "va lue'\"$x"
        result = env.exec('printf %s "$ENVLAYER_CONF_VAR"', env={"ENVLAYER_CONF_VAR": value})
        assert result.stdout_text == value

    def test_env_value_that_starts_with_a_dash(self, env: Environment) -> None:
        """A value that looks like an option (``-O2``, ``--- a``) arrives as it is."""
        for value in ("-O2", "--- a/f", "-"):
            result = env.exec('printf %s "$ENVLAYER_CONF_DASH"', env={"ENVLAYER_CONF_DASH": value})
            assert result.stdout_text == value

    def test_env_does_not_leak_to_next_call(self, env: Environment) -> None:
        env.exec("true", env={"ENVLAYER_CONF_ONCE": "1"})
        result = env.exec('printf %s "${ENVLAYER_CONF_ONCE:-unset}"')
        assert result.stdout_text == "unset"

    def test_stdin_bytes(self, env: Environment) -> None:
        if not self.supports_stdin:
            pytest.skip("backend declares no stdin support")
        payload = bytes(range(256)) * 8
        result = env.exec("cat", stdin=payload)
        assert result.stdout == payload

    def test_stdin_large(self, env: Environment) -> None:
        if not self.supports_stdin:
            pytest.skip("backend declares no stdin support")
        payload = os.urandom(300_000)
        result = env.exec("cat", stdin=payload, timeout=60)
        assert result.stdout == payload

    def test_stdin_that_starts_with_a_dash(self, env: Environment) -> None:
        """stdin that looks like an option (a patch's ``--- a/f``, ``-v``) arrives as it is."""
        if not self.supports_stdin:
            pytest.skip("backend declares no stdin support")
        for payload in (b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new\n", b"-v", b"-"):
            result = env.exec("cat", stdin=payload)
            assert (result.stdout, result.stderr) == (payload, b"")

    def test_stdin_text(self, env: Environment) -> None:
        if not self.supports_stdin:
            pytest.skip("backend declares no stdin support")
        assert env.exec("cat", stdin="héllo\n").stdout_text == "héllo\n"

    def test_no_stdin_means_eof(self, env: Environment) -> None:
        result = env.exec("cat", timeout=10)
        assert not result.timed_out
        assert result.stdout == b""

    # --- output size and binary ------------------------------------------------------

    def test_binary_output_intact(self, env: Environment) -> None:
        result = env.exec(r"printf '\000\001\377\376abc\000'")
        assert result.stdout == b"\x00\x01\xff\xfeabc\x00"

    def test_large_output_within_cap(self, env: Environment) -> None:
        size = min(2_000_000, env.options.max_output_bytes)
        result = env.exec(f"head -c {size} /dev/zero")
        assert len(result.stdout) == size
        assert result.stdout_truncation is None

    def test_output_over_cap_is_truncated_with_metadata(self, env: Environment) -> None:
        cap = env.options.max_output_bytes
        total = cap + 100_000
        result = env.exec(f"head -c {total} /dev/zero; echo done >&2")
        assert result.exit_code == 0
        trunc = result.stdout_truncation
        assert trunc is not None
        assert trunc.total == total
        assert trunc.dropped == total - trunc.kept_head - trunc.kept_tail
        assert trunc.kept_head + trunc.kept_tail <= cap
        assert result.stderr == b"done\n"

    # --- timeouts ---------------------------------------------------------------------

    def test_timeout_reports_and_returns_quickly(self, env: Environment) -> None:
        """The timeout cuts the command short and keeps the output so far. The bound only
        tells a cut from the command's own end (120 s); how soon the call returns is a
        speed figure (benchmarks/timeouts.py), not a check: load stretches it."""
        result = env.exec("echo started; sleep 120", timeout=1)
        assert result.timed_out
        assert result.exit_code == 124
        assert b"started" in result.stdout
        assert result.duration < 120

    def test_timeout_kills_the_process_tree(self, env: Environment) -> None:
        with _pidfile(env) as pidfile:
            script = f"sleep 300 & echo $! > {pidfile}; sh -c 'sleep 301' & echo $! >> {pidfile}; sleep 302"
            assert env.exec(script, timeout=1).timed_out
            check = env.exec(_report_alive(f"$(cat {pidfile})"))
            assert check.stdout_text == "", f"processes survived the timeout: {check.stdout_text}"

    def test_timeout_stops_the_rest_of_the_script(self, env: Environment) -> None:
        """The shell running the command's script dies with it: what follows the command
        that timed out never runs. A backend that kills only the marked children (the
        ``sleep``) and not the shell running the script lets that shell carry on at once.
        The check asks first whether that shell (``$$``) still runs, then whether the rest
        ran: a shell that was spared is caught either way, with no waiting."""
        with _pidfile(env) as pidfile, _scratch_file(env) as late:
            script = f"echo $$ > {pidfile}; sleep 300; echo late > {late}; sleep 301"
            assert env.exec(script, timeout=1).timed_out
            check = env.exec(f"{_report_alive(f'$(cat {pidfile})')}; cat {late} 2>/dev/null")
            assert check.stdout_text == "", f"the script went on after its timeout: {check.stdout_text}"

    def test_timeout_kills_setsid_escapee(self, env: Environment) -> None:
        if not self.kills_escaped_processes:
            pytest.skip("backend documents that it cannot reach setsid escapees")
        if env.exec("command -v setsid").exit_code != 0:
            pytest.skip("no setsid in this sandbox")
        with _pidfile(env) as pidfile:
            env.exec(f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 303' & sleep 304", timeout=1)
            check = env.exec(_report_alive(f"$(cat {pidfile})"))
            assert check.stdout_text == ""

    def test_interrupt_kills_the_process_tree(self, env: Environment) -> None:
        """A KeyboardInterrupt raised while the command runs (here from the streaming
        callback, as a signal handler would) kills the tree, then propagates."""
        if Capability.STREAMING not in capabilities_of(env):
            pytest.skip("needs the streaming capability to interrupt mid-command")

        def interrupt(stream: str, chunk: bytes) -> None:
            if b"ready" in chunk:
                raise KeyboardInterrupt

        with _pidfile(env) as pidfile:
            script = f"sleep 310 & echo $! > {pidfile}; echo ready; sleep 311"
            with pytest.raises(KeyboardInterrupt):
                env.exec(script, timeout=60, on_output=interrupt)  # type: ignore[call-arg]
            check = env.exec(_report_alive(f"$(cat {pidfile})"))
            assert check.stdout_text == "", f"processes survived the interrupt: {check.stdout_text}"
        assert env.exec("echo fine").stdout == b"fine\n"

    def test_cancel_from_another_thread_kills_the_tree(self, env: Environment) -> None:
        """A backend with the ``cancel`` capability kills the command's tree when the
        token is cancelled from another thread, and returns the output so far with
        ``cancelled=True`` and exit code 130."""
        from envlayer.testing.cancelling import exec_cancelled_after_output

        if not {Capability.CANCEL, Capability.STREAMING} <= capabilities_of(env):
            pytest.skip("backend has no cancel (or cannot stream)")
        with _pidfile(env) as pidfile:
            script = f"sleep 312 & echo $! > {pidfile}; echo ready; sleep 313"
            result = exec_cancelled_after_output(env, script, timeout=60)
            assert result.cancelled and result.exit_code == 130 and not result.timed_out
            assert result.stdout == b"ready\n"
            check = env.exec(_report_alive(f"$(cat {pidfile})"))
            assert check.stdout_text == "", f"processes survived the cancel: {check.stdout_text}"
        assert env.exec("echo fine").stdout == b"fine\n"

    # --- exec_as_user (only on backends that declare it) ---------------------------------

    @staticmethod
    def _other_user(env: Environment) -> tuple[str, str]:
        """(sandbox user's uid, a different uid to run as): 65534 for a root sandbox, else 0.
        Skips unless the backend has ``exec_as_user``."""
        if Capability.EXEC_AS_USER not in capabilities_of(env):
            pytest.skip("backend has no exec_as_user")
        own = env.exec("id -u").stdout_text.strip()
        return own, "65534" if own == "0" else "0"

    def test_exec_as_user_runs_that_command_as_that_user(self, env: Environment) -> None:
        own, other = self._other_user(env)
        result = env.exec("id -u", user=other)  # type: ignore[call-arg]
        assert (result.exit_code, result.stdout_text.strip()) == (0, other), result
        assert env.exec("id -u").stdout_text.strip() == own, "the next call must run as the sandbox user again"

    def test_exec_as_user_timeout_kills_the_process_tree(self, env: Environment) -> None:
        _, other = self._other_user(env)
        with _pidfile(env) as pidfile:
            env.exec(f"touch {pidfile}; chmod 666 {pidfile}").check()
            script = f"sleep 320 & echo $! > {pidfile}; sleep 321"
            assert env.exec(script, timeout=1, user=other).timed_out  # type: ignore[call-arg]
            check = env.exec(_report_alive(f"$(cat {pidfile})"))
            assert check.stdout_text == "", f"processes survived the timeout: {check.stdout_text}"

    def test_exec_as_unknown_user_fails_only_that_call(self, env: Environment) -> None:
        self._other_user(env)
        result = env.exec("echo ran", user="envlayer-no-such-user")  # type: ignore[call-arg]
        assert result.exit_code != 0 and b"ran" not in result.stdout, result
        assert env.exec("echo fine").stdout == b"fine\n"

    def test_malformed_user_is_refused(self, env: Environment) -> None:
        self._other_user(env)
        for user in ("", "a b", "root\0", "-r", "x;id"):
            with pytest.raises(InvalidArgument):
                env.exec("true", user=user)  # type: ignore[call-arg]

    def test_user_is_refused_without_exec_as_user(self, env: Environment) -> None:
        """An ``exec`` that takes ``user`` (as every backend built on
        :class:`~envlayer.sandbox.base.SandboxEnvironment` does) but lacks the
        ``exec_as_user`` capability raises ``InvalidArgument``, and nothing runs: a
        command never runs as another user than the one asked for."""
        if Capability.EXEC_AS_USER in capabilities_of(env) or not accepts_keyword(env, "exec", "user"):
            pytest.skip("backend has exec_as_user, or its exec takes no user")
        with _scratch_file(env) as path:
            with pytest.raises(InvalidArgument):
                env.exec(f"echo ran > {path}", user="nobody")  # type: ignore[call-arg]
            assert env.exec(f"test -e {path}").exit_code != 0, "the refused command ran"

    # --- unset_env (only on backends that declare it) -------------------------------------

    @staticmethod
    def _needs_unset_env(env: Environment) -> None:
        if Capability.UNSET_ENV not in capabilities_of(env):
            pytest.skip("backend has no unset_env")

    def test_unset_env_removes_a_variable_for_that_call_only(self, env: Environment) -> None:
        """``unset_env`` removes a variable of the sandbox's own (``HOME``, or another it
        sets) and one of the configuration's (``PAGER``, set by every built-in backend)
        from that one command, a shell string or an argv; the next call has them again.
        (``PATH`` is no probe: a shell started without it gives itself a default.)"""
        self._needs_unset_env(env)
        listed = {line.partition("=")[0] for line in env.exec("env").stdout_text.splitlines()}
        names = [n for n in ("HOME", "USER", "LANG", "PAGER") if n in listed][:2]
        if not names:
            pytest.skip("the sandbox sets none of HOME, USER, LANG, PAGER")
        show = " ".join(f'"${{{n}-unset}}"' for n in names)
        result = env.exec(f"echo {show}", unset_env=names)  # type: ignore[call-arg]
        assert (result.exit_code, result.stdout_text.split()) == (0, ["unset"] * len(names)), result
        argv = env.exec(["/bin/sh", "-c", f"echo {show}"], unset_env=names)  # type: ignore[call-arg]
        assert (argv.exit_code, argv.stdout_text.split()) == (0, ["unset"] * len(names)), argv
        assert "unset" not in env.exec(f"echo {show}").stdout_text.split(), "the next call must have them again"

    @pytest.mark.parametrize(
        ("names", "env_vars"), [(["1BAD"], None), ("PATH", None), (["A"], {"A": "1"}), (["A\0"], None)]
    )
    def test_bad_unset_env_is_refused(self, env: Environment, names: Any, env_vars: Any) -> None:
        """A name that is not an identifier, a bare string, or a name ``env`` also sets:
        ``InvalidArgument``, on every backend, before anything runs."""
        with pytest.raises(InvalidArgument, match="unset_env"):
            lifecycle.run(env, "true", env=env_vars, unset_env=names)

    def test_unset_env_is_refused_without_the_capability(self, env: Environment) -> None:
        """Without ``unset_env`` a call asking for it raises ``UnsupportedArgument`` and
        nothing runs: a command never sees a variable it was to run without."""
        if Capability.UNSET_ENV in capabilities_of(env):
            pytest.skip("backend has unset_env")
        with _scratch_file(env) as path:
            with pytest.raises(UnsupportedArgument):
                lifecycle.run(env, f"echo ran > {path}", unset_env=["HOME"])
            assert env.exec(f"test -e {path}").exit_code != 0, "the refused command ran"

    def test_next_call_works_after_timeout(self, env: Environment) -> None:
        env.exec("sleep 30", timeout=1)
        result = env.exec("echo fine")
        assert result.stdout == b"fine\n"
        assert result.exit_code == 0

    def test_background_process_does_not_block_return(self, env: Environment) -> None:
        with _pidfile(env) as pidfile:
            result = env.exec(f"sleep 120 > /dev/null 2>&1 & echo $! > {pidfile}; echo back", timeout=20)
            assert not result.timed_out
            assert result.stdout == b"back\n"

    # --- files ------------------------------------------------------------------------

    def test_file_roundtrip_binary(self, env: Environment) -> None:
        name = f"{_scratch()}.bin"
        payload = os.urandom(70_000) + b"\x00\r\n"
        env.write_file(name, payload)
        assert env.read_file(name) == payload
        env.exec(f"rm -f {name}")

    def test_file_text_utf8(self, env: Environment) -> None:
        name = f"{_scratch()}.txt"
        env.write_file(name, "naïve ☃\n")
        assert env.read_text(name) == "naïve ☃\n"
        assert env.exec(f"cat {name}").stdout == "naïve ☃\n".encode()
        env.exec(f"rm -f {name}")

    def test_file_written_is_visible_to_exec_and_back(self, env: Environment) -> None:
        name = _scratch()
        env.exec(f"printf 'from-shell' > {name}").check()
        assert env.read_file(name) == b"from-shell"
        env.write_file(name, b"from-api")
        assert env.exec(f"cat {name}").stdout == b"from-api"
        env.exec(f"rm -f {name}")

    def test_write_creates_nested_dirs(self, env: Environment) -> None:
        top = _scratch()
        env.write_file(f"{top}/a/b/c.txt", b"deep")
        assert env.exec(f"cat {top}/a/b/c.txt").stdout == b"deep"
        env.exec(f"rm -rf {top}")

    def test_overwrite_replaces_content(self, env: Environment) -> None:
        name = _scratch()
        env.write_file(name, b"a much longer first version")
        env.write_file(name, b"short")
        assert env.read_file(name) == b"short"
        env.exec(f"rm -f {name}")

    def test_empty_file(self, env: Environment) -> None:
        name = _scratch()
        env.write_file(name, b"")
        assert env.read_file(name) == b""
        env.exec(f"rm -f {name}")

    def test_read_missing_file(self, env: Environment) -> None:
        with pytest.raises(SandboxFileNotFound):
            env.read_file(f"{_scratch()}/missing.txt")
        with pytest.raises(FileNotFoundError):
            env.read_file(f"{_scratch()}-missing")

    def test_read_directory(self, env: Environment) -> None:
        name = _scratch()
        env.exec(f"mkdir -p {name}").check()
        with pytest.raises(SandboxIsADirectory):
            env.read_file(name)
        env.exec(f"rm -rf {name}")

    def test_write_to_a_directory_is_refused(self, env: Environment) -> None:
        name = _scratch()
        env.exec(f"mkdir -p {name}").check()
        try:
            with pytest.raises(SandboxIsADirectory):
                env.write_file(name, b"x")
            assert env.exec(f"ls -A {name}").stdout == b"", "nothing may be written into the directory"
        finally:
            env.exec(f"rm -rf {name}")

    # --- files: what a file path through a session shell must keep -------------------

    @pytest.mark.parametrize("size", [1024, 200_000], ids=["small", "base64-sized"])
    def test_file_every_byte_value_and_nuls(self, env: Environment, size: int) -> None:
        """Every byte value, runs of NULs, a leading ``-`` and ``%``: through whatever path
        the backend picks (a printf format, base64, an archive), the bytes arrive as they are."""
        name = f"{_scratch()}.bin"
        pattern = b"-%\\'" + bytes(range(256)) + b"\x00" * 300 + b"\r\n"
        payload = (pattern * (size // len(pattern) + 1))[:size]
        try:
            env.write_file(name, payload)
            assert env.read_file(name) == payload
            assert env.exec(f"cat {name}").stdout == payload, "the sandbox must hold the very bytes"
        finally:
            env.exec(f"rm -f {name}")

    @pytest.mark.parametrize("size", [1_048_576, 1_048_577], ids=["1MiB", "1MiB+1"])
    def test_file_around_a_mebibyte(self, env: Environment, size: int) -> None:
        """1 MiB travels through a session (where the backend has one), one byte more does
        not: both must round-trip whole."""
        name = f"{_scratch()}.bin"
        payload = (os.urandom(4096) * (size // 4096 + 1))[:size]
        try:
            env.write_file(name, payload)
            assert env.exec(f"wc -c < {name}").stdout.strip() == str(size).encode()
            assert env.read_file(name) == payload
        finally:
            env.exec(f"rm -f {name}")

    def test_symlink_out_of_file_root_refused(self, env: Environment) -> None:
        """Links inside ``file_root`` that point out of it (a directory link, a file link)
        are refused for reads and writes, and nothing outside changes."""
        if not self.confines_symlinks:
            pytest.skip("the backend confines file paths lexically only (confines_symlinks = False)")
        previous = env.options.file_root
        root, outside = _scratch(), _scratch()
        env.exec(
            f"mkdir -p {root} {outside} && printf secret > {outside}/f && "
            f"ln -s ../{outside} {root}/dirlink && ln -s ../{outside}/f {root}/filelink"
        ).check()
        env.options.file_root = root
        try:
            for escape in (f"{root}/dirlink/f", f"{root}/filelink", f"{root}/dirlink/new"):
                with pytest.raises(SandboxPathError):
                    env.read_file(escape)
                with pytest.raises(SandboxPathError):
                    env.write_file(escape, b"nope")
            assert env.exec(f"cat {outside}/f; ls {outside}").stdout == b"secretf\n"
        finally:
            env.options.file_root = previous
            env.exec(f"rm -rf {root} {outside}")

    def test_file_calls_while_a_command_runs(self, env: Environment) -> None:
        """A write and a read while a command runs (in the session, where there is one):
        they must not wait for it or disturb it, and all three succeed. (The test talks to
        the command through files only: a backend may queue a second ``exec``.)"""
        name = _scratch()
        outcome: list[Any] = []
        command = f"touch {name}.started; while [ ! -e {name}.stop ]; do sleep 0.1; done; echo done"

        def run() -> None:
            try:
                outcome.append(env.exec(command, timeout=120))
            except BaseException as exc:
                outcome.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        try:
            deadline = time.monotonic() + 60
            while not _exists(env, f"{name}.started"):
                assert time.monotonic() < deadline and runner.is_alive(), f"the command never started: {outcome}"
                time.sleep(0.05)
            env.write_file(name, b"while busy")
            assert env.read_file(name) == b"while busy"
            assert runner.is_alive(), f"the command ended before it was told to: {outcome}"
        finally:
            env.write_file(f"{name}.stop", b"")
            runner.join(120)
            env.exec(f"rm -f {name} {name}.started {name}.stop")
        assert outcome and outcome[0].exit_code == 0 and outcome[0].stdout == b"done\n", outcome

    def test_replace_is_atomic(self, env: Environment) -> None:
        """A reader never sees a half-written, empty or missing file while ``write_file``
        replaces it again and again: a loop in the sandbox (in the background, so the
        writes may use the session) checks the file's size as fast as it can."""
        if not self.replaces_files_atomically:
            pytest.skip("the backend writes files in place (replaces_files_atomically = False)")
        name = _scratch()
        versions = (b"a" * 300_000, b"b" * 150_000)
        env.write_file(name, versions[0])
        watch = (
            f"while [ ! -e {name}.stop ]; do s=$(wc -c < {name} 2>/dev/null) || s=missing; "
            f'case $s in *300000|*150000) ;; *) echo "$s" >> {name}.bad;; esac; done; touch {name}.done'
        )
        env.exec(f"( {watch} ) >/dev/null 2>&1 &").check()
        try:
            for round_ in range(12):
                env.write_file(name, versions[round_ % 2])
        finally:
            env.write_file(f"{name}.stop", b"")
            deadline = time.monotonic() + 30
            while not _exists(env, f"{name}.done") and time.monotonic() < deadline:
                time.sleep(0.1)
        try:
            seen = env.read_file(f"{name}.bad") if _exists(env, f"{name}.bad") else b""
            assert _exists(env, f"{name}.done"), "the reader in the sandbox did not stop"
            assert seen == b"", f"a reader saw the file half replaced; sizes: {seen.decode()[:200]!r}"
        finally:
            env.exec(f"rm -f {name} {name}.stop {name}.done {name}.bad")

    # --- files: the sandbox user's rights ---------------------------------------------

    def test_read_unreadable_file_follows_the_users_rights(self, env: Environment) -> None:
        with _file_with_mode(env, b"secret", "000") as name:
            if _user_is_root(env):
                assert env.read_file(name) == b"secret", "root reads a mode-000 file; the backend must not deny it"
            else:
                _assert_denied(lambda: env.read_file(name), name)

    def test_write_read_only_file_follows_the_users_rights(self, env: Environment) -> None:
        with _file_with_mode(env, b"original", "444") as name:
            if _user_is_root(env):
                env.write_file(name, b"replaced")
                assert env.exec(f"cat {name}").stdout == b"replaced", "root writes a read-only file"
            else:
                _assert_denied(lambda: env.write_file(name, b"replaced"), name)
                assert env.exec(f"cat {name}").stdout == b"original", "a read-only file must not be replaced"

    def test_write_into_read_only_directory_follows_the_users_rights(self, env: Environment) -> None:
        top = _scratch()
        env.exec(f"mkdir -p {top} && chmod 555 {top}").check()
        try:
            if _user_is_root(env):
                env.write_file(f"{top}/new.txt", b"root may")
                assert env.exec(f"cat {top}/new.txt").stdout == b"root may", "root writes into a mode-555 directory"
            else:
                _assert_denied(lambda: env.write_file(f"{top}/new.txt", b"nope"), top)
                assert env.exec(f"ls -A {top}").stdout == b"", "nothing may be left in the directory"
        finally:
            env.exec(f"chmod 755 {top}; rm -rf {top}")

    def test_read_over_size_cap(self, env: Environment) -> None:
        name = _scratch()
        limit = env.options.max_file_bytes
        env.options.max_file_bytes = 1000
        try:
            env.exec(f"head -c 5000 /dev/zero > {name}").check()
            with pytest.raises(FileTooLarge):
                env.read_file(name)
            with pytest.raises(FileTooLarge):
                env.write_file(name, b"x" * 5000)
        finally:
            env.options.max_file_bytes = limit
            env.exec(f"rm -f {name}")

    def test_paths_outside_file_root_refused(self, env: Environment) -> None:
        previous = env.options.file_root
        root = _scratch()
        env.exec(f"mkdir -p {root}/inside").check()
        env.options.file_root = root
        try:
            env.write_file(f"{root}/inside/ok.txt", b"ok")
            assert env.read_file(f"{root}/inside/ok.txt") == b"ok"
            for escape in (f"{root}/../outside.txt", "/etc/passwd", f"{root}/inside/../../x"):
                with pytest.raises(SandboxPathError):
                    env.read_file(escape)
                with pytest.raises(SandboxPathError):
                    env.write_file(escape, b"nope")
            assert env.exec(f"test -e {root}/../outside.txt").exit_code != 0
        finally:
            env.options.file_root = previous
            env.exec(f"rm -rf {root}")

    # --- lifecycle and capabilities ---------------------------------------------------

    def test_options_are_base_options(self, env: Environment) -> None:
        assert isinstance(env.options, BaseOptions)
        assert isinstance(env.options, type(env).Options)

    def test_declared_capabilities_are_consistent(self, env: Environment) -> None:
        caps = capabilities_of(env)
        import inspect

        if Capability.FORCE_REMOVE in caps:
            assert "force_remove" in inspect.signature(env.cleanup).parameters
        if Capability.WAIT_FOR_CLEANUP in caps:
            assert callable(getattr(env, "wait_for_cleanup", None))
        for cap, method in (
            (Capability.REAP_ORPHANS, "reap_orphans"),
            (Capability.LIST_SANDBOXES, "list_sandboxes"),
            (Capability.REMOVE_SANDBOX, "remove_sandbox"),
        ):
            if cap in caps:
                assert callable(getattr(type(env), method, None)), f"declares {cap.value} but has no {method}"
        if Capability.STREAMING in caps:
            chunks: list[tuple[str, bytes]] = []
            result = env.exec("echo streamed", on_output=lambda s, c: chunks.append((s, c)))  # type: ignore[call-arg]
            assert b"".join(c for s, c in chunks if s == "stdout") == result.stdout == b"streamed\n"
        if Capability.PERSISTENT_SESSION in caps:
            name = _scratch()
            env.exec(f"mkdir -p /tmp/{name} && cd /tmp/{name} && export ENVLAYER_CONF_KEPT=yes").check()
            result = env.exec('pwd; printf %s "$ENVLAYER_CONF_KEPT"')
            assert result.stdout_text == f"/tmp/{name}\nyes"
            env.exec(f"cd / && rm -rf /tmp/{name}")
        if Capability.DIRECTORY_TRANSFER in caps:
            assert callable(getattr(env, "upload_dir", None)) and callable(getattr(env, "download_dir", None))

    def test_cleanup_is_idempotent_and_closes(self, env: Environment) -> None:
        env.cleanup()
        env.cleanup()
        assert env.closed
        with pytest.raises(EnvironmentClosed):
            env.exec("true")
        with pytest.raises(EnvironmentClosed):
            env.read_file("x")

    def test_context_manager_cleans_up(self, env: Environment) -> None:
        with env as entered:
            assert entered is env
            assert entered.exec("echo in").stdout == b"in\n"
        assert env.closed

    # --- the plugin contract: options read at call time, result fields, the dispatcher's calls ---

    def test_default_timeout_comes_from_options(self, env: Environment) -> None:
        """``exec`` without ``timeout`` uses ``options.timeout``, read at call time."""
        previous = env.options.timeout
        env.options.timeout = 1
        try:
            result = env.exec("echo started; sleep 8")
        finally:
            env.options.timeout = previous
        # 8 s would end by itself before any default timeout: timed_out shows options.timeout applied
        assert (result.timed_out, result.exit_code) == (True, 124), (
            f"exec without timeout= must use options.timeout=1; got {result!r}"
        )

    def test_result_records_the_timeout_that_applied(self, env: Environment) -> None:
        """``ExecResult.timeout`` is the limit that applied to the call (shown to users,
        e.g. "timed out after 1s"), whether or not the command hit it."""
        timed_out = env.exec("sleep 30", timeout=1)
        assert timed_out.timed_out
        assert timed_out.timeout == 1
        assert env.exec("true", timeout=25).timeout == 25

    def test_missing_cwd_is_exit_126_naming_it(self, env: Environment) -> None:
        """A ``cwd`` that does not exist runs nothing: exit code 126 and
        ``working directory does not exist: <cwd>`` on stderr, never a raw exception."""
        missing = f"/tmp/{_scratch()}-missing"
        try:
            result = env.exec("echo ran", cwd=missing)
        except Exception as exc:
            raise AssertionError(
                f"exec(cwd={missing!r}) raised {type(exc).__name__}: {exc}; "
                "it must return exit code 126 with the reason on stderr"
            ) from exc
        assert result.exit_code == 126
        assert result.stdout == b""
        assert missing in result.stderr_text

    def test_optional_parts_are_callable_through_the_dispatcher(
        self, env: Environment, tmp_path: os.PathLike[str]
    ) -> None:
        """Every declared capability backed by a method accepts every argument the
        dispatcher passes (otherwise envlayer drops it and falls back). For a backend that
        declares nothing, every optional part the kit finds (a method or parameter named
        for a capability) has such a signature, and works when called through the
        dispatcher the way envlayer does."""
        declared = declared_capabilities(env)
        if declared is not None:
            problems = {c.value: signature_problem(env, c) for c in sorted(declared) if signature_problem(env, c)}
            assert problems == {}
            return
        found = sorted(c for c in CALL_SHAPES if defines_method_for(env, c))
        unusable = {c.value: signature_problem(env, c) for c in found if signature_problem(env, c)}
        assert unusable == {}
        profile = f"conformance-{uuid.uuid4().hex[:8]}"
        spec = [(type(env), env.options)]
        if Capability.STREAMING in found:
            chunks: list[bytes] = []
            assert lifecycle.exec_streaming(env, "echo streamed", lambda s, c: chunks.append(c)).stdout == b"streamed\n"
            assert b"".join(chunks) == b"streamed\n"
        if Capability.DIRECTORY_TRANSFER in found:
            self._check_directory_transfer(env, str(tmp_path))
        if Capability.ARCHIVE_STREAM in found:
            self._check_archive_stream(env, str(tmp_path))
        for outcome in [
            *(lifecycle.list_sandboxes(spec, profile=profile) if Capability.LIST_SANDBOXES in found else []),
            *(
                lifecycle.reap_orphans(spec, profile=profile, max_age=1e9, dry_run=True)
                if Capability.REAP_ORPHANS in found
                else []
            ),
            *(
                lifecycle.remove_sandbox(spec, "no-such-task", profile=profile)
                if Capability.REMOVE_SANDBOX in found
                else []
            ),
        ]:
            assert (outcome.error, outcome.sandboxes) == (None, [])
        if Capability.FORCE_REMOVE in found:
            assert lifecycle.cleanup(env, force_remove=True).forced
        if Capability.WAIT_FOR_CLEANUP in found:
            lifecycle.cleanup(env)
            assert lifecycle.wait_for_cleanup(env, 60.0) is True

    @staticmethod
    def _check_archive_stream(env: Environment, local_root: str) -> None:
        """A tar streamed in lands under the directory; one streamed out holds the path
        under its last component; a missing path raises ``SandboxFileNotFound``."""
        import io
        import tarfile

        from envlayer.sandbox.tar_stream import tar_chunks

        source = os.path.join(local_root, "streamed")
        os.makedirs(os.path.join(source, "sub"))
        with open(os.path.join(source, "sub", "f.txt"), "wb") as fh:
            fh.write(b"payload\0")
        remote = f"/tmp/{_scratch()}"
        env.exec(f"mkdir -p {remote}").check()
        try:
            env.put_archive_stream(remote, tar_chunks(source, "in"))  # type: ignore[attr-defined]
            assert env.exec(f"cat {remote}/in/sub/f.txt").stdout == b"payload\0"
            archive = b"".join(env.get_archive_stream(f"{remote}/in"))  # type: ignore[attr-defined]
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                assert sorted(tar.getnames()) == ["in", "in/sub", "in/sub/f.txt"]
                member = tar.extractfile("in/sub/f.txt")
                assert member is not None and member.read() == b"payload\0"
            with pytest.raises(SandboxFileNotFound):
                b"".join(env.get_archive_stream(f"{remote}/missing"))  # type: ignore[attr-defined]
        finally:
            env.exec(f"rm -rf {remote}")

    @staticmethod
    def _check_directory_transfer(env: Environment, local_root: str) -> None:
        source = os.path.join(local_root, "up")
        os.makedirs(os.path.join(source, "sub"))
        with open(os.path.join(source, "sub", "f.txt"), "w") as fh:
            fh.write("payload")
        remote = f"/tmp/{_scratch()}"
        try:
            env.upload_dir(source, remote)  # type: ignore[attr-defined]
            assert env.exec(f"cat {remote}/sub/f.txt").stdout == b"payload"
            target = os.path.join(local_root, "down")
            env.download_dir(remote, target)  # type: ignore[attr-defined]
            with open(os.path.join(target, "sub", "f.txt")) as fh:
                assert fh.read() == "payload"
        finally:
            env.exec(f"rm -rf {remote}")
