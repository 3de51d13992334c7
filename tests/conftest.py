"""Fixtures shared by every test package. Keep package-specific fixtures in that package's conftest."""

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from console.egress import parse_allowed_hosts


@pytest.fixture(autouse=True)
def _loopback_servers_are_allowed(settings: Any) -> Iterator[None]:
    """Tests start loopback HTTP and MCP servers on free ports: allow loopback on any port (a deployment's
    default is the demo's two ports). tests/console/test_egress.py sets its own lists."""
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["127.0.0.1", "localhost", "[::1]"])
    yield


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()
