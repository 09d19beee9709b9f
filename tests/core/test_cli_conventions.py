"""CLI conventions a newcomer expects, run through the real `envlayer` script: the rest of
the line is the command, `--version`, typed `-o`, backend messages on stderr, one `--json`
shape, help with examples and exit codes, shell completion, config errors naming their
source, and secrets passed without appearing on a command line."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_run import ENVLAYER, run

import envlayer
from envlayer.cli.progress import progress
from envlayer.config import load_settings
from envlayer.errors import BackendNotFound
from envlayer.factory import open_environment

# --- the command line ----------------------------------------------------------------------


def test_exec_takes_the_rest_of_the_line_as_the_command(workdir: Path) -> None:
    out = run("exec", "printf", "%s|", "-la", "--json-not-an-option", cwd=workdir)
    assert (out.returncode, out.stdout) == (0, "-la|--json-not-an-option|"), out.stderr
    out = run("exec", "--task", "t", "--", "printf", "%s|", "--", cwd=workdir)
    assert out.stdout == "--|", "only the first -- is exec's"


def test_exec_without_a_command_is_a_clear_error(workdir: Path) -> None:
    out = run("exec", "--task", "t1", cwd=workdir)
    assert out.returncode == 125
    assert "no command given" in out.stderr and "hint:" in out.stderr


def test_version_is_the_package_version() -> None:
    out = run("--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"envlayer {envlayer.__version__}")


def test_o_values_are_read_as_the_options_type(workdir: Path) -> None:
    (workdir / "2024").mkdir()
    out = run("exec", "-o", "cwd=2024", "pwd", cwd=workdir)
    assert out.stdout == f"{workdir}/2024\n", "a str option keeps the text, not the JSON number"
    out = run("exec", "-o", "max_output_bytes=1e3", "true", cwd=workdir)
    assert out.returncode == 125
    assert "-o: max_output_bytes: expected an integer, got a string '1e3'" in out.stderr
    out = run("config", "--json", "-o", "timeout=7", "-o", "inherit_env=false", cwd=workdir)
    options = json.loads(out.stdout)["options"]
    assert options["timeout"] == {"value": 7.0, "source": "-o"}
    assert options["inherit_env"] == {"value": False, "source": "-o"}


def test_backend_messages_reach_stderr_when_streaming(workdir: Path) -> None:
    out = run("exec", "--cwd", str(workdir / "missing"), "true", cwd=workdir)
    assert out.returncode == 126 and "does not exist" in out.stderr
    out = run("exec", "envlayer-no-such-command-x", "arg", cwd=workdir)
    assert out.returncode == 127 and "envlayer-no-such-command-x" in out.stderr


def test_streaming_does_not_claim_truncation_when_every_byte_was_printed(workdir: Path) -> None:
    out = run("exec", "-o", "max_output_bytes=10", "head -c 5000 /dev/zero | tr '\\0' x", cwd=workdir)
    assert out.stdout == "x" * 5000
    assert "truncated" not in out.stderr


def test_help_of_every_command_has_examples_and_exit_codes() -> None:
    for cmd in ("backends", "exec", "ls", "reap", "rm", "doctor", "config", "completion"):
        out = run(cmd, "--help")
        assert out.returncode == 0 and "examples:" in out.stdout and "exit codes:" in out.stdout, cmd


def test_bash_completion_completes_commands_options_and_backends(workdir: Path) -> None:
    script = run("completion", "bash").stdout

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _envlayer; echo "${{COMPREPLY[@]}}"'
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()

    assert complete("envlayer", "ex") == ["exec"]
    assert "--env-file" in complete("envlayer", "exec", "--env")
    assert complete("envlayer", "ls", "--backend", "lo") == ["local"]
    assert "zsh" in complete("envlayer", "completion", "")
    assert "bashcompinit" in run("completion", "zsh").stdout


# --- one --json shape ----------------------------------------------------------------------

EXEC_KEYS = {
    "exit_code",
    "timed_out",
    "timeout",
    "duration",
    "stdout",
    "stderr",
    "stdout_encoding",
    "stderr_encoding",
    "stdout_truncation",
    "stderr_truncation",
    "recovered",
    "notice",
    "notes",
    "error",
}


def test_json_shapes_agree_across_commands(workdir: Path) -> None:
    ok = json.loads(run("exec", "--json", "echo hi", cwd=workdir).stdout)
    assert set(ok) == EXEC_KEYS and ok["error"] is None and ok["recovered"] == ""
    failed = run("exec", "--json", "--backend", "nosuch", "true", cwd=workdir)
    data = json.loads(failed.stdout)
    assert failed.returncode == 125 and set(data) == EXEC_KEYS
    assert data["error"]["type"] == "BackendNotFound" and data["error"]["hint"]
    for entry in json.loads(run("backends", "--json", cwd=workdir).stdout):
        assert ("error" in entry and entry["error"] is None) or set(entry["error"]) == {"type", "message", "hint"}
    (doctor,) = json.loads(run("doctor", "--backend", "local", "--json", cwd=workdir).stdout)
    assert set(doctor) == {"backend", "ok", "selected", "error"}
    (listed,) = json.loads(run("ls", "--backend", "local", "--json", cwd=workdir).stdout)
    assert set(listed) == {"backend", "supported", "note", "sandboxes", "plugin_failure", "unavailable", "error"}


# --- configuration errors name their source ------------------------------------------------


def test_unknown_backend_in_a_file_names_the_file_and_key(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('backend = "nosuch"\n')
    for args in (["exec", "true"], ["config"], ["doctor"]):
        out = run(*args, cwd=workdir)
        assert out.returncode in (1, 125)
        assert f"{workdir}/envlayer.toml: backend: unknown backend 'nosuch'" in out.stderr + out.stdout, args
    with pytest.raises(BackendNotFound, match=r"envlayer.toml: backend: unknown backend 'nosuch'"):
        open_environment(settings=load_settings(cwd=workdir, env={}))


def test_unknown_backend_in_the_environment_names_the_variable(workdir: Path) -> None:
    out = run("exec", "true", cwd=workdir, env={"ENVLAYER_BACKEND": "nosuch"})
    assert out.returncode == 125 and "$ENVLAYER_BACKEND: unknown backend 'nosuch'" in out.stderr
    with pytest.raises(BackendNotFound, match=r"^\$ENVLAYER_BACKEND: unknown backend"):
        open_environment(settings=load_settings(cwd=workdir, env={"ENVLAYER_BACKEND": "nosuch"}))
    out = run("exec", "--backend", "nosuch", "true", cwd=workdir, env={"ENVLAYER_BACKEND": "local"})
    assert "ENVLAYER_BACKEND" not in out.stderr, "a flag is not blamed on the variable"


# --- secrets -------------------------------------------------------------------------------


def test_e_name_takes_the_value_from_the_environment(workdir: Path) -> None:
    out = run("exec", "-e", "EL_TOKEN", "-e", "PLAIN=1", 'echo "$EL_TOKEN $PLAIN"', cwd=workdir, env={"EL_TOKEN": "s3"})
    assert out.stdout == "s3 1\n"
    out = run("exec", "-e", "EL_UNSET_VAR", "true", cwd=workdir)
    assert out.returncode == 125 and "EL_UNSET_VAR is not set" in out.stderr
    out = run("exec", "-e", "1BAD=x", "true", cwd=workdir)
    assert out.returncode == 125 and "variable name" in out.stderr


def test_env_file(workdir: Path) -> None:
    (workdir / "vars.env").write_text("# comment\n\nA=1\nB=two words = kept\nFROM_ENV\n")
    out = run(
        "exec",
        "--env-file",
        "vars.env",
        "-e",
        "A=override",
        'echo "$A|$B|$FROM_ENV"',
        cwd=workdir,
        env={"FROM_ENV": "f"},
    )
    assert out.stdout == "override|two words = kept|f\n"
    (workdir / "bad.env").write_text("OK=1\nnot a name=hunter2\n")
    out = run("exec", "--env-file", "bad.env", "true", cwd=workdir)
    assert out.returncode == 125 and "bad.env, line 2" in out.stderr and "hunter2" not in out.stderr
    out = run("exec", "--env-file", "missing.env", "true", cwd=workdir)
    assert out.returncode == 125 and "missing.env: cannot read" in out.stderr


def test_config_masks_env_values_and_secret_options(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('[backends.local.env]\nAPI_TOKEN = "tok-123"\n')
    out = run("config", "--json", cwd=workdir)
    assert "tok-123" not in out.stdout
    assert json.loads(out.stdout)["options"]["env"]["value"] == {"API_TOKEN": "***"}
    out = run("config", "--backend", "ssh", cwd=workdir, env={"ENVLAYER_SSH_PASSWORD": "pw-456"})
    if out.returncode == 0:  # the ssh plugin is installed in the dev environment
        assert "pw-456" not in out.stdout and 'password = "***"' in out.stdout


def test_a_malformed_env_table_does_not_echo_other_values(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('[backends.local.env]\nAPI_TOKEN = "tok-789"\nBAD = 3\n')
    out = run("exec", "true", cwd=workdir)
    assert out.returncode == 125 and "'BAD' is an integer" in out.stderr
    assert "tok-789" not in out.stderr


# --- progress ------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_only_and_erases_itself() -> None:
    tty = _Terminal()
    with progress("pulling", stream=tty, delay=0.05):
        import time

        time.sleep(0.3)
    assert "envlayer: pulling (0s)" in tty.getvalue() and tty.getvalue().endswith("\r\033[K")
    pipe = io.StringIO()
    with progress("pulling", stream=pipe, delay=0):
        pass
    assert pipe.getvalue() == ""
    quick = _Terminal()
    with progress("quick", stream=quick, delay=5):
        pass
    assert quick.getvalue() == "", "work shorter than the delay prints nothing"


def test_no_progress_when_stderr_is_not_a_terminal(workdir: Path) -> None:
    out = run("exec", "sleep 1.5; echo done", cwd=workdir)
    assert out.stdout == "done\n" and out.stderr == ""


def test_script_is_the_installed_one() -> None:
    assert os.path.basename(ENVLAYER) == "envlayer"
