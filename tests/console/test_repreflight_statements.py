"""How many SQL statements a re-preflight costs once a lookup group has finished: the last lookup of each
group runs one, and on a tool with two levels of lookups both sit on the critical path from submission to
the final verdict (bench/lookups.py). The count is pinned so that a new statement cannot slip in unnoticed."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from console_helpers import Agent, round_trips, said
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import models, services, tasks

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

# BEGIN; the execution locked (once), none pending under the lock, not run yet (no lost lookups to expire:
# none is pending), these three in one round trip; contract, active rules, presets, the record's id taken
# ahead, evidence (answers, observations and approvals in one read) and how often each key was looked up
# (read for `execute` too, where nothing uses them: cheaper than a round trip of their own when they are
# needed), in one round trip; UPDATE execution, INSERT record, then [measure: the next group's lookups |
# execute: the grant], the audit chain's lock and INSERT the audit event, with the COMMIT (none of them needs
# an answer). A settle given the results and the execution's request sends the first two round trips as one
# (see the last test).
BEFORE = ["BEGIN", "SELECT execution", "SELECT observation", "SELECT grant"]
READS = [
    *("SELECT toolcontract", "SELECT ruleset", "SELECT preset", "SELECT nextval"),
    *("SELECT answer", "SELECT observation"),
]
WRITES = ["UPDATE execution", "INSERT preflightrecord"]
AUDIT = ["SELECT pg_advisory_xact_lock", "INSERT auditevent", "COMMIT"]
EXPECTED_MEASURE = [*BEFORE, *READS, *WRITES, "INSERT observation", *AUDIT]
# The grant has an audit event of its own: an INSERT each, each linked to the one before by PostgreSQL.
EXPECTED_EXECUTE = [*BEFORE, *READS, *WRITES, "INSERT grant", *AUDIT[:2], "INSERT auditevent", "COMMIT"]


def shape(sql: str) -> str:
    """The verb and the first table named: "SELECT execution" for any read of console_execution."""
    if "pg_advisory_xact_lock" in sql:
        return "SELECT pg_advisory_xact_lock"
    if "nextval(" in sql:
        return "SELECT nextval"
    table = re.search(r"console_(\w+)", sql)
    return f"{sql.split()[0].upper()} {table.group(1) if table else ''}".strip()


def posted_sweep(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> str:
    """An execution of the sweep, its first group of lookups pending; the groups' tasks do not run (the tests
    record their results themselves, then settle as the last task would). Its id."""
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)
    services.catalog_import(server="bank", tools=[SWEEP], annotations_trusted=False, actor="test")
    response = agent.post("/api/v1/executions", sweep_request())
    assert response.status_code == 201
    assert response.json()["verdict"] == "measure"
    return str(response.json()["id"])


def sweep_request() -> dict[str, Any]:
    text = "Sweep 10 EUR from every account of customer C-1001 now."
    return said("bank", "sweep", text, {"customer": "C-1001", "amount": 10}, action="Sweep")


def lookup_results(execution_id: str) -> list[services.LookupResult]:
    """What the group's lookup tasks would find, without running them."""
    pending = models.Observation.objects.filter(execution_id=execution_id, observed_at__isnull=True)
    return [
        services.LookupResult(
            o.pk, f"DE{o.args['n']:020d}" if o.lookup == "sweep.account" else 1000, None, datetime.now(UTC)
        )
        for o in pending
    ]


def fill_lookups(execution_id: str) -> None:
    """What the group's lookup tasks record, without running them."""
    results = lookup_results(execution_id)
    assert services.observations_fill(results=results) == len(results)


def statements_of_settling(execution_id: str, verdict: str) -> list[str]:
    fill_lookups(execution_id)
    with CaptureQueriesContext(connection) as queries:
        stored = services.lookups_settled(execution_id=execution_id, filled=True)
    assert stored is not None
    assert stored.verdict == verdict
    return [shape(q["sql"]) for q in queries.captured_queries]


def test_a_re_preflight_after_a_lookup_group_takes_sixteen_statements_to_measure_and_seventeen_to_grant(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution_id = posted_sweep(agent, monkeypatch)

    assert statements_of_settling(execution_id, "measure") == EXPECTED_MEASURE
    assert statements_of_settling(execution_id, "execute") == EXPECTED_EXECUTE

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

    settled = [services.lookups_settled(execution_id=execution_id, results=[r]) for r in results]

    assert [s is not None for s in settled] == [False] * (N - 1) + [True]
    again = services.LookupResult(results[-1].observation_id, "other", None, datetime.now(UTC))
    assert services.lookups_settled(execution_id=execution_id, results=[again]) is None
    assert models.Observation.objects.get(pk=again.observation_id).value == results[-1].value
    assert models.PreflightRecord.objects.filter(execution_id=execution_id).count() == 2
    # The next group, dispatched by the last settle.
    assert models.Observation.objects.filter(execution_id=execution_id, observed_at__isnull=True).exists()


def round_trips_of_settling(execution_id: str, verdict: str, known: Any) -> list[list[str]]:
    """The settle's statements, grouped by the round trip that sent them, given the group's results to
    record."""
    results = lookup_results(execution_id)
    with round_trips(shape) as trips:
        stored = services.lookups_settled(execution_id=execution_id, results=results, known=known)
    assert stored is not None
    assert stored.verdict == verdict
    return trips


def test_a_settle_records_the_results_and_reads_what_its_preflight_needs_with_the_lock(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution = models.Execution.objects.get(pk=posted_sweep(agent, monkeypatch))
    known = (execution.principal, execution.request)

    trips = round_trips_of_settling(str(execution.pk), "measure", known)

    assert trips == [
        [BEFORE[1], "UPDATE observation", *BEFORE[2:], *READS],
        [*WRITES, "INSERT observation", *AUDIT],
    ]
