from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client

pytestmark = pytest.mark.django_db


def test_health_answers_ok_when_the_database_is_up(client: Client) -> None:
    response = client.get("/health/")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_health_answers_503_when_the_database_fails(client: Client) -> None:
    def refuse(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        raise OperationalError("connection refused")

    with connection.execute_wrapper(refuse):
        response = client.get("/health/")

    assert response.status_code == 503
    assert response.json() == {"status": "error", "database": "error"}


def test_health_is_never_cached(client: Client) -> None:
    response = client.get("/health/")

    assert "no-cache" in response["Cache-Control"]
