"""From the tool registry to MCP: tool listings, arguments, results.

Every tool that runs in a sandbox gains an optional ``sandbox`` argument (a sandbox
name, default :data:`DEFAULT_SANDBOX`); the server runs it in the task
``<task_prefix><sandbox>``. A registry result becomes a ``CallToolResult`` whose
``structured_content`` is the result itself and whose text content is its JSON; an error
result (``{"error": {...}}``) sets ``is_error`` and its text leads with the error's type,
message and hint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types as types

from envlayer.agents.tools import ToolDefinition, error
from envlayer.agents.tools.sandbox_tools import check_name
from envlayer.agents.tools.schema import ToolArgumentError
from envlayer.agents.tools.tool_registry import NO_TASK_TOOLS

DEFAULT_SANDBOX = "default"
SANDBOX_ARGUMENT = "sandbox"
_SANDBOX_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "description": f"Name of the sandbox to use (default {DEFAULT_SANDBOX!r}); created on first use.",
}


def mcp_tools(definitions: Iterable[ToolDefinition]) -> list[types.Tool]:
    """The MCP listing of ``definitions``: input schema (plus ``sandbox`` where the tool
    runs in one) and output schema."""
    tools = []
    for d in definitions:
        schema = dict(d.parameters)
        if d.name not in NO_TASK_TOOLS:
            schema["properties"] = {**schema.get("properties", {}), SANDBOX_ARGUMENT: _SANDBOX_SCHEMA}
        tools.append(types.Tool(name=d.name, description=d.description, input_schema=schema, output_schema=d.output))
    return tools


def split_arguments(name: str, arguments: Mapping[str, Any] | None, prefix: str) -> tuple[str, dict[str, Any]]:
    """``(task_id, the registry's arguments)`` of a call. Raises ToolArgumentError for a
    ``sandbox`` that is not a sandbox name."""
    args = dict(arguments or {})
    if name in NO_TASK_TOOLS:
        return prefix + DEFAULT_SANDBOX, args
    sandbox = args.pop(SANDBOX_ARGUMENT, None)
    if sandbox is None:
        sandbox = DEFAULT_SANDBOX
    if not isinstance(sandbox, str):
        raise ToolArgumentError(f"argument 'sandbox' must be a string, got {type(sandbox).__name__}")
    return prefix + check_name(sandbox, SANDBOX_ARGUMENT), args


def bad_arguments(exc: ToolArgumentError, name: str) -> dict[str, Any]:
    """The registry's error result for arguments refused before the registry saw them."""
    return error("bad_arguments", exc.message, f"call {name} with arguments matching its JSON schema")


def call_result(result: Mapping[str, Any]) -> types.CallToolResult:
    """A registry result as an MCP tool result (``is_error`` for an error result)."""
    body = json.dumps(result, ensure_ascii=False)
    failure = result.get("error")
    if isinstance(failure, Mapping):
        lead = f"{failure.get('type')}: {failure.get('message')}"
        if failure.get("hint"):
            lead += f"\nhint: {failure['hint']}"
        content = [types.TextContent(text=lead), types.TextContent(text=body)]
        return types.CallToolResult(content=content, structured_content=dict(result), is_error=True)
    return types.CallToolResult(content=[types.TextContent(text=body)], structured_content=dict(result))
