"""Faults on the production parts, injected inside each test: this session's own test database goes away
(new connections refused, open ones terminated, as in a PostgreSQL restart), a scratch Redis freezes, a
tool outlasts its timeout under gunicorn, a lookup is lost, beat does the periodic work. Each test asserts
that every 2xx has its record, that nothing ran twice, that the audit chain verifies, and that the execution
ends final or clearly waiting without anyone stepping in. The shared PostgreSQL and Redis are never
stopped: only this test's database, and services the test starts itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from integration_support import (
    ROOT,
    Beat,
    MeasureServer,
    ScratchRedis,
    Worker,
    broker_options,
    celery_broker,
    closed_port,
    database_outage,
    log_tail,
    wait_until,
)
from test_celery_lookups import (
    Agent,
    audit_verifies,
    catalog,
    settled,
    transfer_request,
    triggers,
)

from console import connectors, models, tasks
from console.services.tokens import agent_token_create

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RUN_OUTCOMES = ("executed", "failed", "outcome_unknown")


def granted(agent: Agent, measures: MeasureServer, worker: Worker) -> dict[str, Any]:
    """A transfer whose balance lookup went through the worker: its record says execute, with a grant."""
    measures.answer("bank.balance", lambda args: 2500.0)
    record = settled(agent, agent.submit(transfer_request()).json()["id"], timeout=20, worker=worker)
    assert record["verdict"] == "execute", record["reasons"]
    return record


def outcomes(execution_id: str) -> list[str]:
    rows = models.Outcome.objects.filter(execution_id=execution_id, status__in=RUN_OUTCOMES)
    return list(rows.order_by("pk").values_list("status", flat=True))


# ---- the database goes away while a run calls the tool -----------------------------------------------


def test_a_database_gone_while_the_tool_runs_answers_outcome_unknown_and_the_sweep_records_it(
    celery_worker: Worker, measure_server: MeasureServer, settings: Any
) -> None:
    agent = catalog(measure_server)
    record = granted(agent, measure_server, celery_worker)
    calls: list[dict[str, Any]] = []
    with database_outage(connection.settings_dict) as outage:

        def transfer(**arguments: Any) -> Any:
            calls.append(arguments)
            outage.start()  # PostgreSQL goes away while the tool acts, longer than the run waits for it
            return {"sent": True}

        connectors.register_tool("ledger", "transfer")(transfer)
        started = time.monotonic()
        ran = agent.run(record["id"], record["grant"])
        took = time.monotonic() - started

    # The call left, so the agent is told its outcome is unknown, never "nothing was recorded".
    assert ran.status_code == 200, ran.content
    assert ran.json()["outcome"] == "outcome_unknown"
    assert "database was unavailable" in ran.json()["detail"]
    assert took < settings.PREFLIGHT_OUTCOME_WRITE_S + 5
    assert len(calls) == 1
    # The run's start was committed with its nonce; its outcome is what the sweep records.
    grant = models.Grant.objects.get(execution_id=record["id"])
    assert grant.used_at is not None
    assert outcomes(record["id"]) == []
    assert tasks.sweep()["reconciled"] == 0  # not before the run could still be going
    settings.PREFLIGHT_RUN_LOST_AFTER_S = 0

    assert tasks.sweep()["reconciled"] == 1
    assert tasks.sweep()["reconciled"] == 0  # once

    assert outcomes(record["id"]) == ["outcome_unknown"]
    assert agent.get(record["id"])["outcome"] == "outcome_unknown"
    again = agent.run(record["id"], record["grant"])
    assert again.status_code == 409 and again.json()["error"] == "grant_used"
    assert len(calls) == 1  # never run twice
    audit_verifies()


def test_a_database_blip_during_a_run_is_ridden_out_and_the_outcome_recorded(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    agent = catalog(measure_server)
    record = granted(agent, measure_server, celery_worker)
    calls: list[dict[str, Any]] = []
    with database_outage(connection.settings_dict) as outage:

        def transfer(**arguments: Any) -> Any:
            calls.append(arguments)
            outage.start()
            outage.stop_after(1.5)  # back within the time a run waits to write its outcome
            return {"sent": True}

        connectors.register_tool("ledger", "transfer")(transfer)
        ran = agent.run(record["id"], record["grant"])

    assert ran.status_code == 200, ran.content
    assert ran.json() == {"outcome": "executed", "result": {"sent": True}}
    assert outcomes(record["id"]) == ["executed"]
    assert len(calls) == 1
    audit_verifies()


# ---- the database goes away while a lookup records its result ----------------------------------------


def test_a_database_blip_while_a_lookup_records_its_result_is_retried_by_the_task(
    celery_worker: Worker, measure_server: MeasureServer
) -> None:
    connection.ensure_connection()
    mine = connection.connection.info.backend_pid  # this test's own connection stays
    calls: list[float] = []
    with database_outage(connection.settings_dict) as outage:

        def balance(args: dict[str, Any]) -> float:
            calls.append(time.monotonic())
            if len(calls) == 1:
                outage.start(spare=mine)  # the worker's connection dies, and reconnecting is refused...
                outage.stop_after(2.0)  # ...for two seconds
            return 2500.0

        measure_server.answer("bank.balance", balance)
        agent = catalog(measure_server)
        record = agent.submit(transfer_request()).json()
        assert record["verdict"] == "measure"
        final = settled(agent, record["id"], timeout=45, worker=celery_worker)

    assert final["verdict"] == "execute", final["reasons"]
    assert "Retry in" in log_tail(celery_worker.log, chars=10**7)
    # The lookup ran again with the task (its first result was never recorded), and was recorded once.
    assert len(calls) >= 2
    observations = models.Observation.objects.filter(execution_id=record["id"])
    assert [(o.value, o.error) for o in observations] == [(2500.0, None)]
    assert triggers(record["id"]) == [("create", "measure"), ("lookups", "execute")]
    audit_verifies()


# ---- a frozen broker ---------------------------------------------------------------------------------


def test_a_frozen_redis_fails_a_submission_fast_and_its_lookups_are_sent_when_it_thaws(
    celery_worker: Worker, measure_server: MeasureServer, tmp_path: Path
) -> None:
    redis = ScratchRedis(tmp_path)
    redis.start()
    worker = Worker(
        env={**celery_worker.env, "REDIS_URL": redis.url},
        queue=celery_worker.queue,
        log_dir=tmp_path,
        concurrency=2,
    )
    # What production publishes with: settings.CELERY_BROKER_TRANSPORT_OPTIONS' socket timeouts.
    production = {
        **broker_options(),
        **{
            k: v for k, v in django_settings.CELERY_BROKER_TRANSPORT_OPTIONS.items() if k.startswith("socket")
        },
    }
    try:
        worker.start()
        measure_server.answer("bank.balance", lambda args: 2500.0)
        agent = catalog(measure_server)
        with celery_broker(redis.url, worker.queue, options=production):
            warm = settled(agent, agent.submit(transfer_request()).json()["id"], timeout=20, worker=worker)
            assert warm["verdict"] == "execute"

            redis.freeze()
            started = time.monotonic()
            response = agent.submit(transfer_request())
            took = time.monotonic() - started
            swept = time.monotonic()
            assert tasks.sweep()["sent"] == 0  # still frozen: nothing sent, and the sweep does not hang
            sweep_took = time.monotonic() - swept
            redis.thaw()

            assert response.status_code == 201, response.content
            record = response.json()
            assert took < 1.0, took  # not the 5 s x retries a web worker was held before
            assert sweep_took < 1.0, sweep_took
            # Recorded, and clearly waiting: for the broker, not on a hold.
            assert record["verdict"] == "measure"
            assert record["lookups_unsent"] == [m["key"] for m in record["measures"]]

            assert tasks.sweep()["sent"] == 1
            final = settled(agent, record["id"], timeout=20, worker=worker)
    finally:
        worker.stop()
        redis.stop()

    assert final["verdict"] == "execute", final["reasons"]
    assert "lookups_unsent" not in final
    observations = models.Observation.objects.filter(execution_id=record["id"])
    assert [(o.value, o.error, o.unsent) for o in observations] == [(2500.0, None, None)]
    assert triggers(record["id"]) == [("create", "measure"), ("lookups", "execute")]
    audit_verifies()


# ---- a lookup lost with the broker -------------------------------------------------------------------


def test_a_hold_from_a_lost_lookup_clears_by_itself_once_its_backoff_has_passed(
    celery_worker: Worker, measure_server: MeasureServer, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PREFLIGHT_LOOKUP_LOST_AFTER_S = 1
    settings.PREFLIGHT_LOOKUP_RETRY_S = 1
    measure_server.answer("bank.balance", lambda args: 2500.0)
    agent = catalog(measure_server)
    with monkeypatch.context() as broker:
        broker.setattr(tasks, "_send", lambda execution_id, keys: True)  # accepted, then lost
        record = agent.submit(transfer_request()).json()
    assert record["verdict"] == "measure"

    time.sleep(1.1)
    tasks.sweep()  # past the time limit: the lookup is lost, an infrastructure error, so a hold for now
    assert agent.get(record["id"])["verdict"] == "hold"
    time.sleep(1.1)
    retried = tasks.sweep()["retried"]
    final = settled(agent, record["id"], timeout=20, worker=celery_worker)

    assert retried == 1
    assert final["verdict"] == "execute", final["reasons"]
    assert triggers(record["id"]) == [
        ("create", "measure"),
        ("lookups", "hold"),
        ("retry", "measure"),
        ("lookups", "execute"),
    ]
    assert len(measure_server.calls_of("bank.balance")) == 1
    audit_verifies()


# ---- beat runs the periodic work ---------------------------------------------------------------------


def test_beat_catches_up_a_deferred_execution_whose_trigger_was_lost_without_anyone_running_a_command(
    celery_worker: Worker, measure_server: MeasureServer, tmp_path: Path
) -> None:
    from datetime import UTC, datetime, timedelta

    measure_server.answer("bank.balance", lambda args: 2500.0)
    agent = catalog(measure_server)
    at = datetime.now(UTC) + timedelta(seconds=2)
    with celery_broker(f"redis://127.0.0.1:{closed_port()}/0", celery_worker.queue):
        record = agent.submit(transfer_request(when="in a moment", at=at)).json()
    assert record["verdict"] == "deferred"  # its trigger could not be scheduled

    beat = Beat(env={**celery_worker.env, "PREFLIGHT_SWEEP_INTERVAL_S": "1"}, log_dir=tmp_path)
    beat.start()
    try:
        final = settled(agent, record["id"], timeout=30, worker=celery_worker)
    finally:
        beat.stop()

    assert final["verdict"] == "execute", final["reasons"] + [log_tail(beat.log)]
    assert triggers(record["id"]) == [("create", "deferred"), ("deferred", "measure"), ("lookups", "execute")]
    assert "console.tasks.sweep" in log_tail(beat.log, chars=10**6)
    audit_verifies()


# ---- a tool slower than the web worker's timeout -----------------------------------------------------


def test_under_the_shipped_gunicorn_config_a_tool_slower_than_every_timeout_ends_in_outcome_unknown(
    celery_worker: Worker, measure_server: MeasureServer, tmp_path: Path
) -> None:
    agent = catalog(measure_server)
    _, token = agent_token_create(name="gunicorn")
    agent.client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")  # a token this test holds
    record = granted(agent, measure_server, celery_worker)
    # Served by a process of its own: tokens, grants and records meet in the database.
    port = closed_port()
    env = {
        **celery_worker.env,
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "WEB_CONCURRENCY": "1",
        "PREFLIGHT_WEB_TIMEOUT_S": "12",
        "PREFLIGHT_ALLOWED_HOSTS": "127.0.0.1",
    }
    log = tmp_path / "gunicorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "-c",
                "gunicorn.conf.py",
                "--pythonpath",
                "tests/integration",
                "slow_tool_wsgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"

        def live() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/health/live", timeout=1) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_until(live, timeout=30, what="gunicorn to serve", log=log)
        run = urllib.request.Request(
            f"{url}/api/v1/executions/{record['id']}/run",
            data=json.dumps({"grant": record["grant"]}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        started = time.monotonic()
        try:
            with urllib.request.urlopen(run, timeout=30) as answer:
                status, body = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        took = time.monotonic() - started
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=15)

    # The tool's timeout (12 s web limit - 8 s margin = 4 s) ended the call, not gunicorn's kill.
    assert status == 200, (status, body[:500], log.read_text()[-2000:])
    assert json.loads(body)["outcome"] == "outcome_unknown"
    assert took < 12
    assert "WORKER TIMEOUT" not in log.read_text()
    assert outcomes(record["id"]) == ["outcome_unknown"]
    audit_verifies()


# ---- a broker restart while a lookup runs ------------------------------------------------------------


def test_a_redis_restart_while_a_lookup_runs_does_not_take_the_worker_down(
    celery_worker: Worker, measure_server: MeasureServer, tmp_path: Path
) -> None:
    import threading

    redis = ScratchRedis(tmp_path, ["--appendonly", "yes", "--appendfsync", "always"])
    redis.start()
    worker = Worker(
        env={**celery_worker.env, "REDIS_URL": redis.url},
        queue=celery_worker.queue,
        log_dir=tmp_path,
        concurrency=2,
    )
    release = threading.Event()
    running = threading.Event()

    def balance(args: dict[str, Any]) -> float:
        running.set()
        release.wait(timeout=30)
        return 2500.0

    try:
        worker.start()
        measure_server.answer("bank.balance", balance)
        agent = catalog(measure_server, timeout_s=20)
        with celery_broker(redis.url, worker.queue):
            record = agent.submit(transfer_request()).json()
            assert running.wait(timeout=15), "the lookup never reached the measure server"
            redis.stop_graceful()  # a restart of the broker, its queue kept (append-only file)
            redis.start()
            release.set()
            final = settled(agent, record["id"], timeout=30, worker=worker)
        alive = worker.proc is not None and worker.proc.poll() is None
    finally:
        release.set()
        worker.stop()
        redis.stop()

    assert alive, log_tail(worker.log)
    assert "Unrecoverable error" not in log_tail(worker.log, chars=10**7)
    assert final["verdict"] == "execute", final["reasons"]
    observations = models.Observation.objects.filter(execution_id=record["id"])
    assert [(o.value, o.error) for o in observations] == [(2500.0, None)]
    audit_verifies()
