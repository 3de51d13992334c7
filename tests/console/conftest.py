"""Console test fixtures: an agent with a token, the bank catalog, a counted downstream, eager lookups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_helpers import GET_BALANCE, TRANSFER, WIRE, Agent, Downstream, make_agent, make_operator

from config import celery_app
from console import connectors, signing
from console.connectors import measures
from console.connectors import tools as connector_tools
from console.services.catalog import catalog_import
from console.services.measures import measure_create


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


@pytest.fixture
def downstream(monkeypatch: pytest.MonkeyPatch) -> Downstream:
    # Registrations are process-wide: each test gets its own registry and leaves nothing behind.
    monkeypatch.setattr(connector_tools, "_TOOLS", dict(connector_tools._TOOLS))
    monkeypatch.setattr(measures, "_LOOKUPS", dict(measures._LOOKUPS))
    d = Downstream()
    connectors.register_tool("bank", "transfer")(d.transfer)
    connectors.register_lookup("bank.balance")(d.balance)
    return d


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    # Real commits: on-commit work (lookup dispatch, triggers) runs inside the request, as in production.
    return make_agent()


@pytest.fixture
def quick_agent(db: None) -> Agent:
    """For tests that end before any commit matters (bad input): rolled back, not flushed, so fast."""
    return make_agent()


@pytest.fixture
def quick_operator(db: None) -> Agent:
    """An operator token's client (catalog import, measures), rolled back like `quick_agent`."""
    return make_operator()


def import_bank() -> None:
    catalog_import(
        server="bank",
        tools=[TRANSFER, GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )
    catalog_import(server="wires", tools=[WIRE], annotations_trusted=False, actor="test")
    measure_create(name="bank.balance", kind="python", timeout_s=2, actor="test")


@pytest.fixture
def bank(transactional_db: None, downstream: Downstream) -> Downstream:
    import_bank()
    return downstream


@pytest.fixture
def quick_bank(db: None, downstream: Downstream) -> Downstream:
    import_bank()
    return downstream
