"""``envlayer-mcp`` over stdio on the local backend, driven by the ``mcp`` SDK's own client
(``stdio_client`` + ``ClientSession``): every tool with its schemas, a cancelled call
killing the command's process tree, refused backends and options, bad arguments, and
nothing left running after the server exits."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.integrations.mcp_harness import (
    alive,
    error_of,
    settle,
    stdio_session,
    structured,
    unique_profile,
    wait_until,
    write_config,
)

ALL = [
    "terminal",
    "terminal_job",
    "read_file",
    "write_file",
    "list_files",
    "file_info",
    "delete_file",
    "move_file",
    "make_dir",
    "upload_files",
    "download_files",
    "create_sandbox",
    "list_sandboxes",
    "remove_sandbox",
    "snapshot",
    "fork",
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path


def local_config(home: Path, extra: str = "") -> str:
    return write_config(
        home,
        f'backend = "local"\nprofile = "{unique_profile()}"\n'
        f'[backends.local]\ncwd = "{home}/work"\nsnapshot_dir = "{home}/snaps"\n{extra}',
    )


def run(test: Any) -> None:
    anyio.run(test)


def test_the_listing_has_every_tool_with_input_and_output_schemas(home: Path) -> None:
    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert list(tools) == ALL
            for name, tool in tools.items():
                assert tool.input_schema["type"] == "object" and tool.output_schema is not None, name
                in_sandbox = name not in ("create_sandbox", "list_sandboxes", "remove_sandbox")
                assert ("sandbox" in tool.input_schema["properties"]) == in_sandbox, name

    run(go)


def test_terminal_runs_with_timeout_workdir_and_background_jobs(home: Path) -> None:
    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            out = structured(await s.call_tool("terminal", {"command": "pwd; echo err >&2; exit 3"}))
            assert (out["exit_code"], out["output"]) == (3, f"{home}/work\nerr\n")
            (home / "work" / "sub").mkdir()
            out = structured(await s.call_tool("terminal", {"command": "pwd", "workdir": f"{home}/work/sub"}))
            assert out["output"] == f"{home}/work/sub\n"
            timed = await s.call_tool("terminal", {"command": "sleep 30", "timeout": 1})
            assert error_of(timed)["type"] == "timeout" and timed.structured_content["exit_code"] == 124
            job = structured(await s.call_tool("terminal", {"command": "echo started; sleep 30", "background": True}))
            status = structured(await s.call_tool("terminal_job", {"job_id": job["job_id"]}))
            assert status["status"] == "running"
            killed = structured(await s.call_tool("terminal_job", {"job_id": job["job_id"], "action": "kill"}))
            assert killed["status"] == "killed"

    run(go)


def test_file_tools_read_write_list_stat_move_delete(home: Path) -> None:
    work = f"{home}/work"

    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            call = s.call_tool
            assert structured(await call("make_dir", {"path": f"{work}/a/b"}))["type"] == "directory"
            assert (
                structured(await call("write_file", {"path": f"{work}/a/f.txt", "content": "one\ntwo\n"}))[
                    "bytes_written"
                ]
                == 8
            )
            read = structured(await call("read_file", {"path": f"{work}/a/f.txt", "offset": 2}))
            assert (read["content"], read["total_lines"]) == ("two\n", 2)
            listed = structured(await call("list_files", {"path": f"{work}/a"}))
            assert [(e["path"], e["type"]) for e in listed["entries"]] == [
                (f"{work}/a/b", "directory"),
                (f"{work}/a/f.txt", "file"),
            ]
            info = structured(await call("file_info", {"path": f"{work}/a/f.txt"}))
            assert (info["type"], info["size"]) == ("file", 8)
            moved = structured(await call("move_file", {"source": f"{work}/a/f.txt", "destination": f"{work}/c/g.txt"}))
            assert moved["moved"]["path"] == f"{work}/c/g.txt" and (home / "work/c/g.txt").read_text() == "one\ntwo\n"
            (home / "work/c/h.txt").write_text("x")
            clash = await call("move_file", {"source": f"{work}/c/h.txt", "destination": f"{work}/c/g.txt"})
            assert error_of(clash)["type"] == "file_error" and "overwrite" in error_of(clash)["hint"]
            assert (home / "work/c/g.txt").read_text() == "one\ntwo\n"  # nothing lost
            assert error_of(await call("delete_file", {"path": f"{work}/c"}))["type"] == "is_a_directory"
            assert structured(await call("delete_file", {"path": f"{work}/c", "recursive": True}))["deleted"]["type"]
            assert not (home / "work/c").exists()
            assert error_of(await call("file_info", {"path": f"{work}/c"}))["type"] == "file_not_found"

    run(go)


def test_a_directory_travels_as_a_list_of_files_both_ways(home: Path) -> None:
    blob = bytes(range(256))

    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            files = [
                {"path": "src/main.py", "content": "print('hi')\n"},
                {"path": "data/blob.bin", "content": base64.b64encode(blob).decode(), "encoding": "base64"},
            ]
            up = structured(await s.call_tool("upload_files", {"directory": f"{home}/work/proj", "files": files}))
            assert (up["files_written"], up["bytes_written"]) == (2, 12 + 256)
            assert (home / "work/proj/data/blob.bin").read_bytes() == blob
            down = structured(await s.call_tool("download_files", {"directory": f"{home}/work/proj"}))
            assert [(f["path"], f["encoding"]) for f in down["files"]] == [
                ("data/blob.bin", "base64"),
                ("src/main.py", "utf-8"),
            ]
            assert base64.b64decode(down["files"][0]["content"]) == blob and down["skipped"] == []
            cut = structured(await s.call_tool("download_files", {"directory": f"{home}/work/proj", "max_bytes": 100}))
            assert [f["path"] for f in cut["files"]] == ["src/main.py"] and cut["truncated"] is True
            assert [f["path"] for f in cut["skipped"]] == ["data/blob.bin"]
            escape = await s.call_tool(
                "upload_files", {"directory": f"{home}/work", "files": [{"path": "../out.txt", "content": "x"}]}
            )
            assert error_of(escape)["type"] == "bad_arguments" and not (home / "out.txt").exists()

    run(go)


def test_sandboxes_are_listed_forked_snapshotted_and_removed(home: Path) -> None:
    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            (home / "work" / "state.txt").write_text("prepared")
            await s.call_tool("terminal", {"command": "true", "sandbox": "main"})
            snap = structured(await s.call_tool("snapshot", {"name": "prepared", "sandbox": "main"}))
            assert snap["source"] == "mcp-main"
            forked = structured(await s.call_tool("fork", {"new_sandboxes": ["try-1"], "sandbox": "main"}))
            assert forked["sandboxes"] == ["try-1"]
            out = structured(await s.call_tool("terminal", {"command": "cat state.txt; pwd", "sandbox": "try-1"}))
            assert out["output"].startswith("prepared") and f"{home}/work" not in out["output"]
            listed = structured(await s.call_tool("list_sandboxes", {}))
            assert [(r["name"], r["in_use"]) for r in listed["sandboxes"]] == [("main", True), ("try-1", True)]
            assert structured(await s.call_tool("remove_sandbox", {"name": "try-1"}))["removed"]
            listed = structured(await s.call_tool("list_sandboxes", {}))
            assert [r["name"] for r in listed["sandboxes"]] == ["main"]
            gone = await s.call_tool("remove_sandbox", {"name": "try-1"})
            assert error_of(gone)["type"] == "bad_arguments" and "list_sandboxes" in error_of(gone)["hint"]
            from_snap = structured(
                await s.call_tool("fork", {"new_sandboxes": ["try-2"], "snapshot": "prepared", "sandbox": "main"})
            )
            assert from_snap["sandboxes"] == ["try-2"]
        assert list((home / "snaps" / "forks").iterdir()) == []  # the forks' working copies went with the server

    run(go)


def test_a_cancelled_call_kills_the_commands_process_tree(home: Path) -> None:
    pids = home / "work" / f"pids-{uuid.uuid4().hex[:6]}"

    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            command = (
                f"sleep 300 & echo $! >> {pids}; sh -c 'sleep 301 & echo $! >> {pids}; wait' & echo $! >> {pids}; wait"
            )
            with pytest.raises(MCPError):  # the client's timeout cancels the request (notifications/cancelled)
                await s.call_tool("terminal", {"command": command, "timeout": 600}, read_timeout_seconds=2)
            await settle(lambda: not any(alive(int(p)) for p in pids.read_text().split()), "the command's tree is gone")
            out = structured(await s.call_tool("terminal", {"command": "echo still usable"}))
            assert out["output"] == "still usable\n"

    run(go)
    assert len(pids.read_text().split()) == 3


def test_a_backend_or_option_the_config_does_not_allow_is_refused(home: Path) -> None:
    async def go() -> None:
        config = local_config(home, "[mcp]\nallowed_options = { timeout = [30, 60] }\n")
        async with stdio_session(home, config) as s:
            refused = error_of(await s.call_tool("create_sandbox", {"name": "x", "backend": "docker"}))
            assert refused["type"] == "not_allowed" and "local" in refused["hint"]
            refused = error_of(await s.call_tool("create_sandbox", {"name": "x", "options": {"cwd": "/"}}))
            assert refused["type"] == "not_allowed" and "timeout" in refused["hint"]
            refused = error_of(await s.call_tool("create_sandbox", {"name": "x", "options": {"timeout": 5}}))
            assert refused["type"] == "not_allowed" and "30" in refused["hint"]
            assert structured(await s.call_tool("list_sandboxes", {}))["sandboxes"] == []  # nothing was created
            made = structured(await s.call_tool("create_sandbox", {"name": "x", "options": {"timeout": 60}}))
            assert made["backend"] == "local"

    run(go)


def test_bad_arguments_are_tool_errors_with_a_hint(home: Path) -> None:
    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            bad = error_of(await s.call_tool("terminal", {"command": 5}))
            assert bad["type"] == "bad_arguments" and "must be a string" in bad["message"] and bad["hint"]
            bad = error_of(await s.call_tool("terminal", {"command": "true", "sandbox": "../etc"}))
            assert bad["type"] == "bad_arguments" and "sandbox" in bad["message"]
            bad = error_of(await s.call_tool("read_fle", {"path": "x"}))
            assert bad["type"] == "unknown_tool" and "read_file" in bad["hint"]
            result = await s.call_tool("terminal", {"comand": "true"})
            assert result.is_error and result.content[0].text.startswith("bad_arguments: ")

    run(go)


def test_an_unknown_mcp_key_stops_the_server_with_the_file_and_key(home: Path, tmp_path: Path) -> None:
    import subprocess

    from tests.integrations.mcp_harness import SCRIPT, server_env

    config = local_config(home, "[mcp]\nalowed_backends = []\n")
    done = subprocess.run(
        [SCRIPT, "--config", config], env=server_env(home), cwd=home, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "mcp.alowed_backends" in done.stderr and "allowed_backends" in done.stderr


def test_nothing_is_left_running_after_the_server_exits(home: Path) -> None:
    pids = home / "work" / "job-pids"
    logs: list[Path] = []

    async def go() -> None:
        async with stdio_session(home, local_config(home)) as s:
            job = structured(
                await s.call_tool("terminal", {"command": f"echo $$ > {pids}; sleep 300", "background": True})
            )
            logs.append(Path(job["log_file"]))
            structured(await s.call_tool("terminal", {"command": "echo $$ >> " + str(pids), "sandbox": "other"}))

    run(go)
    recorded = [int(p) for p in pids.read_text().split()]
    assert len(recorded) == 2
    wait_until(lambda: not any(alive(p) for p in recorded), "the server's shells and jobs are gone")
    assert not logs[0].parent.exists()  # the job's files (command, log) went with it
    assert "stopped 1 background job(s) at exit" in (home / "server.stderr").read_text()


def test_a_backend_without_snapshot_offers_no_snapshot_or_fork_and_says_so(home: Path) -> None:
    async def go() -> None:
        config = write_config(home, f'backend = "toy"\nprofile = "{unique_profile()}"\n')
        async with stdio_session(home, config) as s:
            names = [t.name for t in (await s.list_tools()).tools]
            assert names == [n for n in ALL if n not in ("snapshot", "fork")]
            assert structured(await s.call_tool("terminal", {"command": "echo toy"}))["output"] == "toy\n"
            assert error_of(await s.call_tool("snapshot", {}))["type"] == "unknown_tool"

    run(go)
    assert "no snapshot capability: not offering snapshot, fork" in (home / "server.stderr").read_text()
