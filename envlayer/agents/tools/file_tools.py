"""Handlers of the file management and transfer tools (``list_files``, ``file_info``,
``delete_file``, ``move_file``, ``make_dir``, ``upload_files``, ``download_files``).

Each takes the task's environment and the validated arguments and returns the result
dict whose schema is in :mod:`envlayer.agents.tools.output_schemas`; failures raise the
envlayer errors the registry turns into error results. A directory travels as a list of
files (path relative to the directory, content as UTF-8 text or base64), not as a tar
archive, so any client can read and write it without unpacking anything.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from envlayer.agents.tools import file_ops
from envlayer.agents.tools.schema import ToolArgumentError
from envlayer.environment import Environment
from envlayer.errors import FileTooLarge

MAX_DEPTH = 10
"""Deepest ``list_files`` listing."""
DOWNLOAD_DEPTH = 100
"""Deepest directory level ``download_files`` descends to."""

Result = dict[str, Any]


def list_files(env: Environment, args: dict[str, Any], max_entries: int) -> Result:
    path = args.get("path", ".")
    depth = args.get("depth", 1)
    if depth > MAX_DEPTH:
        raise ToolArgumentError(f"argument 'depth' must be <= {MAX_DEPTH}")
    entries, cut = file_ops.list_dir(env, path, depth=depth, limit=max_entries)
    res: Result = {"path": path, "entries": [e.as_dict() for e in entries]}
    if cut:
        res["truncated"] = True
        res["hint"] = f"only the first {max_entries} entries are shown; list a subdirectory or use depth=1"
    return res


def file_info(env: Environment, args: dict[str, Any]) -> Result:
    return file_ops.stat(env, args["path"]).as_dict()


def delete_file(env: Environment, args: dict[str, Any]) -> Result:
    return {"deleted": file_ops.delete(env, args["path"], recursive=bool(args.get("recursive"))).as_dict()}


def move_file(env: Environment, args: dict[str, Any]) -> Result:
    moved = file_ops.move(env, args["source"], args["destination"], overwrite=bool(args.get("overwrite")))
    return {"source": args["source"], "moved": moved.as_dict()}


def make_dir(env: Environment, args: dict[str, Any]) -> Result:
    return file_ops.make_dir(env, args["path"]).as_dict()


def upload_files(env: Environment, args: dict[str, Any], max_bytes: int, max_files: int) -> Result:
    """Decode and check every file first (nothing is written when one is bad), then
    write them one by one."""
    directory = args["directory"]
    file_ops.confine(env, directory)
    if len(args["files"]) > max_files:
        raise ToolArgumentError(f"{len(args['files'])} files in one call, more than {max_files}; send fewer at a time")
    decoded: list[tuple[str, bytes]] = []
    for i, item in enumerate(args["files"]):
        try:
            target = file_ops.join(directory, item["path"])
        except ValueError as exc:
            raise ToolArgumentError(f"files[{i}].path: {exc}") from None
        decoded.append((target, _decode(item, i)))
    total = sum(len(data) for _, data in decoded)
    if total > max_bytes:
        raise ToolArgumentError(f"the files hold {total} bytes, more than {max_bytes} per call; send fewer at a time")
    for target, data in decoded:
        env.write_file(target, data)
    return {"directory": directory, "files_written": len(decoded), "bytes_written": total}


def _decode(item: dict[str, Any], index: int) -> bytes:
    if item.get("encoding", "utf-8") == "utf-8":
        return str(item["content"]).encode("utf-8")
    try:
        return base64.b64decode(item["content"], validate=True)
    except (binascii.Error, ValueError):
        raise ToolArgumentError(f"files[{index}].content is not valid base64") from None


def download_files(env: Environment, args: dict[str, Any], max_bytes: int, max_entries: int) -> Result:
    """Every regular file under the directory, in path order, until the byte budget is
    spent; the rest are listed in ``skipped`` with the reason."""
    base = file_ops.confine(env, args["directory"]).rstrip("/") or "/"
    budget = min(args.get("max_bytes", max_bytes), max_bytes)
    entries, cut = file_ops.list_dir(env, base, depth=DOWNLOAD_DEPTH, limit=max_entries)
    files: list[Result] = []
    skipped: list[Result] = []
    for entry in entries:
        if entry.type != "file":
            continue
        relative = entry.path[len(base) :].lstrip("/")
        if entry.size > budget:
            skipped.append({"path": relative, "reason": f"{entry.size} bytes: over the {budget}-byte budget left"})
            continue
        try:
            data = env.read_file(entry.path)
        except FileTooLarge as exc:
            skipped.append({"path": relative, "reason": exc.message})
            continue
        budget -= len(data)
        files.append({"path": relative, "size": len(data), **_encode(data)})
    res: Result = {"directory": args["directory"], "files": files, "skipped": skipped}
    if skipped or cut:
        res["truncated"] = True
    return res


def _encode(data: bytes) -> Result:
    if b"\0" not in data:
        try:
            return {"content": data.decode("utf-8"), "encoding": "utf-8"}
        except UnicodeDecodeError:
            pass
    return {"content": base64.b64encode(data).decode("ascii"), "encoding": "base64"}
