"""Console test fixtures: an agent with a token, the bank catalog, a counted downstream, eager lookups."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_helpers import ALICE_MAIN, ALICE_SAVINGS, BOB, GET_BALANCE, TRANSFER, WIRE
from rest_framework.test import APIClient

from console import celery_app, connectors, services, signing


@pytest.fixture(autouse=True)
def _signing_key(settings: Any, tmp_path: Path) -> Iterator[None]:
    settings.PREFLIGHT_SIGNING_KEY_PATH = tmp_path / "keys" / "grant_signing_key.pem"
    yield
    signing._signers.clear()


@pytest.fixture(autouse=True)
def _eager_lookups(request: pytest.FixtureRequest) -> Iterator[None]:
    # No worker in these tests: lookups and triggers run in-process. Integration tests run a real worker.
    if request.node.get_closest_marker("integration"):
        yield
        return
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


class Downstream:
    """The bank's side of the gate: counts the calls that actually arrived."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.balances = {ALICE_MAIN: 2500.0, ALICE_SAVINGS: 10000.0, BOB: 300.0}
        self.lookups = 0
        self.fail_with: Exception | None = None

    def transfer(self, **arguments: Any) -> dict[str, Any]:
        with self.lock:
            self.calls.append(arguments)
        if self.fail_with is not None:
            raise self.fail_with
        return {"transfer_id": f"t{len(self.calls)}", "amount": arguments["amount"]}

    def balance(self, account: str) -> float:
        with self.lock:
            self.lookups += 1
        return self.balances[account]


@pytest.fixture
def downstream(monkeypatch: pytest.MonkeyPatch) -> Downstream:
    # Registrations are process-wide: each test gets its own registry and leaves nothing behind.
    monkeypatch.setattr(connectors, "_TOOLS", dict(connectors._TOOLS))
    monkeypatch.setattr(connectors, "_LOOKUPS", dict(connectors._LOOKUPS))
    d = Downstream()
    connectors.register_tool("bank", "transfer")(d.transfer)
    connectors.register_lookup("bank.balance")(d.balance)
    return d


class Agent:
    """An API client that sends JSON with a bearer token."""

    def __init__(self, client: APIClient, token: str) -> None:
        self.client = client
        self.token = token

    def post(self, path: str, data: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("format", "json")
        return self.client.post(path, data, **kwargs)

    def get(self, path: str, data: Any = None, **kwargs: Any) -> Any:
        return self.client.get(path, data, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.client.delete(path, **kwargs)


def make_agent() -> Agent:
    _, token = services.agent_token_create(name="test-agent")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return Agent(client, token)


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    # Real commits: on-commit work (lookup dispatch, triggers) runs inside the request, as in production.
    return make_agent()


@pytest.fixture
def quick_agent(db: None) -> Agent:
    """For tests that end before any commit matters (bad input): rolled back, not flushed, so fast."""
    return make_agent()


def import_bank() -> None:
    services.catalog_import(
        server="bank",
        tools=[TRANSFER, GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )
    services.catalog_import(server="wires", tools=[WIRE], annotations_trusted=False, actor="test")
    services.measure_create(name="bank.balance", kind="python", timeout_s=2, actor="test")


@pytest.fixture
def bank(transactional_db: None, downstream: Downstream) -> Downstream:
    import_bank()
    return downstream


@pytest.fixture
def quick_bank(db: None, downstream: Downstream) -> Downstream:
    import_bank()
    return downstream
