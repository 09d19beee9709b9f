"""The MCP server (``envlayer mcp``): see :mod:`envlayer.integrations.mcp.server` and docs/mcp.md."""
