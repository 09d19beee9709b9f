"""`envlayer cp` as a stream against the real Docker daemon (issue 39), through the real
CLI: writes the container does not keep (`/proc`, `/sys`) are errors, every awkward
destination is a clear error or a correct copy, `-` is a tar both ways, no file size cap
(tmpfs `/tmp` and the workspace), and Ctrl-C sent to the real process mid-copy leaves
nothing at the destination."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlayer.testing.secrets import ENVLAYER_SCRIPT
from tests.core.cli_run import interrupt_when

MB = 1_000_000


@pytest.fixture
def cli_env(profile: str, options: Callable[..., Any]) -> dict[str, str]:
    """The environment the ``cli`` fixture gives the CLI, for calls that need bytes on
    stdin/stdout, a working directory or a signal."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    return {**environ, "ENVLAYER_PROFILE": profile, "ENVLAYER_DOCKER_IMAGE": options().image}


def in_container(env: Any, command: str) -> str:
    done = env.exec(command)
    assert done.exit_code == 0, done.stderr
    return str(done.stdout.decode(errors="surrogateescape"))


def test_writes_the_container_does_not_keep_are_errors(tmp_path: Path, make_env: Any, cli: Any, profile: str) -> None:
    make_env(task="cp-proc").exec("true")
    (tmp_path / "f").write_bytes(os.urandom(2 * MB))
    for target, named in (("/proc/nope/x", "'/proc/nope'"), ("/sys/x", "'/sys'")):
        done = cli("cp", "--json", str(tmp_path / "f"), f"cp-proc:{target}", profile=profile)
        assert done.returncode == 1, (target, done.stdout, done.stderr)
        assert named in done.stderr and done.stdout == ""


def test_awkward_destinations_are_clear_errors(tmp_path: Path, make_env: Any, cli_env: dict[str, str]) -> None:
    env = make_env(task="cp-awkward")
    in_container(env, "mkdir -p /workspace/tree && echo a > /workspace/tree/a && echo keep > /workspace/file")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a").write_bytes(b"a")
    (tmp_path / "file").write_bytes(b"keep")
    cases = [
        (("file", "cp-awkward:/no/such/f"), "no such directory in the sandbox: '/no/such'"),
        (("cp-awkward:/workspace/file", "missing/f"), "no such directory on this machine: 'missing'"),
        (("tree", "cp-awkward:/workspace/file"), "is a file in the sandbox; a directory cannot be copied onto it"),
        (("cp-awkward:/workspace/tree", "file"), "is a file on this machine; a directory cannot be copied onto it"),
    ]
    for (source, destination), message in cases:
        done = subprocess.run(
            [ENVLAYER_SCRIPT, "cp", "--backend", "docker", source, destination],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=cli_env,
        )
        assert done.returncode == 1 and message in done.stderr, (source, destination, done.stderr)
    assert in_container(env, "cat /workspace/file; ls -a /workspace") == "keep\n.\n..\nfile\ntree\n"
    assert sorted(os.listdir(tmp_path)) == ["file", "tree"]


def test_a_file_whose_name_is_not_utf8_is_copied_both_ways(
    tmp_path: Path, make_env: Any, cli: Any, profile: str
) -> None:
    env = make_env(task="cp-latin1")
    in_container(env, "mkdir -p /workspace/in")
    name = os.fsdecode(b"caf\xe9.txt")
    (tmp_path / name).write_bytes(b"latin-1 name")
    up = cli("cp", str(tmp_path / name), "cp-latin1:/workspace/in/", profile=profile)
    assert up.returncode == 0, up.stderr
    assert in_container(env, "cat /workspace/in/$(printf 'caf\\351.txt')") == "latin-1 name"
    down = cli("cp", "cp-latin1:/workspace/in", str(tmp_path / "back"), profile=profile)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back" / name).read_bytes() == b"latin-1 name"


def test_dash_is_a_tar_on_stdout_and_on_stdin(tmp_path: Path, make_env: Any, cli_env: dict[str, str]) -> None:
    env = make_env(task="cp-dash")
    in_container(env, "mkdir -p /workspace/tree/sub /workspace/into && printf 'x\\0y' > /workspace/tree/sub/b")
    out = subprocess.run(
        [ENVLAYER_SCRIPT, "cp", "--backend", "docker", "cp-dash:/workspace/tree", "-"],
        capture_output=True,
        timeout=120,
        env=cli_env,
        cwd=tmp_path,  # the old CLI took - for a host path
    )
    assert out.returncode == 0, out.stderr
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        assert sorted(tar.getnames()) == ["tree", "tree/sub", "tree/sub/b"]
    into = subprocess.run(
        [ENVLAYER_SCRIPT, "cp", "--backend", "docker", "-", "cp-dash:/tmp"],
        input=out.stdout,
        capture_output=True,
        timeout=120,
        env=cli_env,
        cwd=tmp_path,  # the old CLI took - for a host path
    )
    assert into.returncode == 0, into.stderr
    assert in_container(env, "od -c /tmp/tree/sub/b | head -1").split() == ["0000000", "x", "\\0", "y"]


def test_a_stream_has_no_file_size_cap(tmp_path: Path, make_env: Any, cli: Any, profile: str) -> None:
    make_env(task="cp-big").exec("true")
    data = os.urandom(3 * MB)
    (tmp_path / "big").write_bytes(data)
    for where in ("/tmp/big", "/workspace/big"):  # a tmpfs, and the workspace volume
        up = cli("cp", "-o", "max_file_bytes=1000", str(tmp_path / "big"), f"cp-big:{where}", profile=profile)
        assert up.returncode == 0, up.stderr
        back = tmp_path / "back"
        down = cli("cp", "-o", "max_file_bytes=1000", f"cp-big:{where}", str(back), profile=profile)
        assert down.returncode == 0, down.stderr
        assert back.read_bytes() == data
        back.unlink()


def test_ctrl_c_mid_copy_prints_one_line_and_leaves_nothing(
    tmp_path: Path, make_env: Any, cli_env: dict[str, str]
) -> None:
    env = make_env(task="cp-intr")
    in_container(env, "mkdir -p /workspace/up && truncate -s 2000000000 /workspace/big")
    with open(tmp_path / "big", "wb") as fh:
        fh.truncate(2_000 * MB)  # sparse: cheap to make, long to copy
    (tmp_path / "down").mkdir()

    def temp_in_container() -> bool:
        return ".envlayer-cp-" in in_container(env, "ls -a /workspace/up")

    def temp_file_here() -> bool:
        temps = [n for n in os.listdir(tmp_path / "down") if n.startswith(".envlayer-cp-")]
        return any(os.path.isdir(tmp_path / "down" / t) and os.listdir(tmp_path / "down" / t) for t in temps)

    cases: list[tuple[list[str], Callable[[], bool]]] = [
        (["cp", "--backend", "docker", str(tmp_path / "big"), "cp-intr:/workspace/up/big"], temp_in_container),
        (["cp", "--backend", "docker", "cp-intr:/workspace/big", str(tmp_path / "down" / "big")], temp_file_here),
    ]
    for argv, ready in cases:
        done = interrupt_when(argv, ready, env=cli_env)
        assert done.returncode == 130, done.stderr
        line = f"envlayer: cp interrupted; nothing was written to {argv[-1]}"
        assert done.stderr.decode().splitlines() == [line], "one line, no traceback"
    assert in_container(env, "ls -a /workspace/up").split() == [".", ".."]
    assert os.listdir(tmp_path / "down") == []


def test_the_hints_run_as_written_and_name_the_real_cause(
    tmp_path: Path, make_env: Any, cli_env: dict[str, str]
) -> None:
    """A missing directory's hint names the backend and profile, so running it as written
    makes the directory in the container (it once named neither: run as written it made
    the directory on this machine, and the copy failed again); a read-only target and
    stdin that is not a tar get their own hint, not "free space"."""
    import shlex

    env = make_env(task="cp-hints")
    env.exec("true")
    (tmp_path / "f").write_bytes(b"data")

    def cp(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        argv = [ENVLAYER_SCRIPT, "cp", "--backend", "docker", *args]
        return subprocess.run(argv, capture_output=True, timeout=120, cwd=tmp_path, env=cli_env, input=stdin)

    missing = cp("f", "cp-hints:/tmp/made-by-hint/f")
    assert missing.returncode == 1
    hint = missing.stderr.decode().split("create it first: ", 1)[1].splitlines()[0]
    assert "--backend docker" in hint and f"--profile {cli_env['ENVLAYER_PROFILE']}" in hint
    made = subprocess.run(shlex.split(hint.replace("envlayer", ENVLAYER_SCRIPT, 1)), env=cli_env, timeout=120)
    assert made.returncode == 0 and not os.path.exists("/tmp/made-by-hint")
    assert cp("f", "cp-hints:/tmp/made-by-hint/f").returncode == 0
    assert in_container(env, "cat /tmp/made-by-hint/f") == "data"

    read_only = cp("f", "cp-hints:/sys/x")
    assert read_only.returncode == 1 and b"free space" not in read_only.stderr
    not_tar = cp("-", "cp-hints:/tmp", stdin=b"notatar\n")
    assert not_tar.returncode == 1 and b"not a whole tar archive" in not_tar.stderr, not_tar.stderr
