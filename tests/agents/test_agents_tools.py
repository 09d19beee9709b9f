"""Tool calls end to end on the local backend (the Docker run is in
test_agents_docker.py): results, truncation, background jobs, structured errors,
renderings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envlayer.agents.tools import ToolConfig, ToolRegistry


@pytest.fixture
def tools(make_manager, local_settings, tmp_path: Path) -> ToolRegistry:  # type: ignore[no-untyped-def]
    return ToolRegistry(make_manager(local_settings), ToolConfig(output_chars=400, jobs_dir=str(tmp_path / "jobs")))


def etype(result: dict) -> str | None:  # type: ignore[type-arg]
    return result.get("error", {}).get("type")


def test_write_run_read(tools: ToolRegistry) -> None:
    assert tools.run_tool("write_file", {"path": "sub/run.sh", "content": "echo out; echo err >&2; exit 3\n"}, "t") == {
        "path": "sub/run.sh",
        "bytes_written": 31,
    }
    ran = tools.run_tool("terminal", {"command": "sh run.sh", "workdir": "sub"}, "t")
    assert ran["exit_code"] == 3 and ran["output"] == "out\nerr\n"

    read = tools.run_tool("read_file", {"path": "sub/run.sh"}, "t")
    assert read["content"] == "echo out; echo err >&2; exit 3\n" and read["total_lines"] == 1


def test_terminal_keeps_arrival_order_and_offers_separate_streams(tools: ToolRegistry) -> None:
    command = "echo one; sleep 0.05; echo two >&2; sleep 0.05; echo three; sleep 0.05; echo four >&2"
    merged = tools.run_tool("terminal", {"command": command}, "t")
    assert merged["output"] == "one\ntwo\nthree\nfour\n"
    apart = tools.run_tool("terminal", {"command": command, "separate_streams": True}, "t")
    assert apart["stdout"] == "one\nthree\n" and apart["stderr"] == "two\nfour\n" and "output" not in apart
    flood = tools.run_tool("terminal", {"command": "seq 1 100000 >&2; echo END"}, "t")
    assert flood["truncated"] and flood["output"].startswith("1\n2\n") and flood["output"].endswith("END\n")
    assert len(flood["output"]) < 600


def test_arguments_as_model_json_with_nulls(tools: ToolRegistry) -> None:
    result = tools.run_tool("terminal", '{"command": "echo hi", "timeout": null, "workdir": null}', "t")
    assert result["exit_code"] == 0 and result["output"] == "hi\n"


def test_output_keeps_head_and_tail_and_says_so(tools: ToolRegistry) -> None:
    result = tools.run_tool("terminal", {"command": "echo FIRST; seq 1 5000; echo LAST"}, "t")
    out = result["output"]
    assert result["truncated"] is True and result["exit_code"] == 0
    assert out.startswith("FIRST\n") and out.endswith("LAST\n")
    assert "characters omitted" in out and len(out) < 600


def test_read_file_pages_by_lines(tools: ToolRegistry) -> None:
    tools.run_tool("terminal", {"command": "seq 1 50 > fifty.txt"}, "t")
    page = tools.run_tool("read_file", {"path": "fifty.txt", "offset": 11, "limit": 5}, "t")
    assert page["content"] == "11\n12\n13\n14\n15\n"
    assert (page["start_line"], page["end_line"], page["total_lines"]) == (11, 15, 50)
    assert "offset=16" in page["more"]
    assert etype(tools.run_tool("read_file", {"path": "fifty.txt", "offset": 99}, "t")) == "bad_arguments"
    tools.run_tool("terminal", {"command": "seq 100000 100400 > long.txt"}, "t")
    cut = tools.run_tool("read_file", {"path": "long.txt"}, "t")  # 401 lines, over the 400-char budget
    assert cut["truncated"] and "limit" in cut["hint"] and cut["end_line"] == cut["total_lines"] == 401
    assert cut["content"].startswith("100000\n") and cut["content"].endswith("100400\n")


def test_timeout_is_a_structured_error_with_partial_output(tools: ToolRegistry) -> None:
    result = tools.run_tool("terminal", {"command": "echo started; sleep 30", "timeout": 1}, "t")
    assert etype(result) == "timeout" and result["exit_code"] == 124
    assert result["output"] == "started\n" and "background" in result["error"]["hint"]
    over = tools.run_tool("terminal", {"command": "true", "timeout": 10_000}, "t")
    assert etype(over) == "bad_arguments" and "background" in over["error"]["message"]


def test_background_job_status_output_and_kill(tools: ToolRegistry, tmp_path: Path, wait_until) -> None:  # type: ignore[no-untyped-def]
    started = tools.run_tool("terminal", {"command": "echo job says hi; exit 4", "background": True}, "t")
    assert started["status"] == "running" and started["log_file"].startswith(str(tmp_path / "jobs"))
    job = started["job_id"]
    final: dict = {}  # type: ignore[type-arg]

    def finished() -> bool:
        final.update(tools.run_tool("terminal_job", {"job_id": job}, "t"))
        return final["status"] != "running"

    assert wait_until(finished)
    assert final["status"] == "exited" and final["exit_code"] == 4 and final["output"] == "job says hi\n"

    flag = tmp_path / "still-running"
    long = tools.run_tool(
        "terminal", {"command": f"while true; do touch {flag}; sleep 0.1; done", "background": True}, "t"
    )
    assert tools.run_tool("terminal_job", {"job_id": long["job_id"]}, "t")["status"] == "running"
    killed = tools.run_tool("terminal_job", {"job_id": long["job_id"], "action": "kill"}, "t")
    assert killed["status"] == "killed"
    flag.unlink(missing_ok=True)
    assert not wait_until(flag.exists, timeout=1.0), "the killed job is still writing"


def test_job_errors(tools: ToolRegistry) -> None:
    assert etype(tools.run_tool("terminal_job", {"job_id": "../../etc"}, "t")) == "job_error"
    assert etype(tools.run_tool("terminal_job", {"job_id": "0123456789ab"}, "t")) == "job_error"


@pytest.mark.parametrize(
    "name, arguments, kind",
    [
        ("rm_rf", {}, "unknown_tool"),
        ("terminal", {}, "bad_arguments"),
        ("terminal", {"command": 42}, "bad_arguments"),
        ("terminal", {"command": "true", "cmd": "x"}, "bad_arguments"),
        ("terminal", "{not json", "bad_arguments"),
        ("terminal", "[1, 2]", "bad_arguments"),
        ("terminal_job", {"job_id": "abc", "action": "explode"}, "bad_arguments"),
        ("read_file", {"path": "missing.txt"}, "file_not_found"),
        ("read_file", {"path": "."}, "is_a_directory"),
    ],
)
def test_structured_errors(tools: ToolRegistry, name: str, arguments: object, kind: str) -> None:
    result = tools.run_tool(name, arguments, "t")  # type: ignore[arg-type]
    assert etype(result) == kind
    assert result["error"]["message"] and result["error"]["hint"]
    json.dumps(result)


def test_binary_file_and_path_outside_sandbox(tools: ToolRegistry, tmp_path: Path) -> None:
    tools.run_tool("terminal", {"command": "printf 'a\\000b' > blob"}, "t")
    assert etype(tools.run_tool("read_file", {"path": "blob"}, "t")) == "binary_file"
    root = tmp_path / "confined"
    root.mkdir()
    tools.manager.register_overrides("jailed", options={"cwd": str(root), "file_root": str(root)})
    assert "error" not in tools.run_tool("write_file", {"path": "inside.txt", "content": "ok"}, "jailed")
    for path in ("/etc/hostname", "../escape.txt"):
        result = tools.run_tool(
            "write_file" if "escape" in path else "read_file",
            {"path": path, "content": "x"} if "escape" in path else {"path": path},
            "jailed",
        )
        assert etype(result) == "path_outside_sandbox", result
    assert not (tmp_path / "escape.txt").exists()


def test_configuration_error_is_structured(make_manager, make_settings) -> None:  # type: ignore[no-untyped-def]
    tools = ToolRegistry(make_manager(make_settings(backend="no-such-backend")))
    result = tools.run_tool("terminal", {"command": "true"}, "t")
    assert etype(result) == "configuration" and "no-such-backend" in result["error"]["message"]


def test_renderers(tools: ToolRegistry) -> None:
    openai = tools.openai_tools()
    anthropic = tools.anthropic_tools()
    names = ["terminal", "terminal_job", "read_file", "write_file"]
    assert [t["function"]["name"] for t in openai] == names
    assert [t["name"] for t in anthropic] == names
    for o, a in zip(openai, anthropic, strict=True):
        assert o["type"] == "function" and set(o["function"]) == {"name", "description", "parameters"}
        assert set(a) == {"name", "description", "input_schema"}
        assert o["function"]["parameters"] == a["input_schema"]
        assert a["input_schema"]["type"] == "object" and a["input_schema"]["additionalProperties"] is False
    json.dumps(openai)
    json.dumps(anthropic)


def test_recovered_sandbox_is_stated_to_the_model(tools: ToolRegistry) -> None:
    """The notice an ExecResult.recovered turns into (the Docker and SSH suites show the
    backends set it after a real container removal and a real sshd restart)."""
    from envlayer.agents.tools.merged import MergedOutput
    from envlayer.result import ExecResult

    merged = MergedOutput(400)
    merged("stdout", b"ok\n")
    plain = tools._output(ExecResult(0, b"ok\n"), merged, separate=False)
    noted = tools._output(ExecResult(0, b"ok\n", recovered="container recreated"), merged, separate=False)
    assert "notice" not in plain
    assert "container recreated" in noted["notice"] and noted["output"] == "ok\n"


def test_default_jobs_dir_is_private_and_per_user(make_manager, local_settings, wait_until, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    tools = ToolRegistry(make_manager(local_settings), ToolConfig())
    made = tmp_path / "made-by-the-job"
    started = tools.run_tool("terminal", {"command": f"echo secret-ish; umask; touch {made}", "background": True}, "t")
    log_file = Path(started["log_file"])
    assert log_file.is_relative_to(Path(os.environ["XDG_CACHE_HOME"]) / "envlayer" / "jobs")
    assert wait_until(lambda: tools.run_tool("terminal_job", {"job_id": started["job_id"]}, "t")["status"] == "exited")
    status = tools.run_tool("terminal_job", {"job_id": started["job_id"]}, "t")
    assert status["log_file"] == str(log_file)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(log_file.parent.parent) == 0o700 and mode(log_file.parent) == 0o700
    assert {p.name: mode(p) for p in log_file.parent.iterdir()} == {
        "cmd.sh": 0o600,
        "pid": 0o600,
        "output.log": 0o600,
        "exit": 0o600,
    }
    # the job's own files keep the caller's umask, not envlayer's private one
    umask = os.umask(0)
    os.umask(umask)
    assert status["output"] == f"secret-ish\n{umask:04o}\n"
    assert mode(made) == 0o666 & ~umask


def test_terminal_says_what_persists_and_when_the_directory_moved(make_manager, make_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    for mode, state in (("session", "kept"), ("oneshot", "reset")):
        settings = make_settings(backend="local", backend_options={"cwd": str(work), "exec_mode": mode})
        tools = ToolRegistry(make_manager(settings), ToolConfig())
        first = tools.run_tool("terminal", {"command": "cd .. && export X=1"}, mode)
        assert first["shell_state"] == state and "notice" not in first
        second = tools.run_tool("terminal", {"command": "pwd; echo ${X:-none}"}, mode)
        expected = f"{work.parent}\n1\n" if mode == "session" else f"{work}\nnone\n"
        assert second["output"] == expected and second["shell_state"] == state
    work.rmdir()
    moved = tools.run_tool("terminal", {"command": "pwd"}, "oneshot")
    assert moved["exit_code"] == 0 and moved["output"] == f"{work.parent}\n"
    assert "no longer exists" in moved["notice"] and str(work) in moved["notice"]
    assert "shell_state" in tools.definitions[0].description


def test_cut_output_is_kept_in_a_file_the_model_can_read(make_manager, local_settings) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    tools = ToolRegistry(make_manager(local_settings), ToolConfig(output_chars=400))
    ran = tools.run_tool("terminal", {"command": "seq 1 20000; echo oops >&2; echo END"}, "t")
    assert ran["truncated"] and "5000\n" not in ran["output"]
    path = ran["output_file"]
    assert path.startswith(os.environ["XDG_CACHE_HOME"]) and path in ran["output_hint"]
    expected_bytes = sum(len(f"{i}\n") for i in range(1, 20001)) + len("oops\nEND\n")
    assert ran["output_bytes"] == expected_bytes
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    middle = tools.run_tool("read_file", {"path": path, "offset": 5000, "limit": 2}, "t")
    assert middle["content"] == "5000\n5001\n" and middle["total_lines"] == 20002
    # output that fits makes no file
    assert "output_file" not in tools.run_tool("terminal", {"command": "echo short"}, "t")
    # a spill cap keeps the head and tail of an even larger flood
    capped = ToolRegistry(make_manager(local_settings), ToolConfig(output_chars=400, spill_bytes=10_000))
    flood = capped.run_tool("terminal", {"command": "seq 1 100000"}, "t")
    kept = Path(flood["output_file"]).read_bytes()
    assert len(kept) < 10_200 and kept.startswith(b"1\n2\n") and kept.endswith(b"100000\n")
    assert "first and last" in flood["output_hint"]
