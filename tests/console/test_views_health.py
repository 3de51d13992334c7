import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client

from config import celery_app

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


def test_liveness_answers_without_touching_the_database(client: Client) -> None:
    def refuse(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        raise OperationalError("connection refused")

    with connection.execute_wrapper(refuse):
        response = client.get("/health/live")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@contextmanager
def broker(url: str) -> Iterator[None]:
    """This process's Celery app publishing to `url` (these tests otherwise run lookups in-process)."""
    conf = celery_app.conf
    saved = {key: conf[key] for key in ("broker_url", "task_always_eager")}
    conf.update(broker_url=url, task_always_eager=False)
    celery_app._pool = None
    try:
        yield
    finally:
        conf.update(saved)
        celery_app._pool = None


def test_readiness_checks_the_database_and_the_broker(client: Client, settings: Any) -> None:
    with broker(settings.REDIS_URL):
        up = client.get("/health/ready")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with broker(f"redis://127.0.0.1:{closed}/0"):
        started = time.monotonic()
        down = client.get("/health/ready")
        took = time.monotonic() - started

    assert (up.status_code, up.json()) == (200, {"status": "ok", "database": "ok", "broker": "ok"})
    assert (down.status_code, down.json()) == (503, {"status": "error", "database": "ok", "broker": "error"})
    assert took < 2  # a load balancer's probe is answered, not left hanging on the broker
    assert "no-cache" in down["Cache-Control"]


def test_readiness_fails_when_the_database_fails(client: Client) -> None:
    def refuse(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        raise OperationalError("connection refused")

    with connection.execute_wrapper(refuse):
        response = client.get("/health/ready")

    assert response.status_code == 503
    assert response.json()["database"] == "error"
