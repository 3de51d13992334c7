"""Lookups: one frontier is one Celery group, tasks are idempotent, failures hold with their reason."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from console_helpers import ALICE_MAIN, Agent, Downstream, said, transfer_request
from kombu.exceptions import OperationalError

from console import connectors, models, tasks
from console.services.catalog import catalog_import
from console.services.executions import execution_repreflight
from console.services.lookups import lookups_settled
from console.services.measures import measure_create
from console.services.preflights import MAX_LOOKUPS_PER_KEY

CONVERT: dict[str, Any] = {
    "name": "convert",
    "description": "Convert money into another currency.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "account": {"type": "string"},
            "currency": {"type": "string"},
            "amount": {"type": "number"},
        },
        "required": ["account", "currency", "amount"],
    },
    "x-preflight": {
        "state_change": "money is converted",
        "slots": {"currency": {"sources": ["observed"], "measure": "currency"}},
        "measures": {
            "currency": {"lookup": "bank.currency", "args": {"account": "arg:account"}},
            "balance": {"lookup": "bank.balance", "args": {"account": "arg:account"}},
            "rate": {"lookup": "fx.rate", "args": {"currency": "arg:currency"}},
        },
        "conditions": [
            {"id": "covered", "check": "measure.balance >= arg.amount", "on_false": "hold"},
            {"id": "priced", "check": "measure.rate > 0.0", "on_false": "hold"},
        ],
    },
}


@pytest.fixture
def fx(downstream: Downstream) -> Downstream:
    catalog_import(server="bank", tools=[CONVERT], annotations_trusted=False, actor="test")
    for name in ("bank.balance", "bank.currency", "fx.rate"):
        measure_create(name=name, kind="python", timeout_s=1, actor="test")
    connectors.register_lookup("bank.currency")(lambda account: "CHF")
    connectors.register_lookup("fx.rate")(lambda currency: {"CHF": 0.93}[currency])
    return downstream


def convert_request() -> dict[str, Any]:
    text = f"Convert 100 from {ALICE_MAIN} now"
    return said("bank", "convert", text, {"account": ALICE_MAIN, "amount": 100}, action="Convert")


@pytest.mark.django_db(transaction=True)
def test_lookups_run_one_group_per_dependency_level(
    fx: Downstream, agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = spy_on_groups(monkeypatch)

    record = agent.post("/api/v1/executions", convert_request()).json()

    assert record["verdict"] == "execute", record["reasons"]
    # Round trips = depth, not the number of lookups; a level's two lookups are one task's batch.
    assert groups == [[["balance", "currency"]], [["rate"]]]
    currency = next(s for s in record["slots"] if s["key"] == "arg:currency")
    assert (currency["value"], currency["source"]) == ("CHF", "observed")


@pytest.mark.django_db(transaction=True)
def test_with_one_lookup_per_task_a_level_is_a_group_of_one_task_per_lookup(
    fx: Downstream, agent: Agent, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.PREFLIGHT_LOOKUPS_PER_TASK = 1
    groups = spy_on_groups(monkeypatch)

    record = agent.post("/api/v1/executions", convert_request()).json()

    assert record["verdict"] == "execute", record["reasons"]
    assert groups == [[["balance"], ["currency"]], [["rate"]]]


def spy_on_groups(monkeypatch: pytest.MonkeyPatch) -> list[list[list[str]]]:
    """Each group dispatched: per task, the measures of the lookups it runs."""
    groups: list[list[list[str]]] = []
    real_group = tasks.group

    def spy(header: list[Any]) -> Any:
        batches = [sig.args[1] if isinstance(sig.args[1], list) else [sig.args[1]] for sig in header]
        groups.append(sorted(sorted(key.split("#")[0] for key in batch) for batch in batches))
        return real_group(header)

    monkeypatch.setattr(tasks, "group", spy)
    return groups


@pytest.mark.django_db
def test_a_redelivered_lookup_task_changes_nothing(quick_bank: Downstream, quick_agent: Agent) -> None:
    # No commit in this test transaction, so nothing was dispatched: the tasks are run by hand, twice.
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "measure"
    key = record["measures"][0]["key"]

    tasks.measure_run(record["id"], key)
    tasks.measure_run(record["id"], key)

    observations = models.Observation.objects.filter(execution_id=record["id"], key=key)
    assert [(o.value, o.error) for o in observations] == [(2500.0, None)]
    assert quick_bank.lookups == 1
    execution_repreflight(execution_id=record["id"], trigger="lookups")
    assert models.Execution.objects.get(pk=record["id"]).verdict == "execute"


@pytest.mark.django_db
def test_a_lookup_that_raises_is_an_error_finding_and_holds(
    quick_bank: Downstream, quick_agent: Agent
) -> None:
    connectors.register_lookup("bank.balance")(lambda account: 1 / 0)
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    tasks.measure_run(record["id"], record["measures"][0]["key"])
    execution_repreflight(execution_id=record["id"], trigger="lookups")

    after = quick_agent.get(f"/api/v1/executions/{record['id']}").json()
    assert after["verdict"] == "hold"
    condition = next(s for s in after["slots"] if s["key"] == "cond:balance_covers_amount")
    errors = [f for f in condition["findings"] if f["outcome"] == "error"]
    assert errors and "ZeroDivisionError" in errors[0]["detail"]


@pytest.mark.django_db
def test_a_lookup_without_a_registered_measure_holds(quick_bank: Downstream, quick_agent: Agent) -> None:
    models.Measure.objects.all().delete()
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    tasks.measure_run(record["id"], record["measures"][0]["key"])

    assert models.Observation.objects.get().error == "no measure is registered as 'bank.balance'"


@pytest.mark.django_db
def test_a_slow_lookup_times_out_as_an_error(quick_bank: Downstream, quick_agent: Agent) -> None:
    models.Measure.objects.filter(name="bank.balance").update(timeout_s=0.2)
    connectors.register_lookup("bank.balance")(lambda account: time.sleep(1) or 5)
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    tasks.measure_run(record["id"], record["measures"][0]["key"])

    assert "within 0.2s" in (models.Observation.objects.get().error or "")


@pytest.mark.django_db(transaction=True)
def test_a_lookup_that_is_always_stale_ends_in_a_hold(bank: Downstream, agent: Agent) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    connectors.register_lookup("bank.balance")(lambda account: (2500.0, old))

    record = agent.post("/api/v1/executions", transfer_request()).json()

    assert record["verdict"] == "hold"
    assert models.Observation.objects.filter(execution_id=record["id"]).count() == MAX_LOOKUPS_PER_KEY + 1


@pytest.mark.django_db(transaction=True)
def test_when_the_broker_is_down_the_lookups_wait_to_be_sent_and_the_sweep_sends_them_when_it_is_back(
    bank: Downstream, agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(header: Any) -> Any:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    with monkeypatch.context() as broker:
        broker.setattr(tasks, "group", down)
        response = agent.post("/api/v1/executions", transfer_request())
        assert tasks.sweep()["sent"] == 0  # still down: nothing sent, nothing lost

    assert response.status_code == 201
    record = response.json()
    # Waiting, and saying for what: a broker outage is ours, never a hold.
    assert record["verdict"] == "measure"
    assert record["lookups_unsent"] == [m["key"] for m in record["measures"]]
    (pending,) = models.Observation.objects.filter(execution_id=record["id"])
    assert pending.observed_at is None and "broker unavailable" in (pending.unsent or "")
    assert bank.lookups == 0

    assert tasks.sweep()["sent"] == 1  # the broker is back

    final = agent.get(f"/api/v1/executions/{record['id']}").json()
    assert final["verdict"] == "execute"
    assert "lookups_unsent" not in final
    assert bank.lookups == 1
    rows = models.PreflightRecord.objects.filter(execution_id=record["id"]).order_by("seq")
    assert [(r.verdict, r.trigger) for r in rows] == [("measure", "create"), ("execute", "lookups")]
    kinds = models.AuditEvent.objects.filter(execution_id=record["id"]).order_by("seq")
    assert [k for k in kinds.values_list("kind", flat=True) if k.startswith("lookup")] == [
        "lookup_dispatch_failed",
        "lookup_dispatched",
    ]


@pytest.mark.django_db
def test_a_lookup_lost_with_its_worker_is_an_error_at_the_next_preflight(
    quick_bank: Downstream, quick_agent: Agent, settings: Any
) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()
    models.Observation.objects.update(dispatched_at=datetime.now(UTC) - timedelta(hours=1))

    execution_repreflight(execution_id=record["id"], trigger="answer")

    assert "lost" in (models.Observation.objects.get().error or "")
    assert models.Execution.objects.get(pk=record["id"]).verdict == "hold"


def _lose_lookups(execution_id: str) -> None:
    """The pending lookups' tasks vanished (worker and broker both lost them) long ago."""
    models.Observation.objects.filter(execution_id=execution_id, observed_at__isnull=True).update(
        dispatched_at=datetime.now(UTC) - timedelta(hours=1)
    )


@pytest.mark.django_db
def test_a_hold_from_a_lost_lookup_is_looked_up_again_at_a_get_once_its_backoff_has_passed(
    quick_bank: Downstream, quick_agent: Agent, settings: Any
) -> None:
    settings.PREFLIGHT_LOOKUP_RETRY_S = 1
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()
    _lose_lookups(record["id"])
    execution_repreflight(execution_id=record["id"], trigger="answer")
    url = f"/api/v1/executions/{record['id']}"

    assert quick_agent.get(url).json()["verdict"] == "hold"  # within its backoff: still the hold
    time.sleep(1.1)
    again = quick_agent.get(url).json()

    assert again["verdict"] == "measure"  # looked up again (its task runs after commit)
    rows = models.PreflightRecord.objects.filter(execution_id=record["id"]).order_by("seq")
    assert [(r.trigger, r.verdict) for r in rows] == [
        ("create", "measure"),
        ("answer", "hold"),
        ("retry", "measure"),
    ]
    lost, pending = models.Observation.objects.filter(execution_id=record["id"]).order_by("pk")
    assert "lost" in (lost.error or "") and lost.retry_after is not None
    assert pending.observed_at is None
    assert quick_agent.get(url).json()["seq"] == 3  # a GET while it waits preflights nothing


@pytest.mark.django_db
def test_lost_lookups_are_retried_with_a_doubling_backoff_then_hold_for_good(
    quick_bank: Downstream, quick_agent: Agent, settings: Any
) -> None:
    settings.PREFLIGHT_LOOKUP_RETRY_S = 1
    settings.PREFLIGHT_LOOKUP_RETRIES = 2
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()
    delays = []
    for _ in range(3):
        _lose_lookups(record["id"])
        execution_repreflight(execution_id=record["id"], trigger="answer")
        lost = models.Observation.objects.filter(execution_id=record["id"]).latest("pk")
        assert lost.observed_at is not None and "lost" in (lost.error or "")
        if lost.retry_after is None:
            delays.append(None)
            assert tasks.holds_retry() == 0
            continue
        delays.append(round((lost.retry_after - lost.observed_at).total_seconds()))
        assert tasks.holds_retry() == 0  # not yet
        time.sleep(max(0.0, (lost.retry_after - datetime.now(UTC)).total_seconds()) + 0.05)
        assert tasks.holds_retry() == 1  # the sweep looks it up again: a new pending lookup
        assert models.Observation.objects.filter(execution_id=record["id"]).latest("pk").observed_at is None

    assert delays == [1, 2, None]
    assert models.Execution.objects.get(pk=record["id"]).verdict == "hold"


@pytest.mark.django_db(transaction=True)
def test_a_providers_own_error_answer_stays_a_hold(bank: Downstream, agent: Agent, settings: Any) -> None:
    settings.PREFLIGHT_LOOKUP_RETRY_S = 1

    def refuse(account: str) -> Any:
        raise connectors.MeasureFailed("502 from the bank")

    connectors.register_lookup("bank.balance")(refuse)
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "hold"
    time.sleep(1.1)

    assert tasks.sweep()["retried"] == 0
    answered = agent.get(f"/api/v1/executions/{record['id']}").json()
    assert (answered["verdict"], answered["seq"]) == ("hold", record["seq"])
    assert models.Observation.objects.filter(execution_id=record["id"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_get_with_wait_returns_as_soon_as_the_lookups_finish(
    bank: Downstream, agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)  # a worker that is slow
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "measure"

    def worker() -> None:
        from django.db import connections

        time.sleep(0.3)
        try:
            tasks.measure_run(record["id"], record["measures"][0]["key"])
            lookups_settled(execution_id=record["id"])
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    started = time.monotonic()
    thread.start()
    answered = agent.get(f"/api/v1/executions/{record['id']}", {"wait": "5"}).json()
    thread.join()

    assert answered["verdict"] == "execute"
    assert time.monotonic() - started < 3


@pytest.mark.django_db
def test_trigger_due_picks_up_lost_lookups_and_overdue_deferrals(
    quick_bank: Downstream, quick_agent: Agent
) -> None:
    from io import StringIO

    from django.core.management import call_command

    stuck = quick_agent.post("/api/v1/executions", transfer_request()).json()
    models.Observation.objects.update(dispatched_at=datetime.now(UTC) - timedelta(hours=1))
    out = StringIO()

    call_command("trigger_due", stdout=out)

    assert "re-preflighted 1 execution(s)" in out.getvalue()
    assert models.Execution.objects.get(pk=stuck["id"]).verdict == "hold"
