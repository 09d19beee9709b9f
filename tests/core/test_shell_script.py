"""The persistent-shell protocol's text and framing (envlayer.execution.shell_script), pure functions."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from envlayer.execution.shell_script import (
    MarkerScanner,
    ack_of,
    call_script,
    marker_of,
    new_seed,
    parse_trailer,
    printf_format,
    script_call,
)

SEPARATOR = "envlayer-test-separator-7d1c"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_marker_scanner_any_split(step: int) -> None:
    marker = b"__ELabcdef__"
    stream = b"out_put__EL" + marker + b"3 42 12345.67 /tmp/a b" + marker + b"late"
    scanner = MarkerScanner(marker, trailer=True)
    out = b""
    for i in range(0, len(stream), step):
        out += scanner.feed(stream[i : i + step])
    assert scanner.done
    assert out == b"out_put__EL"
    assert scanner.after == b"late"
    trailer = parse_trailer(scanner.trailer)
    assert (trailer.exit_code, trailer.pid, trailer.pwd, trailer.uptime_cs) == (3, 42, "/tmp/a b", 1234567)
    assert not trailer.shell_exiting


def test_bytes_behind_the_end_are_kept_not_dropped() -> None:
    scanner = MarkerScanner(b"__ELxyz__", trailer=False)
    assert scanner.feed(b"out__ELxyz__bg1") == b"out"
    assert scanner.feed(b"bg2") == b""
    assert scanner.after == b"bg1bg2"


def test_exit_trailer_and_unknown_clock() -> None:
    assert parse_trailer(b"7 9 exit /").shell_exiting
    assert parse_trailer(b"0 9 - /").uptime_cs is None
    with pytest.raises(ValueError):
        parse_trailer(b"garbage")


def test_stream_end_flushes_a_held_back_marker_prefix() -> None:
    scanner = MarkerScanner(b"__ELxyz__", trailer=False)
    assert scanner.feed(b"data__EL") == b"data"
    assert scanner.flush() == b"__EL"


def test_marker_text_is_never_in_the_script() -> None:
    seed = new_seed()
    script = call_script("echo hi", seed=seed, exec_id="abc", env={"SECRET": "s3cr'et"}, cwd="/x y")
    assert marker_of(seed) not in script and str(seed).encode() in script


def test_a_scripts_acknowledgement_is_never_in_its_text_and_ends_it() -> None:
    seed = new_seed()
    text = script_call("__el_take /tmp/f", seed=seed, exec_id="abc", raw_input=5)
    assert ack_of(seed) not in text and marker_of(seed) not in text
    assert text.endswith(b"fi\n"), "nothing may follow the command that takes the raw input"
    assert not ack_of(seed).startswith(marker_of(seed)[:1]), "a trailer byte would be held back as its start"


@pytest.mark.parametrize(
    "keywords", [{}, {"cwd": "/x y", "env": {"A": "1"}, "unset": ["B"]}], ids=["in-shell", "subshell"]
)
def test_a_commands_raw_stdin_is_taken_by_the_one_command_that_ends_the_text(keywords: dict[str, Any]) -> None:
    seed = new_seed()
    text = call_script(
        "cat", seed=seed, exec_id="abc", stdin_path="/s/in-abc", stdin_raw=5000, prelude="touch lease", **keywords
    )
    assert ack_of(seed) not in text and marker_of(seed) not in text
    lines = text.decode().split("\n")
    assert lines[:2] == [f"__el_pre {seed} abc", "touch lease"]
    assert lines[2].startswith("__el_n=5000; if ( set +x; umask 077; __el_take /s/in-abc")
    assert text.endswith(b"else __el_took $? || __el_end /s/in-abc; fi\n"), "nothing may follow the take"
    assert b">| /s/in-abc" not in text, "the script itself writes nothing into the file"


def test_a_lost_input_trailer_says_the_shell_ended() -> None:
    trailer = parse_trailer(b"99 42 lost /tmp")
    assert (trailer.exit_code, trailer.input_lost, trailer.shell_exiting) == (99, True, False)
    assert not parse_trailer(b"7 9 exit /").input_lost


def test_per_call_env_and_cwd_run_in_a_quoted_subshell() -> None:
    text = call_script("echo hi", seed=1, exec_id="abc", env={"SECRET": "s3cr'et"}, cwd="/x y").decode()
    assert "export SECRET='s3cr'\"'\"'et'" in text and "cd -- '/x y'" in text
    assert "( cd -- '/x y'" in text and "__el_c='echo hi'; " in text


def test_argv_is_quoted_word_by_word() -> None:
    text = call_script(["printf", "%s", "$HOME; x"], seed=1, exec_id="e").decode()
    assert "__el_c='" in text and "'\"'\"'$HOME; x'\"'\"'" in text


def test_interactive_start_exports_removes_the_file_and_enters_the_directory(tmp_path) -> None:
    import subprocess

    from envlayer.execution.shell_script import export_lines, interactive_shell_script

    env_file, workdir = tmp_path / "vars 'x'", tmp_path / "work dir"
    workdir.mkdir()
    env_file.write_text(export_lines({"V": "a 'b' $c"}))
    shown = 'printf "%s|%s|" "$V" "$PWD"; test -e "$1" || echo gone'
    script = interactive_shell_script("sh", str(env_file), str(workdir))
    assert script.endswith("\nexec sh -i")
    script = script.replace("exec sh -i", shown)  # the same start, then show what the shell would get
    done = subprocess.run(["sh", "-c", script, "sh", str(env_file)], capture_output=True, text=True, timeout=30)
    assert done.stdout == f"a 'b' $c|{workdir}|gone\n"


def test_interactive_start_in_a_missing_directory_exits_126(tmp_path) -> None:
    import subprocess

    from envlayer.execution.shell_script import interactive_shell_script

    env_file = tmp_path / "vars"
    env_file.write_text("")
    script = interactive_shell_script("sh", str(env_file), str(tmp_path / "missing"))
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 126 and "working directory does not exist" in done.stderr
    assert not env_file.exists()


@pytest.mark.parametrize("shell", [s for s in ("dash", "bash", "busybox") if shutil.which(s)])
def test_printf_format_prints_exactly_its_bytes_also_after_a_leading_dash(shell: str) -> None:
    payloads = [b"-", b"--- a/f\n", b"-v", b"--", bytes(range(256))] + [b"-" + os.urandom(12) for _ in range(40)]
    script = "".join(f"printf {printf_format(p)}; printf '\\n%s\\n' {SEPARATOR}\n" for p in payloads)
    argv = [shell, "sh", "-c", script] if shell == "busybox" else [shell, "-c", script]
    out = subprocess.run(argv, capture_output=True, check=True).stdout
    assert out.split(b"\n" + SEPARATOR.encode() + b"\n")[:-1] == payloads
