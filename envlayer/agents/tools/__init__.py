"""Tools an agent's tool registry registers: ``terminal``, ``terminal_job``,
``read_file`` and ``write_file`` (and, asked for with ``tools=ALL_TOOLS``, file
management, directory transfer and the sandbox tools), executed per task through an
:class:`~envlayer.agents.manager.EnvironmentManager`.

    from envlayer.agents.tools import ToolRegistry
    tools = ToolRegistry()                      # backend from config / env vars
    client_tools = tools.openai_tools()         # or tools.anthropic_tools()
    result = tools.run_tool("terminal", {"command": "ls"}, task_id="task-1")

See ``docs/agents.md``.
"""

from envlayer.agents.tools.definitions import ToolDefinition, to_anthropic, to_openai
from envlayer.agents.tools.sandbox_tools import SandboxPolicy
from envlayer.agents.tools.schema import ToolArgumentError, validate
from envlayer.agents.tools.tool_registry import ALL_TOOLS, DEFAULT_TOOLS, ToolConfig, ToolRegistry, error
from envlayer.agents.tools.truncate import truncate_middle

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_TOOLS",
    "SandboxPolicy",
    "ToolArgumentError",
    "ToolConfig",
    "ToolDefinition",
    "ToolRegistry",
    "error",
    "to_anthropic",
    "to_openai",
    "truncate_middle",
    "validate",
]
