"""`envlayer cp` as a stream on the local backend (issue 39), through the real CLI: a clear
error or a correct copy for every awkward destination, `-` as a tar on stdin/stdout, no
size cap and nothing half-written (Ctrl-C sent to the real process mid-copy), and the
bounded fallback of a backend that cannot stream (the toy plugin)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from tests.core.cli_run import ENVLAYER, interrupt_when, run

MB = 1_000_000
LOCAL = ("--backend", "local")


def hidden_temps(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.startswith(".envlayer-cp-")]


def copying_into(folder: Path) -> bool:
    """Whether a copy into ``folder`` is under way: its temporary file, or a file inside
    its temporary directory, exists."""
    for name in hidden_temps(folder):
        try:
            if not (folder / name).is_dir() or os.listdir(folder / name):
                return True
        except FileNotFoundError:
            continue
    return False


def test_a_destination_under_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    up = run("cp", *LOCAL, "f", f"t1:{tmp_path}/no/such/f", cwd=tmp_path)
    assert up.returncode == 1, up.stderr
    assert f"no such directory in the sandbox: '{tmp_path}/no/such'" in up.stderr and "mkdir -p" in up.stderr
    down = run("cp", *LOCAL, f"t1:{tmp_path}/f", "missing/dir/f", cwd=tmp_path)
    assert down.returncode == 1, down.stderr
    assert "no such directory on this machine: 'missing/dir'" in down.stderr and "mkdir -p" in down.stderr
    assert not (tmp_path / "no").exists() and not (tmp_path / "missing").exists()


def test_a_directory_onto_an_existing_file_is_refused_both_ways(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a").write_bytes(b"a")
    (tmp_path / "file").write_bytes(b"keep")
    up = run("cp", *LOCAL, "tree", f"t1:{tmp_path}/file", cwd=tmp_path)
    assert up.returncode == 1 and "is a file in the sandbox; a directory cannot be copied onto it" in up.stderr
    down = run("cp", *LOCAL, f"t1:{tmp_path}/tree", "file", cwd=tmp_path)
    assert down.returncode == 1 and "is a file on this machine; a directory cannot be copied onto it" in down.stderr
    assert (tmp_path / "file").read_bytes() == b"keep"
    assert hidden_temps(tmp_path) == []


def test_a_file_whose_name_is_not_utf8_is_copied_both_ways(tmp_path: Path) -> None:
    name = os.fsdecode(b"caf\xe9.txt")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / name).write_bytes(b"latin-1 name")
    (tmp_path / "sandbox").mkdir()
    up = run("cp", *LOCAL, f"src/{name}", f"t1:{tmp_path}/sandbox/", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert (tmp_path / "sandbox" / name).read_bytes() == b"latin-1 name"
    down = run("cp", *LOCAL, f"t1:{tmp_path}/sandbox", "back", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back" / name).read_bytes() == b"latin-1 name"


def test_a_write_the_sandbox_refuses_is_an_error_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(os.urandom(2 * MB))
    for target in ("/proc/nope/x", "/sys/x"):
        done = run("cp", *LOCAL, "--json", "f", f"t1:{target}", cwd=tmp_path)
        assert done.returncode == 1, (target, done.stdout, done.stderr)
        assert "/proc/nope" in done.stderr if target.startswith("/proc") else "'/sys" in done.stderr
        assert "internal error" not in done.stderr and done.stdout == ""


def test_dash_is_a_tar_on_stdout_and_on_stdin(tmp_path: Path) -> None:
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "a.bin").write_bytes(b"\x00\xffbinary")
    out = subprocess.run(
        [ENVLAYER, "cp", *LOCAL, f"t1:{tmp_path}/tree", "-"], capture_output=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        assert sorted(tar.getnames()) == ["tree", "tree/sub", "tree/sub/a.bin"]
    (tmp_path / "into").mkdir()
    into = subprocess.run(
        [ENVLAYER, "cp", *LOCAL, "-", f"t1:{tmp_path}/into"],
        input=out.stdout,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert into.returncode == 0, into.stderr
    assert (tmp_path / "into" / "tree" / "sub" / "a.bin").read_bytes() == b"\x00\xffbinary"
    not_dir = subprocess.run(
        [ENVLAYER, "cp", *LOCAL, "-", f"t1:{tmp_path}/nope"],
        input=out.stdout,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert not_dir.returncode == 1 and b"no such directory in the sandbox" in not_dir.stderr


def test_a_stream_has_no_file_size_cap(tmp_path: Path) -> None:
    data = os.urandom(3 * MB)
    (tmp_path / "big").write_bytes(data)
    (tmp_path / "sandbox").mkdir()
    capped = ("-o", "max_file_bytes=1000")
    up = run("cp", *LOCAL, *capped, "--json", "big", f"t1:{tmp_path}/sandbox/big", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert '"bytes": 3000000' in up.stdout and (tmp_path / "sandbox" / "big").read_bytes() == data
    down = run("cp", *LOCAL, *capped, f"t1:{tmp_path}/sandbox/big", "back", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back").read_bytes() == data


def test_ctrl_c_mid_copy_prints_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    with open(tmp_path / "big", "wb") as fh:
        fh.truncate(2_000 * MB)  # sparse: cheap to make, long to copy
    (tmp_path / "up").mkdir()
    (tmp_path / "down").mkdir()
    cases = [
        (["cp", *LOCAL, str(tmp_path / "big"), f"t1:{tmp_path}/up/big"], tmp_path / "up"),
        (["cp", *LOCAL, f"t1:{tmp_path}/big", str(tmp_path / "down" / "big")], tmp_path / "down"),
    ]
    for argv, folder in cases:
        done = interrupt_when(argv, lambda folder=folder: copying_into(folder))
        assert done.returncode == 130, done.stderr
        assert done.stderr.decode().splitlines() == [f"envlayer: cp interrupted; nothing was written to {argv[-1]}"], (
            "one line, no traceback"
        )
        assert os.listdir(folder) == [], "no partial file, no temporary copy"


def test_a_backend_that_cannot_stream_refuses_before_reading_past_its_cap(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(os.urandom(5000))
    done = run("cp", "--backend", "toy", "-o", "max_file_bytes=1000", "big", "t1:big", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "over max_file_bytes (1000) of backend 'toy', which cannot stream files" in done.stderr
    assert "-o max_file_bytes=5000" in done.stderr
    dash = run("cp", "--backend", "toy", "t1:big", "-", cwd=tmp_path)
    assert dash.returncode == 1 and "lacks archive_stream" in dash.stderr


def test_a_directory_merges_into_an_existing_one_both_ways(tmp_path: Path) -> None:
    for side in ("src", "sandbox", "back"):
        (tmp_path / side / "sub").mkdir(parents=True)
        (tmp_path / side / "sub" / f"only-in-{side}").write_bytes(side.encode())
    (tmp_path / "src" / "sub" / "shared").write_bytes(b"new")
    (tmp_path / "sandbox" / "sub" / "shared").write_bytes(b"old")
    assert run("cp", *LOCAL, "src", f"t1:{tmp_path}/sandbox", cwd=tmp_path).returncode == 0
    assert sorted(os.listdir(tmp_path / "sandbox" / "sub")) == ["only-in-sandbox", "only-in-src", "shared"]
    assert (tmp_path / "sandbox" / "sub" / "shared").read_bytes() == b"new"
    assert run("cp", *LOCAL, f"t1:{tmp_path}/sandbox", "back", cwd=tmp_path).returncode == 0
    assert sorted(os.listdir(tmp_path / "back" / "sub")) == [
        "only-in-back",
        "only-in-sandbox",
        "only-in-src",
        "shared",
    ]
    assert hidden_temps(tmp_path / "sandbox") == hidden_temps(tmp_path / "back") == []


def test_a_reader_that_goes_away_ends_a_tar_on_stdout_with_141(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(os.urandom(5 * MB))
    proc = subprocess.Popen(
        [ENVLAYER, "cp", *LOCAL, f"t1:{tmp_path}/big", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert len(proc.stdout.read(10)) == 10
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141, err
        assert b"error" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
