"""The console's WSGI application with one more Python tool, `ledger/transfer`, that takes longer than any
timeout (a tool slower than the web worker's limit). Served by gunicorn in test_faults.py."""

import time
from typing import Any

from config.wsgi import application
from console import connectors

__all__ = ["application"]


@connectors.register_tool("ledger", "transfer")
def _slow_transfer(**arguments: Any) -> Any:
    time.sleep(120)
    return {"sent": True}
