"""The MCP gateway: any MCP client reaches Preflight by pointing at `manage.py mcp_gateway` (see server.py)."""
