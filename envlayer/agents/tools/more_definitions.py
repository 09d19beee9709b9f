"""Definitions of the tools beyond the terminal and read/write: file management,
transfer of a directory as a list of files, and the sandboxes themselves (list, remove,
snapshot, fork). The registry offers them when asked (``ToolRegistry(tools=...)``)."""

from __future__ import annotations

from envlayer.agents.tools.definitions import ToolDefinition, obj

_PATH = {"type": "string", "minLength": 1, "description": "Path, absolute or relative to the working directory."}
_NAME = {"type": "string", "minLength": 1, "description": "A sandbox name (letters, digits, . _ -)."}


def list_files(max_entries: int) -> ToolDefinition:
    return ToolDefinition(
        "list_files",
        "List a directory in this task's sandbox: each entry's path, type (file, directory, symlink, other), "
        f"size, mtime and mode, sorted by path, at most {max_entries} entries (truncated=true says more exist). "
        "depth > 1 lists subdirectories too.",
        obj(
            {
                "path": {**_PATH, "description": "Directory to list (default: the working directory)."},
                "depth": {"type": "integer", "minimum": 1, "description": "Levels to descend (default 1, at most 10)."},
            },
            [],
        ),
    )


def file_info() -> ToolDefinition:
    return ToolDefinition(
        "file_info",
        "Type, size, mtime and mode of one path in this task's sandbox (a symlink is described, not followed).",
        obj({"path": _PATH}, ["path"]),
    )


def delete_file() -> ToolDefinition:
    return ToolDefinition(
        "delete_file",
        "Delete a file or symlink in this task's sandbox; a directory only with recursive=true "
        "(which deletes everything under it).",
        obj(
            {
                "path": _PATH,
                "recursive": {"type": "boolean", "description": "Also delete a directory and its content."},
            },
            ["path"],
        ),
    )


def move_file() -> ToolDefinition:
    return ToolDefinition(
        "move_file",
        "Move or rename a file or directory in this task's sandbox. Missing parent directories of the "
        "destination are created; an existing destination is an error unless overwrite=true.",
        obj(
            {
                "source": _PATH,
                "destination": _PATH,
                "overwrite": {"type": "boolean", "description": "Replace an existing destination (default false)."},
            },
            ["source", "destination"],
        ),
    )


def make_dir() -> ToolDefinition:
    return ToolDefinition(
        "make_dir",
        "Create a directory (and its missing parents) in this task's sandbox; an existing one is fine.",
        obj({"path": _PATH}, ["path"]),
    )


def upload_files(max_bytes: int) -> ToolDefinition:
    return ToolDefinition(
        "upload_files",
        "Upload a directory as a list of files: each file's path relative to `directory` and its content, "
        "as UTF-8 text or base64 (encoding). Missing directories are created and existing files replaced. "
        f"At most {max_bytes} bytes in all per call.",
        obj(
            {
                "directory": {**_PATH, "description": "Directory in the sandbox the paths are relative to."},
                "files": {
                    "type": "array",
                    "minItems": 1,
                    "items": obj(
                        {
                            "path": {"type": "string", "minLength": 1, "description": "Relative path of the file."},
                            "content": {"type": "string", "description": "The file's content."},
                            "encoding": {
                                "type": "string",
                                "enum": ["utf-8", "base64"],
                                "description": "How content is encoded (default utf-8).",
                            },
                        },
                        ["path", "content"],
                    ),
                },
            },
            ["directory", "files"],
        ),
    )


def download_files(max_bytes: int) -> ToolDefinition:
    return ToolDefinition(
        "download_files",
        "Download a directory as a list of files: every regular file under `directory` (recursively) with "
        "its path relative to it and its content, as UTF-8 text where it is text, else base64 (encoding says "
        f"which). At most max_bytes of content per call (default and limit {max_bytes}); files beyond it are "
        "listed in skipped with the reason, and truncated=true.",
        obj(
            {
                "directory": _PATH,
                "max_bytes": {"type": "integer", "minimum": 1, "description": "Most bytes of content to return."},
            },
            ["directory"],
        ),
    )


def create_sandbox() -> ToolDefinition:
    return ToolDefinition(
        "create_sandbox",
        "Create a sandbox with this name (or attach to the one kept from an earlier run). Every other tool "
        "also creates its sandbox on first use with the server's defaults: call this first only to choose a "
        "backend or options, within what the server allows (anything else is refused with a not_allowed error).",
        obj(
            {
                "name": _NAME,
                "backend": {"type": "string", "minLength": 1, "description": "Backend (default: the server's)."},
                "options": {"type": "object", "description": 'Backend options, e.g. {"image": "python:3.12"}.'},
            },
            ["name"],
        ),
    )


def list_sandboxes() -> ToolDefinition:
    return ToolDefinition(
        "list_sandboxes",
        "List this server's sandboxes: the ones open now and, where the backend can list them, the ones kept "
        "from earlier runs.",
        obj({}, []),
    )


def remove_sandbox() -> ToolDefinition:
    return ToolDefinition(
        "remove_sandbox",
        "Remove one of this server's sandboxes with everything in it (files, processes, background jobs).",
        obj({"name": _NAME}, ["name"]),
    )


def snapshot() -> ToolDefinition:
    return ToolDefinition(
        "snapshot",
        "Save this task's sandbox (its files, not its running processes) as a snapshot that fork can start from.",
        obj({"name": {"type": "string", "minLength": 1, "description": "Name of the snapshot (optional)."}}, []),
    )


def fork() -> ToolDefinition:
    return ToolDefinition(
        "fork",
        "Start new sandboxes as copies of this task's sandbox as it is now (or of a snapshot): each then has "
        "its own files; running processes and background jobs are not copied.",
        obj(
            {
                "new_sandboxes": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "minLength": 1},
                    "description": "Names of the new sandboxes (new, distinct).",
                },
                "snapshot": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Id or name of a snapshot to start from.",
                },
            },
            ["new_sandboxes"],
        ),
    )
