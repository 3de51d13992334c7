"""How many SQL statements a re-preflight costs once a lookup group has finished: the last lookup of each
group runs one, and on a tool with two levels of lookups both sit on the critical path from submission to
the final verdict (bench/lookups.py). The count is pinned so that a new statement cannot slip in unnoticed."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from console_helpers import Agent, said
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import models, tasks
from console.services.catalog import catalog_import
from console.services.lookups import LookupResult, lookups_settled, observations_fill

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the statements are PostgreSQL's")

N = 3  # accounts: one owner lookup each (level 1), then one balance lookup each (level 2)

SWEEP: dict[str, Any] = {
    "name": "sweep",
    "description": "Sweep the customer's accounts into one.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "customer": {"type": "string"},
            "amount": {"type": "number"},
            **{f"acct_{i}": {"type": "string"} for i in range(N)},
        },
        "required": ["customer", "amount", *(f"acct_{i}" for i in range(N))],
    },
    "x-preflight": {
        "state_change": "money moves from every account of the customer",
        "slots": {f"acct_{i}": {"sources": ["observed"], "measure": f"owner_{i}"} for i in range(N)},
        "measures": {
            **{
                f"owner_{i}": {"lookup": "sweep.account", "args": {"customer": "arg:customer", "n": i}}
                for i in range(N)
            },
            **{
                f"balance_{i}": {"lookup": "sweep.balance", "args": {"account": f"arg:acct_{i}"}}
                for i in range(N)
            },
        },
        "conditions": [
            {"id": f"covered_{i}", "check": f"measure.balance_{i} >= arg.amount", "on_false": "hold"}
            for i in range(N)
        ],
    },
}

# BEGIN; the execution locked; then in one round trip none pending, not run yet, the contract, active rules,
# presets, evidence and how often each key was looked up; UPDATE execution, INSERT record, the next group's
# lookups or the grant; the audit chain's head locked, its events inserted and the head moved on in one
# statement; COMMIT.
BUDGET_MEASURE = 15  # with the next group's INSERT
BUDGET_EXECUTE = 15  # or the grant's INSERT


def shape(sql: str) -> str:
    """The verb and the first table named: "SELECT execution" for any read of console_execution."""
    table = re.search(r"console_(\w+)", sql)
    return f"{sql.split()[0].upper()} {table.group(1) if table else ''}".strip()


def posted_sweep(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> str:
    """An execution of the sweep, its first group of lookups pending; the groups' tasks do not run (the tests
    record their results themselves, then settle as the last task would). Its id."""
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)
    catalog_import(server="bank", tools=[SWEEP], annotations_trusted=False, actor="test")
    response = agent.post("/api/v1/executions", sweep_request())
    assert response.status_code == 201
    assert response.json()["verdict"] == "measure"
    return str(response.json()["id"])


def sweep_request() -> dict[str, Any]:
    text = "Sweep 10 EUR from every account of customer C-1001 now."
    return said("bank", "sweep", text, {"customer": "C-1001", "amount": 10}, action="Sweep")


def lookup_results(execution_id: str) -> list[LookupResult]:
    """What the group's lookup tasks would find, without running them."""
    pending = models.Observation.objects.filter(execution_id=execution_id, observed_at__isnull=True)
    return [
        LookupResult(
            o.pk, f"DE{o.args['n']:020d}" if o.lookup == "sweep.account" else 1000, None, datetime.now(UTC)
        )
        for o in pending
    ]


def fill_lookups(execution_id: str) -> None:
    """What the group's lookup tasks record, without running them."""
    results = lookup_results(execution_id)
    assert observations_fill(results=results) == len(results)


def statements_of_settling(execution_id: str, verdict: str) -> list[str]:
    fill_lookups(execution_id)
    with CaptureQueriesContext(connection) as queries:
        stored = lookups_settled(execution_id=execution_id, filled=True)
    assert stored is not None
    assert stored.verdict == verdict
    return [shape(q["sql"]) for q in queries.captured_queries]


def test_a_re_preflight_after_a_lookup_group_runs_at_most_its_budget_of_statements(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution_id = posted_sweep(agent, monkeypatch)

    measure = statements_of_settling(execution_id, "measure")
    execute = statements_of_settling(execution_id, "execute")

    assert len(measure) <= BUDGET_MEASURE, measure
    assert len(execute) <= BUDGET_EXECUTE, execute

    stored = models.PreflightRecord.objects.filter(execution_id=execution_id).order_by("seq")
    assert [(r.seq, r.trigger, r.verdict) for r in stored] == [
        (1, "create", "measure"),
        (2, "lookups", "measure"),
        (3, "lookups", "execute"),
    ]
    assert models.Grant.objects.filter(execution_id=execution_id, record=stored.last()).count() == 1


def test_a_group_settles_once_its_last_result_is_recorded_and_a_redelivered_copy_changes_nothing(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each task of the group records its result with the settle, under the row lock: those before the last
    # find one pending and stop; the last preflights again.
    execution_id = posted_sweep(agent, monkeypatch)
    results = lookup_results(execution_id)
    assert len(results) == N

    settled = [lookups_settled(execution_id=execution_id, results=[r]) for r in results]

    assert [s is not None for s in settled] == [False] * (N - 1) + [True]
    again = LookupResult(results[-1].observation_id, "other", None, datetime.now(UTC))
    assert lookups_settled(execution_id=execution_id, results=[again]) is None
    assert models.Observation.objects.get(pk=again.observation_id).value == results[-1].value
    assert models.PreflightRecord.objects.filter(execution_id=execution_id).count() == 2
    # The next group, dispatched by the last settle.
    assert models.Observation.objects.filter(execution_id=execution_id, observed_at__isnull=True).exists()


def test_a_settle_given_the_results_records_them_and_preflights_again_within_the_budget(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution = models.Execution.objects.get(pk=posted_sweep(agent, monkeypatch))
    results = lookup_results(str(execution.pk))

    with CaptureQueriesContext(connection) as queries:
        stored = lookups_settled(execution_id=execution.pk, results=results)

    assert stored is not None
    assert stored.verdict == "measure"
    filled = models.Observation.objects.filter(pk__in=[r.observation_id for r in results])
    assert sorted(o.value for o in filled) == sorted(r.value for r in results)
    assert len(queries.captured_queries) <= BUDGET_MEASURE + 1  # and the results' UPDATE
