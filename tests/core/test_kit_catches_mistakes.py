"""The conformance kit run, as a plugin author runs it, on a backend with deliberate
mistakes: exactly one failing check per mistake, and each failure shows the values."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

BROKEN_BACKEND_TESTS = '''
import os, subprocess, time

import pytest
from envlayer import ExecResult
from envlayer.testing import EnvironmentConformance
from envlayer_toy import ToyEnvironment


class Careless(ToyEnvironment):
    """The toy backend with four mistakes a plugin author makes."""

    name = "careless"

    def exec(self, command, *, cwd=None, env=None, timeout=None, stdin=None):
        self._ensure_open()
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        proc = subprocess.Popen(  # mistake 2: a missing cwd raises a raw FileNotFoundError
            argv, cwd=os.path.join(self.root, cwd) if cwd else self.root,
            env={**os.environ, **(env or {})}, start_new_session=True,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(data, timeout=timeout)  # mistake 1: options.timeout ignored
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            return ExecResult(124, out, err, time.monotonic() - start, timed_out=True)  # mistake 3: no timeout=
        return self._finished(proc.returncode, out, err, time.monotonic() - start, timeout=None)  # mistake 3 again

    def wait_for_cleanup(self):  # mistake 4: the dispatcher passes a timeout
        return True

    @classmethod
    def reap_orphans(cls, profile, max_age):  # mistake 4 again: no options (nor dry_run)
        return []


class TestCareless(EnvironmentConformance):
    kills_escaped_processes = False
    replaces_files_atomically = False
    confines_symlinks = False

    @pytest.fixture
    def env(self):
        environment = Careless(Careless.Options(timeout=60))
        yield environment
        environment.cleanup()
'''

EXPECTED_FAILURES = {
    # check that fails -> what its failure output must show (the compared values)
    "test_default_timeout_comes_from_options": [
        "assert (False, 0) == (True, 124)",
        "exec without timeout= must use options.timeout=1; got ExecResult(exit_code=0",
    ],
    "test_result_records_the_timeout_that_applied": ["assert None == 1", "ExecResult(exit_code=124"],
    "test_missing_cwd_is_exit_126_naming_it": [
        "raised FileNotFoundError: [Errno 2] No such file or directory",
        "it must return exit code 126 with the reason on stderr",
    ],
    "test_optional_parts_are_callable_through_the_dispatcher": [
        "assert {'reap_orphan",
        "'reap_orphans': 'reap_orphans(profile, max_age) does not accept the '",
        "'wait_for_cleanup': \"wait_for_cleanup() does not accept the dispatcher's call \"",
        "'wait_for_cleanup(timeout)'",
    ],
}


def test_each_mistake_fails_one_check_showing_the_values(tmp_path: Path) -> None:
    (tmp_path / "test_careless.py").write_text(textwrap.dedent(BROKEN_BACKEND_TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVLAYER_", "PYTEST_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "test_careless.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    output = proc.stdout + proc.stderr
    failed = set(re.findall(r"^FAILED test_careless\.py::TestCareless::(\w+)", output, re.MULTILINE))
    assert failed == set(EXPECTED_FAILURES), output
    sections = re.split(r"^_+ TestCareless\.(\w+) _+$", output, flags=re.MULTILINE)
    by_test = dict(zip(sections[1::2], sections[2::2], strict=True))
    for test, shown in EXPECTED_FAILURES.items():
        for text in shown:
            assert text in by_test[test], f"{test} should show {text!r}:\n{by_test[test]}"


def test_the_testing_extra_brings_pytest() -> None:
    import importlib.metadata

    requires = importlib.metadata.requires("envlayer") or []
    assert any(r.startswith("pytest") and "extra == 'testing'" in r.replace('"', "'") for r in requires), requires
