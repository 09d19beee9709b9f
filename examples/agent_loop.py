"""A scripted agent loop (no LLM): the tool calls a model would make, end to end.

The backend comes from configuration, so the same script runs anywhere:

    uv run python examples/agent_loop.py                            # local, no setup
    ENVLAYER_BACKEND=docker ENVLAYER_DOCKER_IMAGE=envlayer-test:busybox uv run python examples/agent_loop.py

It registers the envlayer tools (printing them in the OpenAI format, as an agent
framework would send them), then runs: write a script, run it, read its output, start
a background job and check on it until it ends, and hit a timeout. Each call and its
result is printed as JSON. Exit status 0 when every step gave the expected kind of
result, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from envlayer.agents.tools import ToolConfig, ToolRegistry

TASK = "agent-loop-example"
WORK = "/tmp/envlayer-agent-demo"

SCRIPT = """\
#!/bin/sh
# count the words of each line on stdin
while read -r line; do
  set -- $line
  echo "$# words: $line"
done
"""

Check = Callable[[dict[str, Any]], bool]


def call(tools: ToolRegistry, name: str, arguments: dict[str, Any], expect: Check) -> dict[str, Any]:
    """One tool call as the agent framework would make it (arguments as JSON text)."""
    print(f"\n>>> {name} {json.dumps(arguments)}")
    result = tools.run_tool(name, json.dumps(arguments), task_id=TASK)
    print(f"<<< {json.dumps(result, indent=2)}")
    if not expect(result):
        raise SystemExit(f"unexpected result from {name}")
    return result


def main() -> int:
    tools = ToolRegistry(config=ToolConfig(output_chars=4000, default_timeout=60))
    settings = tools.manager.settings
    print(f"backend: {settings.backend} (from {settings.source_of('backend')}), profile: {settings.profile}")
    print("tools:", json.dumps([t["function"]["name"] for t in tools.openai_tools()]))
    ok = lambda r: "error" not in r  # noqa: E731
    try:
        call(tools, "terminal", {"command": f"mkdir -p {WORK}"}, lambda r: r.get("exit_code") == 0)
        call(tools, "write_file", {"path": f"{WORK}/count.sh", "content": SCRIPT}, ok)
        call(
            tools,
            "terminal",
            {"command": "printf 'hello world\\nthree little words\\n' | sh count.sh > counts.txt", "workdir": WORK},
            lambda r: r.get("exit_code") == 0,
        )
        call(tools, "read_file", {"path": f"{WORK}/counts.txt"}, lambda r: "3 words" in r.get("content", ""))
        job = call(
            tools,
            "terminal",
            {"command": "for i in 1 2 3; do echo step $i; sleep 1; done; echo done", "background": True},
            lambda r: "job_id" in r,
        )
        status: dict[str, Any] = {"status": "running"}
        for _ in range(30):
            status = call(tools, "terminal_job", {"job_id": job["job_id"]}, ok)
            if status["status"] != "running":
                break
            time.sleep(1)  # the agent does something else meanwhile
        if status.get("exit_code") != 0 or "done" not in status.get("output", ""):
            raise SystemExit("the background job did not finish as expected")
        call(
            tools,
            "terminal",
            {"command": "echo before; sleep 30; echo never", "timeout": 2},
            lambda r: r.get("error", {}).get("type") == "timeout" and "before" in r.get("output", ""),
        )
        call(
            tools,
            "read_file",
            {"path": "/definitely/not/here"},
            lambda r: r.get("error", {}).get("type") == "file_not_found",
        )
        job_dir = job["log_file"].rsplit("/", 1)[0]
        call(tools, "terminal", {"command": f"rm -rf {WORK} {job_dir}"}, lambda r: r.get("exit_code") == 0)
    finally:
        # force_remove: leave nothing behind. Without it a persist-mode Docker container
        # stays running for the next process that works on this task.
        tools.manager.release(TASK, force_remove=True)
        tools.manager.close()
    print("\nall steps gave the expected results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
