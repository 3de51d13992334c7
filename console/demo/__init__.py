"""Small, deterministic MCP servers for the first-run demo, the tests and the MCP gateway.

Each module is runnable: ``python -m console.demo.bank --transport stdio|http --port N``.
State lives in memory and starts the same every time, so a demo or a test sees known balances and stock.
"""
