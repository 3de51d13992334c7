"""Fixtures shared by every test package. Keep package-specific fixtures in that package's conftest."""

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()
