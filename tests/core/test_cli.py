"""The `envlayer` command, run as a real subprocess through its installed script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import ENVLAYER, own_brokers, run


def test_exec_streams_and_returns_the_exit_code(workdir: Path) -> None:
    out = run("exec", "--", "echo out; echo err >&2; exit 7", cwd=workdir)
    assert (out.returncode, out.stdout, out.stderr) == (7, "out\n", "err\n")


def test_exec_argv_form_is_not_shell_interpreted(workdir: Path) -> None:
    out = run("exec", "--", "echo", "$HOME", "a b", cwd=workdir)
    assert out.stdout == "$HOME a b\n"


def test_exec_timeout_exits_124_and_says_so(workdir: Path) -> None:
    out = run("exec", "--timeout", "1", "--", "echo started; sleep 20", cwd=workdir)
    assert out.returncode == 124
    assert out.stdout == "started\n"
    assert "timed out after 1.0s" in out.stderr


def test_exec_stdin_env_cwd(workdir: Path) -> None:
    (workdir / "sub").mkdir()
    out = run(
        "exec",
        "-i",
        "-e",
        "GREETING=hi",
        "--cwd",
        "sub",
        "--",
        'cat; echo "$GREETING"; pwd',
        stdin="piped\n",
        cwd=workdir,
    )
    assert out.stdout == f"piped\nhi\n{workdir}/sub\n"


def test_exec_json(workdir: Path) -> None:
    out = run("exec", "--json", "--", "printf abc; exit 3", cwd=workdir)
    data = json.loads(out.stdout)
    assert out.returncode == 3
    assert (data["exit_code"], data["stdout"], data["timed_out"], data["stdout_truncation"]) == (3, "abc", False, None)


def test_exec_on_the_toy_plugin_selected_by_flag_and_by_env(workdir: Path) -> None:
    assert "envlayer-toy-" in run("exec", "--backend", "toy", "--", "pwd", cwd=workdir).stdout
    assert "envlayer-toy-" in run("exec", "--", "pwd", cwd=workdir, env={"ENVLAYER_BACKEND": "toy"}).stdout


def test_exec_unknown_backend_exits_125_listing_installed(workdir: Path) -> None:
    out = run("exec", "--backend", "nimbus", "--", "true", cwd=workdir)
    assert out.returncode == 125
    assert "unknown backend 'nimbus'" in out.stderr and "toy" in out.stderr
    assert "install the package that provides it" in out.stderr


@pytest.mark.parametrize("broker", ["1", "0"])
def test_exec_as_another_user_on_local_exits_125_before_running(workdir: Path, broker: str) -> None:
    out = run("exec", "-u", "nobody", "--", "touch", "ran", cwd=workdir, env={"ENVLAYER_BROKER": broker})
    assert out.returncode == 125
    assert "exec_as_user" in out.stderr and "cannot run a command as 'nobody'" in out.stderr
    assert "hint:" in out.stderr
    assert not (workdir / "ran").exists()


def test_exec_malformed_user_exits_125_naming_it(workdir: Path) -> None:
    out = run("exec", "--user", "a b", "--", "true", cwd=workdir)
    assert out.returncode == 125 and "user" in out.stderr and "'a b'" in out.stderr


def test_exec_bad_config_names_file_and_key(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('[backends.local]\ntimeout = "x"\n')
    out = run("exec", "--", "true", cwd=workdir)
    assert out.returncode == 125
    assert f"{workdir}/envlayer.toml: timeout: expected a number" in out.stderr


def test_backends_json_lists_package_version_and_capabilities(workdir: Path) -> None:
    data = {b["name"]: b for b in json.loads(run("backends", "--json", cwd=workdir).stdout)}
    assert data["local"]["distribution"] == "envlayer" and data["local"]["capabilities"] == [
        "archive_stream",
        "cancel",
        "persistent_session",
        "snapshot",
        "streaming",
        "unset_env",
    ]
    assert data["toy"]["distribution"] == "envlayer-toy" and data["toy"]["declared"] is False
    assert data["toy"]["capabilities"] == []


def test_backends_options_documents_every_option(workdir: Path) -> None:
    out = run("backends", "--options", cwd=workdir)
    assert out.returncode == 0
    local = out.stdout.split("[backends.local]")[1].split("\n\n")[0]
    assert "inherit_env" in local and "timeout" in out.stdout
    assert "Inherit" not in out.stdout and "seconds" not in out.stdout  # compact: no descriptions
    narrowed = run("backends", "--options", "local", cwd=workdir)
    assert narrowed.returncode == 0 and "[backends.toy]" not in narrowed.stdout
    assert "inherit_env (bool, default true)" in narrowed.stdout and len(narrowed.stdout) < len(out.stdout)
    typo = run("backends", "--options", "lcoal", cwd=workdir)
    assert typo.returncode == 1 and "did you mean 'local'?" in typo.stderr


def test_reap_ls_rm_on_backends_without_the_capability(workdir: Path) -> None:
    for args in (["reap", "--dry-run"], ["ls"]):
        out = run(*args, "--backend", "toy", "--json", cwd=workdir)
        assert out.returncode == 0, out.stderr
        (outcome,) = json.loads(out.stdout)
        assert outcome["supported"] is False and outcome["sandboxes"] == []
    out = run("rm", "some-task", "--backend", "toy", "--json", cwd=workdir)
    assert out.returncode == 1  # the task was not removed: rm says so
    unsupported, not_removed = json.loads(out.stdout)
    assert unsupported["supported"] is False and unsupported["sandboxes"] == []
    assert "no backend here can remove sandboxes" in not_removed["error"]["message"]


def test_doctor_reports_selected_backend(workdir: Path) -> None:
    out = run("doctor", "--backend", "toy", "--json", cwd=workdir)
    (entry,) = json.loads(out.stdout)
    assert out.returncode == 0 and entry == {"backend": "toy", "ok": True, "error": None, "selected": True}
    out = run("doctor", cwd=workdir, env={"ENVLAYER_PROFILE": "bad name"})
    assert out.returncode == 1 and "invalid profile name" in out.stdout


def test_config_shows_sources(workdir: Path) -> None:
    (workdir / "envlayer.toml").write_text('profile = "proj"\n')
    out = run("config", "--json", cwd=workdir, env={"ENVLAYER_LOCAL_TIMEOUT": "5"})
    data = json.loads(out.stdout)
    assert data["settings"]["profile"] == {"value": "proj", "source": str(workdir / "envlayer.toml")}
    assert data["options"]["timeout"] == {"value": 5.0, "source": "$ENVLAYER_LOCAL_TIMEOUT"}


def test_help_on_every_command() -> None:
    for cmd in ("backends", "exec", "ls", "reap", "rm", "doctor", "config"):
        out = run(cmd, "--help")
        assert out.returncode == 0 and "usage: envlayer" in out.stdout


def test_exec_whose_reader_goes_away_exits_141_quietly(workdir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    marker = f"reader-gone-{os.getpid()}-{id(workdir)}"
    proc = subprocess.Popen(
        [ENVLAYER, "exec", "--", "yes", marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(len(marker) + 1) == f"{marker}\n".encode()
    proc.stdout.close()  # as `| head -1` does
    assert proc.wait(timeout=30) == 141
    assert proc.stderr.read() == b""
    survivors = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert survivors == "", "the command's tree must be killed"


def test_exec_help_states_the_default_timeout() -> None:
    out = run("exec", "--help")
    help_text = " ".join(out.stdout.split())
    assert "default: the backend's timeout option, 180 s" in help_text, out.stdout


@pytest.mark.parametrize("mode", ["session", "oneshot"])
@pytest.mark.parametrize("broker", ["1", "0"])
def test_exec_in_a_configured_cwd_that_does_not_exist_fails_like_cwd(workdir: Path, mode: str, broker: str) -> None:
    missing = workdir / "nope" / "deeper"
    with own_brokers(workdir, ENVLAYER_BROKER=broker) as env:
        out = run("exec", "-o", f"cwd={missing}", "-o", f"exec_mode={mode}", "pwd", cwd=workdir, env=env)
    assert (out.returncode, out.stdout) == (126, ""), out.stderr
    assert f"working directory does not exist: {missing}" in out.stderr


def test_exec_notice_of_a_deleted_directory_is_on_stderr_and_in_json(workdir: Path) -> None:
    notice = f"working directory {workdir}/gone no longer exists; the command ran in {workdir}"
    with own_brokers(workdir) as env:
        assert run("exec", "--task", "t", "mkdir gone && cd gone", cwd=workdir, env=env).returncode == 0
        (workdir / "gone").rmdir()
        out = run("exec", "--task", "t", "pwd", cwd=workdir, env=env)
        assert (out.returncode, out.stdout) == (0, f"{workdir}\n"), out.stderr
        assert f"envlayer: note: {notice}" in out.stderr
        assert run("exec", "--task", "t", "mkdir gone && cd gone", cwd=workdir, env=env).returncode == 0
        (workdir / "gone").rmdir()
        data = json.loads(run("exec", "--json", "--task", "t", "pwd", cwd=workdir, env=env).stdout)
        assert data["notice"].startswith(notice) and data["stdout"] == f"{workdir}\n"
        assert json.loads(run("exec", "--json", "--task", "t", "pwd", cwd=workdir, env=env).stdout)["notice"] == ""


def test_exec_with_a_bad_setting_in_the_environment_prints_its_error_once(workdir: Path) -> None:
    with own_brokers(workdir, ENVLAYER_ORPHAN_REAPER="maybe") as env:
        out = run("exec", "touch", "ran", cwd=workdir, env=env)
    assert out.returncode == 125
    assert out.stderr == (
        "envlayer: error: $ENVLAYER_ORPHAN_REAPER: orphan_reaper: expected true or false, got a string 'maybe'\n"
        "  hint: set orphan_reaper to true or false\n"
    )
    assert not (workdir / "ran").exists()


def test_building_the_parser_leaves_the_bench_modules_unimported() -> None:
    """Every in-process command builds the whole parser; registering ``bench`` must not
    import the bench itself (85 modules, about 40 ms of CPU on each CLI start here)."""
    code = (
        "import sys\nfrom envlayer.cli import build_parser\nbuild_parser()\n"
        "print(sorted(m for m in sys.modules if m.startswith('envlayer.bench.')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
