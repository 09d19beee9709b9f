"""Smaller CLI defects of issue 39, each through the real `envlayer` script: a missing
`shell` is the user's error, not a bug in envlayer; `fork` on a backend without
persistence hints nothing that backend lacks; a typo in `[backends.NAME]` is an error
with a did-you-mean (and a doctor finding); `--json` says when output was not UTF-8;
`backends --options` is compact and narrows to a backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from envlayer.errors import InvalidArgument
from envlayer.local.backend import LocalEnvironment, LocalOptions


def test_a_shell_that_does_not_exist_is_a_user_error(workdir: Path) -> None:
    out = run("exec", "--no-broker", "-o", "shell=/bin/nonexist", "true", cwd=workdir)
    assert out.returncode == 125
    assert "the shell /bin/nonexist does not exist in the sandbox" in out.stderr
    assert "bug" not in out.stderr


def test_a_missing_shell_raises_invalid_argument(tmp_path: Path) -> None:
    env = LocalEnvironment(LocalOptions(cwd=str(tmp_path), shell="/bin/nonexist"), task_id="t")
    try:
        with pytest.raises(InvalidArgument, match="does not exist in the sandbox"):
            env.exec("true")
    finally:
        env.cleanup()


def test_fork_on_local_hints_nothing_local_lacks(workdir: Path) -> None:
    (workdir / "work").mkdir()
    out = run(
        "fork", "src", "n1", "--backend", "local", "-o", f"snapshot_dir={workdir / 'store'}",
        "-o", f"cwd={workdir / 'work'}", cwd=workdir,
    )  # fmt: skip
    assert out.returncode == 1
    assert "persist_across_processes" not in out.stderr  # local has no such option
    assert "keeps no sandbox after its process ends" in out.stderr and "env.fork()" in out.stderr


def test_a_misspelt_backend_table_is_an_error_with_a_did_you_mean(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('backend = "local"\n[backends.lcoal]\ntimeout = 5\n')
    out = run("exec", "--no-broker", "true", cwd=workdir)
    assert out.returncode == 125
    assert "[backends.lcoal]: unknown backend" in out.stderr and "did you mean [backends.local]?" in out.stderr
    doctor = run("doctor", cwd=workdir)
    assert doctor.returncode == 1 and "did you mean [backends.local]?" in doctor.stdout


def test_doctor_finds_a_misspelt_option_of_a_backend_not_selected(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('backend = "local"\n[backends.ssh]\nhots = "example.org"\n')
    doctor = run("doctor", "--json", cwd=workdir)
    (ssh,) = [entry for entry in json.loads(doctor.stdout) if entry["backend"] == "ssh"]
    assert "hots: unknown option" in ssh["error"]["message"] and ssh["error"]["hint"] == "did you mean 'host'?"
    assert doctor.returncode == 1  # a wrong configuration is broken, whichever backend it is for (was 0)


def test_json_gives_output_that_is_not_utf8_as_base64_and_says_so(workdir: Path) -> None:
    import base64

    out = run("exec", "--no-broker", "--json", r"printf 'ok\377\n'; printf 'caf\303\251' >&2", cwd=workdir)
    data = json.loads(out.stdout)
    assert data["stdout_encoding"] == "base64" and base64.b64decode(data["stdout"]) == b"ok\xff\n"
    assert data["stderr_encoding"] == "utf-8" and data["stderr"] == "café"
