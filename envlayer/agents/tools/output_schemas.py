"""JSON schemas of the tools' successful results (an error result is
``{"error": {"type", "message", "hint"}, ...}`` instead and has no schema here).

Open schemas: every field a tool always returns is ``required``; fields it adds only
sometimes (``notice``, ``truncated``, ``more``...) are listed but optional, and further
fields may appear in later versions (``additionalProperties`` is not false).
"""

from __future__ import annotations

from typing import Any

_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_NUM = {"type": "number"}


def _out(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


ENTRY = _out(
    {
        "path": _STR,
        "type": {"type": "string", "enum": ["file", "directory", "symlink", "other"]},
        "size": _INT,
        "mtime": {"type": "integer", "description": "Seconds since the epoch."},
        "mode": {"type": "string", "description": "Permission bits in octal, e.g. 644."},
    },
    ["path", "type", "size", "mtime", "mode"],
)
"""One file system entry (see :class:`envlayer.agents.tools.file_ops.Entry`)."""

SANDBOX = _out(
    {
        "name": _STR,
        "task": _STR,
        "backend": _STR,
        "id": _STR,
        "status": _STR,
        "created": _STR,
        "in_use": {"type": "boolean", "description": "This process holds it open now."},
    },
    ["name", "task", "backend", "status", "in_use"],
)

OUTPUTS: dict[str, dict[str, Any]] = {
    "terminal": _out(
        {
            "exit_code": _INT,
            "output": _STR,
            "stdout": _STR,
            "stderr": _STR,
            "duration": _NUM,
            "shell_state": {"type": "string", "enum": ["kept", "reset"]},
            "truncated": _BOOL,
            "output_file": _STR,
            "notice": _STR,
            "job_id": _STR,
            "status": _STR,
            "log_file": _STR,
            "hint": _STR,
        },
        [],
    ),
    "terminal_job": _out(
        {"job_id": _STR, "status": _STR, "log_file": _STR, "output": _STR, "exit_code": _INT, "truncated": _BOOL},
        ["job_id", "status", "log_file", "output"],
    ),
    "read_file": _out(
        {
            "path": _STR,
            "content": _STR,
            "start_line": _INT,
            "end_line": _INT,
            "total_lines": _INT,
            "more": _STR,
            "truncated": _BOOL,
            "hint": _STR,
        },
        ["path", "content", "start_line", "end_line", "total_lines"],
    ),
    "write_file": _out({"path": _STR, "bytes_written": _INT}, ["path", "bytes_written"]),
    "list_files": _out(
        {"path": _STR, "entries": {"type": "array", "items": ENTRY}, "truncated": _BOOL, "hint": _STR},
        ["path", "entries"],
    ),
    "file_info": ENTRY,
    "delete_file": _out({"deleted": ENTRY}, ["deleted"]),
    "move_file": _out({"source": _STR, "moved": ENTRY}, ["source", "moved"]),
    "make_dir": ENTRY,
    "upload_files": _out(
        {"directory": _STR, "files_written": _INT, "bytes_written": _INT},
        ["directory", "files_written", "bytes_written"],
    ),
    "download_files": _out(
        {
            "directory": _STR,
            "files": {
                "type": "array",
                "items": _out(
                    {
                        "path": _STR,
                        "content": _STR,
                        "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
                        "size": _INT,
                    },
                    ["path", "content", "encoding", "size"],
                ),
            },
            "skipped": {"type": "array", "items": _out({"path": _STR, "reason": _STR}, ["path", "reason"])},
            "truncated": _BOOL,
        },
        ["directory", "files", "skipped"],
    ),
    "create_sandbox": _out({"name": _STR, "task": _STR, "backend": _STR}, ["name", "task", "backend"]),
    "list_sandboxes": _out({"sandboxes": {"type": "array", "items": SANDBOX}, "notice": _STR}, ["sandboxes"]),
    "remove_sandbox": _out(
        {"name": _STR, "removed": {"type": "array", "items": _STR}, "notice": _STR}, ["name", "removed"]
    ),
    "snapshot": _out(
        {"id": _STR, "name": _STR, "backend": _STR, "source": _STR, "created": _STR},
        ["id", "name", "backend", "source"],
    ),
    "fork": _out({"sandboxes": {"type": "array", "items": _STR}}, ["sandboxes"]),
}
"""The result schema of each tool, by name."""
