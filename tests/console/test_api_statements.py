"""How many SQL statements one POST /executions costs: each is a round trip and CPU on both ends, so the count
is pinned (bench/api.py measures what they cost; this keeps a new one from slipping in unnoticed)."""

from __future__ import annotations

import pytest
from console_helpers import Agent, Downstream, round_trips, transfer_request
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import tasks

pytestmark = pytest.mark.django_db

# Token; BEGIN; contract, active rules, presets and the record's id taken ahead (one round trip); INSERT
# execution, record and gap rows, the audit chain's lock, INSERT the preflight's and the gap report's audit
# events (linked to the head by PostgreSQL, under the lock), with the COMMIT (one round trip: none of them
# needs an answer). The execution's summary is in its INSERT (no UPDATE after the record's).
READS = ["SELECT toolcontract", "SELECT ruleset", "SELECT preset", "SELECT nextval"]
WRITES = [
    *("INSERT execution", "INSERT preflightrecord", "INSERT gaprow"),
    *("SELECT pg_advisory_xact_lock", "INSERT auditevent", "INSERT auditevent"),
]
EXPECTED = ["SELECT agenttoken", "BEGIN", *READS, *WRITES, "COMMIT"]


def shape(sql: str) -> str:
    words = sql.split()
    verb = words[0].upper()
    if verb == "SELECT" and "pg_advisory_xact_lock" in sql:
        return "SELECT pg_advisory_xact_lock"
    if verb == "SELECT" and "nextval(" in sql:
        return "SELECT nextval"
    table = next((w for w in words if w.strip('"').startswith("console_")), "")
    return f"{verb} {table.strip('"').removeprefix('console_')}".strip()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the statements are PostgreSQL's")
def test_a_post_of_an_execution_takes_thirteen_statements_in_three_round_trips(
    agent: Agent, bank: Downstream
) -> None:
    # The first request of a process also loads the contract definition into the engine cache.
    assert agent.post("/api/v1/executions", transfer_request(from_account=None)).status_code == 201

    with CaptureQueriesContext(connection) as queries, round_trips(shape) as trips:
        response = agent.post("/api/v1/executions", transfer_request(from_account=None, amount=75))

    assert response.status_code == 201
    assert response.json()["verdict"] == "ask"
    assert [shape(q["sql"]) for q in queries.captured_queries] == EXPECTED
    assert trips == [["SELECT agenttoken"], READS, [*WRITES, "COMMIT"]]  # BEGIN goes with the reads


# The same with the frontier's lookup rows in place of gap rows and their audit event (none is missing yet);
# the record written is the answer, not read back after commit (the lookups run on a worker, later).
EXPECTED_MEASURE = [
    *("SELECT agenttoken", "BEGIN", *READS),
    *("INSERT execution", "INSERT preflightrecord", "INSERT observation"),
    *("SELECT pg_advisory_xact_lock", "INSERT auditevent", "COMMIT"),
]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the statements are PostgreSQL's")
def test_a_post_whose_lookups_go_to_a_worker_answers_without_reading_the_execution_back(
    agent: Agent, bank: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)
    assert agent.post("/api/v1/executions", transfer_request()).status_code == 201

    with CaptureQueriesContext(connection) as queries:
        response = agent.post("/api/v1/executions", transfer_request(amount=75))

    assert response.status_code == 201
    assert response.json()["verdict"] == "measure"
    assert response.json()["seq"] == 1
    assert [shape(q["sql"]) for q in queries.captured_queries] == EXPECTED_MEASURE
