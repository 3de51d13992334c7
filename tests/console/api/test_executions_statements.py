"""How many SQL statements one POST /executions costs: each is a round trip and CPU on both ends, so a budget
is pinned (bench/api.py measures what they cost; this keeps new ones from slipping in unnoticed)."""

from __future__ import annotations

import pytest
from console_helpers import ALICE_MAIN, Agent, Downstream, transfer_request
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import tasks

pytestmark = pytest.mark.django_db

# The token; the contract, the active rules and the presets; INSERT execution, record and gap rows (or the
# frontier's lookups); the audit chain's head locked, then its events inserted and the head moved on in one
# statement; BEGIN, COMMIT.
BUDGET = 11


def statements_of(agent: Agent, body: dict[str, object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = agent.post("/api/v1/executions", body)
    assert response.status_code == 201, response.json()
    return [q["sql"] for q in queries.captured_queries]


def test_a_post_of_an_execution_runs_at_most_its_budget_of_statements(agent: Agent, bank: Downstream) -> None:
    # The first request of a process also loads the contract definition into the engine cache.
    assert agent.post("/api/v1/executions", transfer_request(from_account=None)).status_code == 201

    statements = statements_of(agent, transfer_request(from_account=None, amount=75))

    assert len(statements) <= BUDGET, "\n".join(statements)


def test_a_post_whose_lookups_go_to_a_worker_answers_without_reading_the_execution_back(
    agent: Agent, bank: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)
    assert agent.post("/api/v1/executions", transfer_request()).status_code == 201

    statements = statements_of(agent, transfer_request(amount=75))

    assert len(statements) <= BUDGET, "\n".join(statements)
    after_commit = statements[[s.split()[0] for s in statements].index("COMMIT") + 1 :]
    assert after_commit == []


# The token, the execution, then in one transaction: its lock, whether it ran, the latest record (the
# questions the answers are checked against), the answers' INSERT, the lost-lookups UPDATE, the preflight's
# reads, the writes of the new record and the audit chain; the answer is made from what was written.
ANSWER_BUDGET = 20


def test_an_answer_post_runs_at_most_its_budget_and_answers_as_a_read_back_would(
    agent: Agent, bank: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)
    created = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    path = f"/api/v1/executions/{created['id']}/answers"

    with CaptureQueriesContext(connection) as queries:
        response = agent.post(path, {"answers": {"arg:from_account": ALICE_MAIN}})

    assert response.status_code == 200, response.json()
    assert response.json()["verdict"] == "measure"
    assert len(queries.captured_queries) <= ANSWER_BUDGET, [q["sql"] for q in queries.captured_queries]
    # Byte for byte what reading it back gives (the GET reads it back), key order included.
    assert response.content == agent.get(f"/api/v1/executions/{created['id']}").content
