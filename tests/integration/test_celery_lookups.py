"""Lookups, deferred triggers and broker failures through the real path: the API in this process, a Celery
worker process, Redis and PostgreSQL. Lookups are HTTP measures served on loopback by this process."""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from integration_support import (
    MeasureServer,
    Observed,
    Worker,
    celery_broker,
    closed_port,
    log_tail,
    wait_until,
)
from rest_framework.test import APIClient

from console import connectors, models
from console.services.catalog import catalog_import
from console.services.measures import measure_create
from console.services.tokens import agent_token_create

# Under xdist each process that gets one of these tests starts its own worker, on its own test database,
# Redis DB number and queue. (`--dist loadgroup` would keep them in one process, but pytest-xdist 3.8's
# grouping has no effect under pytest 9.)
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CUSTOMER = "C-1001"
ACCOUNT = "DE89370400440532013000"
PAYEE = "DE02120300000000202051"
LOOKUP_S = 0.5  # long enough that two lookups started together overlap even on a loaded machine

# Two dependency levels: the paying account is observed (level 1, beside the customer's daily limit), and
# the balance of that account can only be looked up once it is known (level 2).
PAY: dict[str, Any] = {
    "name": "pay",
    "description": "Pay a supplier from the customer's primary account.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "customer": {"type": "string"},
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
        },
        "required": ["customer", "from_account", "to_account", "amount"],
        "additionalProperties": False,
    },
    "x-preflight": {
        "state_change": "money leaves from_account and arrives at to_account",
        "slots": {"from_account": {"sources": ["observed"], "measure": "account"}},
        "measures": {
            "account": {
                "lookup": "crm.primary_account",
                "args": {"customer": "arg:customer"},
                "max_age_s": 60,
            },
            "limit": {"lookup": "risk.daily_limit", "args": {"customer": "arg:customer"}, "max_age_s": 60},
            "balance": {"lookup": "bank.balance", "args": {"account": "arg:from_account"}, "max_age_s": 60},
        },
        "conditions": [
            {"id": "within_limit", "check": "arg.amount <= measure.limit", "on_false": "hold"},
            {"id": "balance_covers_amount", "check": "measure.balance >= arg.amount", "on_false": "hold"},
        ],
    },
}

# One level: a transfer whose balance is looked up.
TRANSFER: dict[str, Any] = {
    "name": "transfer",
    "description": "Move money between accounts.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
        },
        "required": ["from_account", "to_account", "amount"],
        "additionalProperties": False,
    },
    "x-preflight": {
        "state_change": "money leaves from_account and arrives at to_account",
        "measures": {
            "balance": {"lookup": "bank.balance", "args": {"account": "arg:from_account"}, "max_age_s": 60}
        },
        "conditions": [
            {"id": "balance_covers_amount", "check": "measure.balance >= arg.amount", "on_false": "hold"}
        ],
    },
}


def span(text: str, part: str) -> dict[str, int]:
    start = text.index(part)
    return {"turn": 0, "start": start, "end": start + len(part)}


class Agent:
    def __init__(self) -> None:
        _, token = agent_token_create(name="integration")
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    def submit(self, body: dict[str, Any]) -> Any:
        return self.client.post("/api/v1/executions", body, format="json")

    def get(self, execution_id: str, wait: float = 0) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/executions/{execution_id}", {"wait": str(wait)})
        assert response.status_code == 200, response.content
        answer: dict[str, Any] = response.json()
        return answer

    def run(self, execution_id: str, grant: str) -> Any:
        return self.client.post(f"/api/v1/executions/{execution_id}/run", {"grant": grant}, format="json")


def catalog(measures: MeasureServer, *, timeout_s: float = 5) -> Agent:
    catalog_import(
        server="ledger",
        tools=[PAY, TRANSFER],
        annotations_trusted=False,
        connector={"kind": "python"},
        actor="t",
    )
    for name in ("crm.primary_account", "risk.daily_limit", "bank.balance"):
        measure_create(name=name, kind="http", url=measures.url, timeout_s=timeout_s, actor="t")
    return Agent()


def pay_request(amount: int = 120) -> dict[str, Any]:
    text = f"Pay {amount} EUR for customer {CUSTOMER} to {PAYEE} now."
    return {
        "server": "ledger",
        "tool": "pay",
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {
            "customer": {"value": CUSTOMER, "pointer": span(text, CUSTOMER)},
            "to_account": {"value": PAYEE, "pointer": span(text, PAYEE)},
            "amount": {"value": amount, "pointer": span(text, str(amount))},
        },
        "action_name": span(text, "Pay"),
        "timing": {"mode": "immediate", "pointer": span(text, "now")},
    }


def transfer_request(*, when: str = "now", at: datetime | None = None) -> dict[str, Any]:
    text = f"Send 120 EUR from {ACCOUNT} to {PAYEE} {when}."
    timing: dict[str, Any] = {"mode": "immediate"} if at is None else {"mode": "at", "at": at.isoformat()}
    timing["pointer"] = span(text, when)
    return {
        "server": "ledger",
        "tool": "transfer",
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {
            "from_account": {"value": ACCOUNT, "pointer": span(text, ACCOUNT)},
            "to_account": {"value": PAYEE, "pointer": span(text, PAYEE)},
            "amount": {"value": 120, "pointer": span(text, "120")},
        },
        "action_name": span(text, "Send"),
        "timing": timing,
    }


def triggers(execution_id: str) -> list[tuple[str, str]]:
    rows = models.PreflightRecord.objects.filter(execution_id=execution_id).order_by("seq")
    return [(r.trigger, r.verdict) for r in rows]


def settled(agent: Agent, execution_id: str, *, timeout: float, worker: Worker) -> dict[str, Any]:
    """The record once it no longer waits (GET ?wait= long-polls while the verdict is `measure`)."""

    def final() -> dict[str, Any] | None:
        record = agent.get(execution_id, wait=min(2.0, timeout))
        return record if record["verdict"] not in ("measure", "deferred") else None

    record: dict[str, Any] = wait_until(final, timeout=timeout, what="a final verdict", log=worker.log)
    return record


def audit_verifies() -> None:
    call_command("verify_audit", stdout=StringIO())  # raises CommandError at the first broken link


def test_a_two_level_dependency_is_resolved_by_parallel_lookups_one_level_at_a_time(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    measure_server.answer("crm.primary_account", lambda args: ACCOUNT, delay_s=LOOKUP_S)
    measure_server.answer("risk.daily_limit", lambda args: 1000, delay_s=LOOKUP_S)
    measure_server.answer("bank.balance", lambda args: {ACCOUNT: 2500}[args["account"]], delay_s=LOOKUP_S)
    paid: list[dict[str, Any]] = []
    connectors.register_tool("ledger", "pay")(lambda **arguments: paid.append(arguments) or {"paid": True})
    agent = catalog(measure_server)

    response = agent.submit(pay_request())
    assert response.status_code == 201, response.content
    first = response.json()
    assert first["verdict"] == "measure"
    final = settled(agent, first["id"], timeout=20, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    # Re-preflighted automatically after each level: round trips scale with depth, not with lookups.
    assert triggers(first["id"]) == [("create", "measure"), ("lookups", "measure"), ("lookups", "execute")]
    (account,) = measure_server.calls_of("crm.primary_account")
    (limit,) = measure_server.calls_of("risk.daily_limit")
    (balance,) = measure_server.calls_of("bank.balance")
    assert account.ended is not None and limit.ended is not None
    # The two level-1 lookups were in flight at the same time (one task's batch).
    assert max(account.started, limit.started) < min(account.ended, limit.ended)
    # The level-2 lookup read the value level 1 observed, so it started only after level 1 was done.
    assert balance.args == {"account": ACCOUNT}
    assert balance.started >= max(account.ended, limit.ended)
    slot = next(s for s in final["slots"] if s["key"] == "arg:from_account")
    assert (slot["value"], slot["source"]) == (ACCOUNT, "observed")
    assert models.Observation.objects.filter(execution_id=first["id"]).count() == 3

    ran = agent.run(first["id"], final["grant"])
    assert ran.status_code == 200, ran.content
    assert ran.json()["outcome"] == "executed"
    assert paid == [{"customer": CUSTOMER, "from_account": ACCOUNT, "to_account": PAYEE, "amount": 120}]
    audit_verifies()


def test_a_killed_workers_lookup_is_redelivered_and_recorded_once(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    release = threading.Event()
    first_call = threading.Event()

    def balance(args: dict[str, Any]) -> float:
        if not first_call.is_set():
            first_call.set()
            release.wait(timeout=30)  # the first delivery hangs until its worker is dead
        return 2500.0

    measure_server.answer("bank.balance", balance)
    agent = catalog(measure_server, timeout_s=20)

    record = agent.submit(transfer_request()).json()
    assert record["verdict"] == "measure"
    assert first_call.wait(timeout=15), "the lookup never reached the measure server"
    celery_worker.kill()  # mid-task: nothing acked, nothing recorded
    release.set()
    observation = models.Observation.objects.get(execution_id=record["id"])
    assert observation.observed_at is None  # still pending: the killed task recorded nothing

    celery_worker.start()  # Redis hands the unacked task to the new worker after the visibility timeout
    final = settled(agent, record["id"], timeout=30, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    assert len(measure_server.calls_of("bank.balance")) == 2  # looked up twice...
    observations = models.Observation.objects.filter(execution_id=record["id"])
    assert [(o.value, o.error) for o in observations] == [(2500.0, None)]  # ...recorded once
    condition = next(s for s in final["slots"] if s["key"] == "cond:balance_covers_amount")
    assert (condition["status"], condition["value"]) == ("known", True)
    assert [f["outcome"] for f in condition["findings"]] == ["found"]
    assert not [f for s in final["slots"] for f in s["findings"] if f["outcome"] == "error"]
    assert triggers(record["id"]) == [("create", "measure"), ("lookups", "execute")]
    audit_verifies()


def test_a_lookup_whose_pool_process_dies_is_requeued_by_the_live_worker_and_recorded_once(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    release = threading.Event()
    first_call = threading.Event()

    def balance(args: dict[str, Any]) -> float:
        if not first_call.is_set():
            first_call.set()
            release.wait(timeout=30)
        return 2500.0

    measure_server.answer("bank.balance", balance)
    agent = catalog(measure_server, timeout_s=20)

    record = agent.submit(transfer_request()).json()
    assert first_call.wait(timeout=15), "the lookup never reached the measure server"
    # The pool processes die (OOM killer, segfault) while the worker itself lives on: with acks_late and
    # reject_on_worker_lost it puts the task back on the queue at once instead of recording a failure.
    for pid in celery_worker.pool_pids():
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    release.set()
    final = settled(agent, record["id"], timeout=20, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    assert celery_worker.proc is not None and celery_worker.proc.poll() is None  # the same worker
    assert "WorkerLostError" in log_tail(celery_worker.log, chars=10**7)
    assert len(measure_server.calls_of("bank.balance")) == 2
    observations = models.Observation.objects.filter(execution_id=record["id"])
    assert [(o.value, o.error) for o in observations] == [(2500.0, None)]
    assert triggers(record["id"]) == [("create", "measure"), ("lookups", "execute")]


def test_with_redis_down_the_api_records_the_lookups_as_waiting_and_the_sweep_sends_them_when_it_is_back(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    measure_server.answer("bank.balance", lambda args: 2500.0)
    agent = catalog(measure_server)
    down = f"redis://127.0.0.1:{closed_port()}/0"

    with celery_broker(down, celery_worker.queue):
        started = time.monotonic()
        response = agent.submit(transfer_request())
        took = time.monotonic() - started

    assert response.status_code == 201, response.content
    record = response.json()
    assert took < 3  # a refused connection fails fast; the API does not hang on the broker
    # Waiting, and saying for what; a broker outage is not the provider's error, so not a hold.
    assert record["verdict"] == "measure"
    assert record["lookups_unsent"] == [m["key"] for m in record["measures"]]
    observation = models.Observation.objects.get(execution_id=record["id"])
    assert observation.observed_at is None and "broker unavailable" in (observation.unsent or "")
    assert measure_server.calls_of("bank.balance") == []

    call_command("trigger_due", stdout=StringIO())  # the sweep, with the broker back
    final = settled(agent, record["id"], timeout=15, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    # Nothing recorded is lost: the submission, the waiting lookups, their sending, the audit chain.
    assert triggers(record["id"]) == [("create", "measure"), ("lookups", "execute")]
    kinds = list(
        models.AuditEvent.objects.filter(execution_id=record["id"])
        .order_by("seq")
        .values_list("kind", flat=True)
    )
    assert kinds[:3] == ["preflight", "lookup_dispatch_failed", "lookup_dispatched"]
    assert len(measure_server.calls_of("bank.balance")) == 1
    audit_verifies()


def test_a_deferred_execution_is_preflighted_afresh_by_its_eta_task_at_trigger_time(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    measure_server.answer("bank.balance", lambda args: 2500.0)
    agent = catalog(measure_server)
    # Further ahead than half the broker's visibility timeout: the trigger travels in more than one hop.
    at = datetime.now(UTC) + timedelta(seconds=3.5)
    hops_before = _triggers_received(celery_worker)

    record = agent.submit(transfer_request(when="in a few seconds", at=at)).json()
    assert record["verdict"] == "deferred", record["reasons"]
    assert record["grant"] is None
    final = settled(agent, record["id"], timeout=20, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    # One fresh preflight at trigger time (not the earlier verdict, and not twice), then its lookups.
    assert triggers(record["id"]) == [("create", "deferred"), ("deferred", "measure"), ("lookups", "execute")]
    rows = models.PreflightRecord.objects.filter(execution_id=record["id"]).order_by("seq")
    assert datetime.fromisoformat(rows[1].record["evaluated_at"]) >= at
    (lookup,) = measure_server.calls_of("bank.balance")
    assert lookup.started_at >= at  # measured at trigger time, never ahead of it
    assert final["record_digest"] != record["record_digest"]
    # 3.5 s ahead with hops of at most 1.5 s: the ETA task fired early twice and moved itself on.
    assert _triggers_received(celery_worker) - hops_before >= 3
    audit_verifies()


def _triggers_received(worker: Worker) -> int:
    return log_tail(worker.log, chars=10**7).count("console.tasks.execution_trigger[")  # "received" lines


def test_a_deferred_trigger_lost_with_the_broker_is_caught_up_by_trigger_due(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    measure_server.answer("bank.balance", lambda args: 2500.0)
    agent = catalog(measure_server)
    at = datetime.now(UTC) + timedelta(seconds=2.5)  # the engine runs anything within 1 s now

    with celery_broker(f"redis://127.0.0.1:{closed_port()}/0", celery_worker.queue):
        response = agent.submit(transfer_request(when="in a moment", at=at))

    assert response.status_code == 201, response.content
    record = response.json()
    assert record["verdict"] == "deferred"  # recorded, although its trigger could not be scheduled
    time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()) + 0.1)
    assert agent.get(record["id"])["verdict"] == "deferred"  # nothing fired: the task was never queued

    call_command("trigger_due", stdout=StringIO())  # the cron fallback
    final = settled(agent, record["id"], timeout=15, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    assert triggers(record["id"]) == [("create", "deferred"), ("deferred", "measure"), ("lookups", "execute")]


def _hold_while_looking_up(agent: Agent, execution_id: str) -> None:
    """An answer that holds the record, whatever a running lookup will say: a value inside the scalar
    amount has no place in the arguments. (An answer the tool's schema refuses, -5 for the amount, was the
    way once; it is now refused with 422 invalid_answer before it counts.)"""
    answered = agent.client.post(
        f"/api/v1/executions/{execution_id}/answers", {"answers": {"arg:amount.cents": 5}}, format="json"
    )
    assert answered.status_code == 200, answered.content
    assert answered.json()["verdict"] == "hold"


def test_a_record_made_while_a_lookup_ran_is_preflighted_again_when_the_lookup_finishes(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    release = threading.Event()
    started = threading.Event()

    def balance(args: dict[str, Any]) -> float:
        started.set()
        release.wait(timeout=30)
        return 2500.0

    measure_server.answer("bank.balance", balance)
    agent = catalog(measure_server, timeout_s=20)
    record = agent.submit(transfer_request()).json()
    assert record["verdict"] == "measure"
    assert started.wait(timeout=15), "the lookup never reached the measure server"
    _hold_while_looking_up(agent, record["id"])
    release.set()

    # The hold was decided without the balance, so the lookup's end preflights again, once.
    wait_until(
        lambda: len(triggers(record["id"])) == 3, timeout=15, what="a third record", log=celery_worker.log
    )
    time.sleep(0.5)  # a second preflight would come within this
    assert triggers(record["id"]) == [("create", "measure"), ("answer", "hold"), ("lookups", "hold")]
    observation = models.Observation.objects.get(execution_id=record["id"])
    assert (observation.value, observation.error) == (2500.0, None)
    condition = next(s for s in agent.get(record["id"])["slots"] if s["key"] == "cond:balance_covers_amount")
    assert [f["outcome"] for f in condition["findings"]] == ["found"]


def test_a_record_made_while_a_stale_value_was_looked_up_again_is_preflighted_again_when_it_finishes(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    # The engine words that finding "not measured yet" (an older value exists), not "lookup running": the
    # server decides from what it stored, so the new value is still used.
    release = threading.Event()
    again = threading.Event()
    calls: list[int] = []

    def balance(args: dict[str, Any]) -> Any:
        calls.append(1)
        if len(calls) == 1:
            return Observed(2500.0, datetime.now(UTC) - timedelta(minutes=5))  # max_age_s is 60: stale
        again.set()
        release.wait(timeout=30)
        return 2400.0

    measure_server.answer("bank.balance", balance)
    agent = catalog(measure_server, timeout_s=20)
    record = agent.submit(transfer_request()).json()
    assert again.wait(timeout=15), "the stale balance was never looked up again"
    _hold_while_looking_up(agent, record["id"])
    release.set()

    wait_until(
        lambda: len(triggers(record["id"])) == 4, timeout=15, what="a fourth record", log=celery_worker.log
    )
    time.sleep(0.5)
    assert triggers(record["id"]) == [
        ("create", "measure"),
        ("lookups", "measure"),
        ("answer", "hold"),
        ("lookups", "hold"),
    ]
    condition = next(s for s in agent.get(record["id"])["slots"] if s["key"] == "cond:balance_covers_amount")
    assert [f["outcome"] for f in condition["findings"]] == ["found"]


def _other_backends() -> set[int]:
    """PostgreSQL backends connected to the test database, other than this process's own."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {pid for (pid,) in cursor.fetchall()}


def test_the_worker_keeps_its_database_connections_from_one_lookup_to_the_next(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    measure_server.answer("bank.balance", lambda args: 2500.0)
    agent = catalog(measure_server)

    first = settled(agent, agent.submit(transfer_request()).json()["id"], timeout=15, worker=celery_worker)
    assert first["verdict"] == "execute", first["reasons"]
    after_first = _other_backends()
    second = settled(agent, agent.submit(transfer_request()).json()["id"], timeout=15, worker=celery_worker)
    assert second["verdict"] == "execute", second["reasons"]

    # Still open after its task, as a request's connection is (CONN_MAX_AGE), and still there after more work:
    # a lookup does not pay for a new connection and a new PostgreSQL backend each time.
    assert after_first, "the worker closed its database connection after the task"
    assert after_first & _other_backends()
