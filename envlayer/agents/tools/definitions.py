"""Tool definitions (name, description, JSON schema) and their OpenAI/Anthropic renderings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as an LLM sees it. ``parameters`` is a JSON schema of an object;
    ``output`` (optional) a JSON schema of the tool's successful result (an error result
    is ``{"error": {...}}`` instead, see :mod:`envlayer.agents.tools.tool_registry`)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] | None = None


def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def terminal(default_timeout: float, max_timeout: float, jobs_dir: str | None) -> ToolDefinition:
    """The ``terminal`` tool: run a shell command in the task's sandbox."""
    return ToolDefinition(
        "terminal",
        "Run a shell command (/bin/sh -c) in this task's sandbox and return its exit code and "
        "output (stdout and stderr merged in the order they were written, as with 2>&1; "
        "separate_streams=true returns them apart). Each result's shell_state says whether shell "
        "state carries over: 'kept' means cd, export and shell variables persist to your next command, as "
        "in a terminal; 'reset' means every command starts afresh in the working directory (chain steps "
        "with && in one command). A notice field tells you about anything unusual, e.g. a deleted "
        "working directory. Long output keeps its beginning and "
        "end and says how much was omitted; the whole output is then saved in the sandbox and "
        "output_file names it, so read the middle with read_file instead of re-running. "
        "A command that runs past its timeout is killed with "
        f"every process it started. For long-running work (servers, builds over {max_timeout:g} s) "
        "set background=true: the command starts detached and you get a job_id and the path of its "
        f"log file (under {jobs_dir or 'a private per-user directory'}); check it with the terminal_job tool.",
        obj(
            {
                "command": {"type": "string", "minLength": 1, "description": "The shell command to run."},
                "timeout": {
                    "type": "number",
                    "minimum": 1,
                    "description": f"Seconds before the command is killed "
                    f"(default {default_timeout:g}, at most {max_timeout:g}). "
                    "Ignored with background=true.",
                },
                "workdir": {
                    "type": "string",
                    "description": "Directory to run in (default: the sandbox's working directory).",
                },
                "background": {
                    "type": "boolean",
                    "description": "Start detached and return at once with a job_id (default false).",
                },
                "separate_streams": {
                    "type": "boolean",
                    "description": "Return stdout and stderr as separate fields instead of one merged "
                    "output (default false).",
                },
            },
            ["command"],
        ),
    )


def terminal_job() -> ToolDefinition:
    """The ``terminal_job`` tool: status, output or kill of a background job."""
    return ToolDefinition(
        "terminal_job",
        "Check a background job started with terminal(background=true): its status "
        "(running, exited with exit_code, killed, lost) and its output so far. action=kill stops "
        "the job and everything it started.",
        obj(
            {
                "job_id": {"type": "string", "minLength": 1, "description": "The job_id terminal returned."},
                "action": {"type": "string", "enum": ["status", "kill"], "description": "status (default) or kill."},
            },
            ["job_id"],
        ),
    )


def read_file(default_lines: int) -> ToolDefinition:
    """The ``read_file`` tool: read a text file, optionally a range of lines."""
    return ToolDefinition(
        "read_file",
        "Read a text file in this task's sandbox. Returns up to `limit` lines starting at line "
        f"`offset` (1-based; defaults 1 and {default_lines}), with total_lines so you can page "
        "through larger files.",
        obj(
            {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File path, absolute or relative to the working directory.",
                },
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return."},
            },
            ["path"],
        ),
    )


def write_file() -> ToolDefinition:
    """The ``write_file`` tool: create or replace a file."""
    return ToolDefinition(
        "write_file",
        "Create or replace a file in this task's sandbox with the given content (UTF-8). "
        "Missing parent directories are created.",
        obj(
            {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File path, absolute or relative to the working directory.",
                },
                "content": {"type": "string", "description": "The complete new content of the file."},
            },
            ["path", "content"],
        ),
    )


def to_openai(definitions: Iterable[ToolDefinition]) -> list[dict[str, Any]]:
    """Render for the OpenAI Chat Completions ``tools`` parameter."""
    return [
        {"type": "function", "function": {"name": d.name, "description": d.description, "parameters": d.parameters}}
        for d in definitions
    ]


def to_anthropic(definitions: Iterable[ToolDefinition]) -> list[dict[str, Any]]:
    """Render for the Anthropic Messages ``tools`` parameter."""
    return [{"name": d.name, "description": d.description, "input_schema": d.parameters} for d in definitions]
