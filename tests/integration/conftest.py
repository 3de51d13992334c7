"""Session fixtures for the integration tests: a real Celery worker on real Redis and PostgreSQL.

The worker is a subprocess pointed at the test database pytest-django created for this (xdist) process,
and at a Redis DB number and queue of its own, so parallel sessions never take each other's tasks. These
tests commit for real (`transaction=True`), or the worker could not see what they wrote.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings as django_settings
from integration_support import (
    VISIBILITY_TIMEOUT_S,
    MeasureServer,
    Worker,
    celery_broker,
    database_url,
    forget_queue,
)
from redis import Redis

from console import signing
from console.connectors import tools as connector_tools
from preflight import GrantSigner


@pytest.fixture(scope="session")
def measure_server() -> Iterator[MeasureServer]:
    server = MeasureServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def signing_key_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Made before the worker starts: the worker signs grants, this process verifies them, with one key.
    path = tmp_path_factory.mktemp("keys") / "grant_signing_key.pem"
    path.write_bytes(GrantSigner.generate().to_pem())
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def broker_url() -> str:
    """The machine's Redis, on a DB number of this xdist process's own (10 + n; 9 without xdist)."""
    xdist = os.environ.get("PYTEST_XDIST_WORKER", "")
    number = (10 + int(xdist[2:])) % 16 if xdist.startswith("gw") else 9
    return urlunsplit(urlsplit(django_settings.REDIS_URL)._replace(path=f"/{number}"))


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: None,
    django_db_blocker: Any,
    broker_url: str,
    signing_key_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Worker]:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("integration tests need PostgreSQL (set DATABASE_URL, as `make test` does)")
    Redis.from_url(broker_url, socket_connect_timeout=2).ping()  # a clear failure if Redis is down

    queue = f"preflight-it-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        # The test database pytest-django made for this process (test_<name>, _gw<n> under xdist).
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": broker_url,
        "PREFLIGHT_CELERY_QUEUE": queue,
        "PREFLIGHT_BROKER_VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
        "PREFLIGHT_SIGNING_KEY_PATH": str(signing_key_path),
        "PREFLIGHT_SECRET_KEY": os.environ.get("PREFLIGHT_SECRET_KEY") or "test-only-not-a-secret",
        "PREFLIGHT_EAGER_TASKS": "false",
        # The loopback measure servers these tests start, on whatever port they get.
        "PREFLIGHT_HTTP_ALLOW": "127.0.0.1,localhost",
        "PREFLIGHT_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    worker = Worker(env=env, queue=queue, log_dir=tmp_path_factory.mktemp("celery"))
    worker.start()
    try:
        yield worker
    finally:
        # Before pytest-django drops the test database, which fails while the worker is connected.
        worker.stop()
        forget_queue(broker_url, queue)


@pytest.fixture(autouse=True)
def _integration(
    celery_worker: Worker,
    broker_url: str,
    measure_server: MeasureServer,
    signing_key_path: Path,
    settings: Any,
    transactional_db: None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    if celery_worker.proc is None or celery_worker.proc.poll() is not None:
        celery_worker.start()  # a test that killed it and failed before replacing it
    settings.PREFLIGHT_SIGNING_KEY_PATH = signing_key_path
    monkeypatch.setattr(connector_tools, "_TOOLS", dict(connector_tools._TOOLS))
    measure_server.reset()
    with celery_broker(broker_url, celery_worker.queue):
        yield
    signing._signers.clear()
