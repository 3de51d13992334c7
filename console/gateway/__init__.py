"""The MCP gateway: any MCP client reaches Preflight through `manage.py mcp_gateway` (see server.py)."""
