"""The console's WSGI application with the fault bench's tool: `ledger/transfer`, a Python tool that posts
each call to the bench's loopback ledger (PREFLIGHT_BENCH_LEDGER_URL), which counts executions."""

import json
import os
import urllib.request
from typing import Any

from config.wsgi import application
from console import connectors

__all__ = ["application"]


@connectors.register_tool("ledger", "transfer")
def _transfer(**arguments: Any) -> Any:
    body = json.dumps({"measure": "ledger.transfer", "args": arguments}).encode()
    request = urllib.request.Request(
        os.environ["PREFLIGHT_BENCH_LEDGER_URL"], data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["value"]
