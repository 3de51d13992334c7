"""Batched lookups: one task runs several lookups of a frontier at the same time, records each result once
(a redelivered copy runs and records nothing), and a lookup that fails is an error the preflight holds on."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from console_helpers import ALICE_MAIN, Agent, Downstream, said

from console import connectors, models, tasks
from console.services.catalog import catalog_import
from console.services.lookups import LookupResult, lookups_settled, observations_fill
from console.services.measures import measure_create

N = 3  # lookups in the survey's one frontier
DELAY_S = 0.3  # how long each slow lookup takes

SURVEY: dict[str, Any] = {
    "name": "survey",
    "description": "Check an account against three ledgers.",
    "inputSchema": {
        "type": "object",
        "properties": {"account": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["account", "amount"],
    },
    "x-preflight": {
        "state_change": "the account is surveyed",
        # One lookup, three arguments: three keys, all in the first frontier (none depends on another).
        "measures": {
            f"ledger_{i}": {"lookup": "survey.ledger", "args": {"account": "arg:account", "n": i}}
            for i in range(N)
        },
        "conditions": [
            {"id": f"ledger_{i}_covers", "check": f"measure.ledger_{i} >= arg.amount", "on_false": "hold"}
            for i in range(N)
        ],
    },
}


class Ledgers:
    """The `survey.ledger` lookup: each call takes `delay_s`, answers 100 + n, and raises for `fail_n`."""

    def __init__(
        self, delay_s: float = 0.0, fail_n: int | None = None, delays: dict[int, float] | None = None
    ) -> None:
        self.delay_s = delay_s
        self.delays = delays or {}  # n -> its own delay, in place of delay_s
        self.fail_n = fail_n
        self.lock = threading.Lock()
        self.calls: list[tuple[int, float, float]] = []  # (n, started, ended), monotonic

    def __call__(self, account: str, n: int) -> int:
        started = time.monotonic()
        time.sleep(self.delays.get(n, self.delay_s))
        with self.lock:
            self.calls.append((n, started, time.monotonic()))
        if n == self.fail_n:
            raise ValueError("ledger offline")
        return 100 + n


def survey_with(ledgers: Ledgers) -> None:
    catalog_import(server="survey", tools=[SURVEY], annotations_trusted=False, actor="test")
    measure_create(name="survey.ledger", kind="python", timeout_s=2, actor="test")
    connectors.register_lookup("survey.ledger")(ledgers)


def undispatched_survey(
    agent: Agent, monkeypatch: pytest.MonkeyPatch, ledgers: Ledgers
) -> tuple[str, list[str]]:
    """The survey tool with these ledgers, and an execution of it whose frontier is pending and was sent to
    no task: (its id, the frontier's keys)."""
    survey_with(ledgers)
    monkeypatch.setattr(tasks, "dispatch_lookups", lambda execution_id, keys: True)
    text = f"Survey {ALICE_MAIN} for 10 now"
    record = agent.post(
        "/api/v1/executions",
        said("survey", "survey", text, {"account": ALICE_MAIN, "amount": 10}, action="Survey"),
    ).json()
    assert record["verdict"] == "measure", record["reasons"]
    keys = [m["key"] for m in record["measures"]]
    assert len(keys) == N
    return record["id"], keys


def observed(execution_id: str) -> list[tuple[int, Any, str | None, datetime | None]]:
    """(n, value, error, observed_at) of each of the execution's lookups, by n."""
    rows = models.Observation.objects.filter(execution_id=execution_id)
    return sorted((o.args["n"], o.value, o.error, o.observed_at) for o in rows)


@pytest.mark.django_db
def test_a_batch_task_runs_its_lookups_at_the_same_time_and_records_each_once(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledgers = Ledgers(delay_s=DELAY_S)
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, ledgers)

    started = time.monotonic()
    tasks.measure_batch(execution_id, keys)
    elapsed = time.monotonic() - started

    # All three were running at one moment (the last to start began before the first ended), and the
    # batch took less than running them one after another would.
    assert max(call[1] for call in ledgers.calls) < min(call[2] for call in ledgers.calls)
    assert elapsed < N * DELAY_S
    assert sorted(call[0] for call in ledgers.calls) == [0, 1, 2]
    assert [(n, value, error) for n, value, error, _ in observed(execution_id)] == [
        (0, 100, None),
        (1, 101, None),
        (2, 102, None),
    ]
    # The batch settled the execution itself: no lookup is pending, so it preflighted again.
    assert models.Execution.objects.get(pk=execution_id).verdict == "execute"


def fills_of(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """How many results each statement that records them recorded, in order: ("fill", n) on their own,
    ("settle", n) with the settle, under the row lock."""
    fills: list[tuple[str, int]] = []
    fill, settle = observations_fill, lookups_settled
    settling = False

    def counted(*, results: Any) -> int:
        if not settling:  # on SQLite the settle records its results with this, in its transaction
            fills.append(("fill", len(results)))
        return fill(results=results)

    def settled(**kwargs: Any) -> Any:
        nonlocal settling
        fills.append(("settle", len(kwargs.get("results", ()))))
        settling = True
        try:
            return settle(**kwargs)
        finally:
            settling = False

    monkeypatch.setattr("console.services.lookups.observations_fill", counted)
    monkeypatch.setattr("console.tasks.observations_fill", counted)
    monkeypatch.setattr("console.tasks.lookups_settled", settled)
    return fills


@pytest.mark.django_db
def test_answers_that_come_close_together_are_recorded_in_one_statement_with_the_settle(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second and third answer ~1 and ~2 ms after the first: inside the moment the batch gives them.
    ledgers = Ledgers(delays={0: 0.05, 1: 0.051, 2: 0.052})
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, ledgers)
    fills = fills_of(monkeypatch)

    tasks.measure_batch(execution_id, keys)

    assert fills == [("settle", N)]
    assert models.Execution.objects.get(pk=execution_id).verdict == "execute"


@pytest.mark.django_db
def test_an_answer_that_comes_much_later_is_recorded_on_its_own_and_the_others_do_not_wait_for_it(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledgers = Ledgers(delays={0: 0.0, 1: 0.0, 2: DELAY_S})
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, ledgers)
    fills = fills_of(monkeypatch)
    recorded_early: list[list[tuple[str, int]]] = []
    slow = ledgers.__call__

    def watching(account: str, n: int) -> int:
        if n == 2:  # while the slow one runs, what was recorded already
            time.sleep(DELAY_S / 2)
            recorded_early.append(list(fills))
        return slow(account, n)

    connectors.register_lookup("survey.ledger")(watching)

    tasks.measure_batch(execution_id, keys)

    assert fills == [("fill", 2), ("settle", 1)]
    assert recorded_early == [[("fill", 2)]]
    assert models.Execution.objects.get(pk=execution_id).verdict == "execute"


@pytest.mark.django_db
def test_a_redelivered_batch_runs_no_lookup_again_and_records_nothing_twice(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledgers = Ledgers()
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, ledgers)
    tasks.measure_batch(execution_id, keys)
    first = observed(execution_id)

    tasks.measure_batch(execution_id, keys)

    assert len(ledgers.calls) == N
    assert observed(execution_id) == first  # observed_at included: no row was filled again
    rows = models.PreflightRecord.objects.filter(execution_id=execution_id).order_by("seq")
    assert [(r.trigger, r.verdict) for r in rows] == [("create", "measure"), ("lookups", "execute")]
    assert models.Grant.objects.filter(execution_id=execution_id).count() == 1


@pytest.mark.django_db
def test_a_batch_runs_only_those_of_its_lookups_still_pending(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledgers = Ledgers()
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, ledgers)
    tasks.measure_run(execution_id, keys[0])
    (done_first,) = [o for o in observed(execution_id) if o[3] is not None]

    tasks.measure_batch(execution_id, keys)

    assert sorted(call[0] for call in ledgers.calls) == [0, 1, 2]  # the first key's lookup ran once
    assert done_first in observed(execution_id)
    assert models.Execution.objects.get(pk=execution_id).verdict == "execute"


@pytest.mark.django_db
def test_a_lookup_of_a_batch_that_raises_is_an_error_and_the_execution_holds_with_that_reason(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, Ledgers(fail_n=1))

    tasks.measure_batch(execution_id, keys)

    (first, failed, third) = observed(execution_id)
    assert first[:3] == (0, 100, None)
    assert third[:3] == (2, 102, None)
    assert failed[0] == 1 and failed[3] is not None
    assert failed[2] is not None and "ValueError: ledger offline" in failed[2]
    # SQL NULL, not a JSON null: the lookup gave no value at all.
    assert models.Observation.objects.filter(execution_id=execution_id, value__isnull=True).count() == 1

    record = quick_agent.get(f"/api/v1/executions/{execution_id}").json()
    assert record["verdict"] == "hold"
    condition = next(s for s in record["slots"] if s["key"] == "cond:ledger_1_covers")
    errors = [f for f in condition["findings"] if f["outcome"] == "error"]
    assert errors and "ledger offline" in errors[0]["detail"]
    others = [s for s in record["slots"] if s["key"] in ("cond:ledger_0_covers", "cond:ledger_2_covers")]
    assert [s["met"] for s in others] == [True, True]


@pytest.mark.django_db
def test_lookups_still_running_at_the_tasks_soft_time_limit_are_recorded_as_timed_out_and_hold(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledgers = Ledgers(delay_s=DELAY_S)
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, ledgers)

    def soft_limit(self: connectors.StartedMeasure, timeout: float | None = None) -> bool:
        if timeout is None:  # the task waiting for its first lookup: Celery's soft limit strikes (prefork)
            raise SoftTimeLimitExceeded()
        return False

    monkeypatch.setattr(connectors.StartedMeasure, "wait", soft_limit)
    tasks.measure_batch(execution_id, keys)

    assert [(n, value, error) for n, value, error, _ in observed(execution_id)] == [
        (n, None, f"timed out after {tasks._LOOKUP_SOFT_LIMIT_S}s") for n in range(N)
    ]
    execution = models.Execution.objects.get(pk=execution_id)
    assert execution.verdict == "hold"


@pytest.mark.parametrize(
    ("per_task", "keys", "expected"),
    [
        (2, ["a", "b", "c"], [("measure_batch", ["a", "b"]), ("measure_run", "c")]),
        (2, ["a", "b", "c", "d"], [("measure_batch", ["a", "b"]), ("measure_batch", ["c", "d"])]),
        (3, ["a", "b", "c"], [("measure_batch", ["a", "b", "c"])]),
        (10, ["a"], [("measure_run", "a")]),
        (1, ["a", "b"], [("measure_run", "a"), ("measure_run", "b")]),
    ],
)
def test_a_frontier_is_split_into_tasks_of_up_to_the_configured_size_covering_each_key_once_in_order(
    settings: Any, per_task: int, keys: list[str], expected: list[tuple[str, Any]]
) -> None:
    settings.PREFLIGHT_LOOKUPS_PER_TASK = per_task

    signatures = tasks._lookup_tasks("e-1", keys)

    assert [(sig.task.rsplit(".", 1)[-1], sig.args[1]) for sig in signatures] == expected
    assert {sig.args[0] for sig in signatures} == {"e-1"}
    # Immutable: a group's task must not receive another task's result as an argument.
    assert all(sig.immutable for sig in signatures)


@pytest.mark.django_db
def test_observations_fill_fills_only_pending_rows_counts_them_and_stores_an_error_without_a_value(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution_id, _ = undispatched_survey(quick_agent, monkeypatch, Ledgers())
    rows = list(models.Observation.objects.filter(execution_id=execution_id).order_by("args__n"))
    at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    nested = {"balance": {"amount": 101.5, "currency": "EUR"}, "flags": [True, None, "x"]}

    filled = observations_fill(
        results=[
            LookupResult(rows[0].pk, nested, None, at),
            LookupResult(rows[1].pk, 7, "ledger offline", at),  # an error keeps no value
        ]
    )

    assert filled == 2
    stored = {o.pk: o for o in models.Observation.objects.filter(execution_id=execution_id)}
    assert (stored[rows[0].pk].value, stored[rows[0].pk].error, stored[rows[0].pk].observed_at) == (
        nested,
        None,
        at,
    )
    assert (stored[rows[1].pk].value, stored[rows[1].pk].error) == (None, "ledger offline")
    assert models.Observation.objects.filter(pk=rows[1].pk, value__isnull=True).exists()
    assert stored[rows[2].pk].observed_at is None

    later = datetime(2032, 1, 1, tzinfo=UTC)
    again = observations_fill(results=[LookupResult(o.pk, "other", None, later) for o in rows[:2]])
    mixed = observations_fill(results=[LookupResult(o.pk, "last", None, later) for o in rows[1:]])

    assert (again, mixed) == (0, 1)
    after = {o.pk: o for o in models.Observation.objects.filter(execution_id=execution_id)}
    assert [(after[o.pk].value, after[o.pk].error, after[o.pk].observed_at) for o in rows] == [
        (nested, None, at),
        (None, "ledger offline", at),
        ("last", None, later),
    ]
    assert observations_fill(results=[]) == 0


@pytest.mark.django_db
def test_each_task_of_a_group_records_its_last_results_under_the_lock_and_only_the_last_preflights(
    downstream: Downstream, quick_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    execution_id, keys = undispatched_survey(quick_agent, monkeypatch, Ledgers())
    records = models.PreflightRecord.objects.filter(execution_id=execution_id)

    tasks.measure_batch(execution_id, keys[:2])  # the group's first task: one of the three is still pending

    assert [n for n, value, _, _ in observed(execution_id) if value is not None] == [0, 1]
    assert models.Execution.objects.get(pk=execution_id).verdict == "measure"
    assert records.count() == 1

    tasks.measure_run(execution_id, keys[2])  # its last

    assert models.Execution.objects.get(pk=execution_id).verdict == "execute"
    assert records.count() == 2
