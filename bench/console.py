"""Console render times, server-side: the review page of a 60-slot execution, the held-executions queue
with 10,000 executions waiting (unfiltered, searched, filtered and sorted) and the recently decided. Prints
p50/p99 per page and the number of SQL queries each one makes.

    .venv/bin/python bench/console.py                     # 10,000 held executions, 60 slots, 200 runs each
    .venv/bin/python bench/console.py --held 20000 --runs 500

Self-contained: creates a scratch PostgreSQL database (dropped first if it exists, dropped again at the end
unless --keep), migrates it, and builds its data with the engine and the services: the 60-slot execution is
preflighted for real (a tool with 52 arguments, some confirmed, some unanswered, some proposed without a
source), then answered, approved and edited so its history has a voided approval to show. The 10,000 held
executions are copies of real records inserted in bulk (hold / ask / measure, every route and gap class,
parallel pairs of one conversation, each with its own one-line summary), with 2,000 decided ones (rejected,
expired, granted after a hold), and ANALYZEd as production statistics would be.

Each page is requested through Django's test client in this process — the whole request: middleware,
session, the view's queries, template rendering — so the figure is the server's time, without a network.
Target: <= 100 ms each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # last: this file's own name would shadow the console package

from machine import speed_line  # noqa: E402

TARGET_MS = 100.0
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
ARGS = 52  # + 4 fixed slots + 2 conditions + 2 approvals = 60 slots


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def wide_tool() -> dict[str, Any]:
    props = {f"field_{i:02d}": {"type": "string"} for i in range(ARGS)}
    return {
        "name": "open_account",
        "description": "Open a business account with every detail the bank asks for.",
        "inputSchema": {"type": "object", "properties": props, "required": sorted(props)},
        "x-preflight": {
            "state_change": "a new account is opened",
            "slots": {
                f"field_{i:02d}": {"sources": ["user_answer", "instruction"], "confirm": {"by": "approver"}}
                for i in range(6)
            },
            "conditions": [
                {"id": "distinct_names", "check": "arg.field_00 != arg.field_01", "on_false": "block"},
                {"id": "has_country", "check": "size(arg.field_02) > 0", "on_false": "hold"},
            ],
            "extra_approval": [
                {"id": "compliance", "when": "arg.field_03 != ''"},
                {"id": "second_pair_of_eyes"},
            ],
            "notices": ["Opening an account starts a KYC review."],
        },
    }


def wide_request() -> dict[str, Any]:
    values = {f"field_{i:02d}": f"value-{i:02d}-{'x' * (i % 7)}" for i in range(ARGS)}
    text = "Open the account with " + ", ".join(f"{k} {v}" for k, v in values.items()) + ", right now."
    candidates: dict[str, Any] = {}
    for i, (key, value) in enumerate(values.items()):
        if i % 13 == 12:
            continue  # never said: asked
        start = text.index(value)
        pointer = {"turn": 0, "start": start, "end": start + len(value)}
        candidates[key] = {"value": value} if i % 11 == 10 else {"value": value, "pointer": pointer}
    action = text.index("Open")
    now = text.index("right now")
    return {
        "server": "bench",
        "tool": "open_account",
        "principal": "user:alice",
        "conversation": [
            {"role": "user", "content": text, "trusted": True},
            {"role": "tool", "content": "Registry lookup: " + "; ".join(values.values()), "trusted": False},
        ],
        "candidates": candidates,
        "action_name": {"turn": 0, "start": action, "end": action + 4},
        "timing": {"mode": "immediate", "pointer": {"turn": 0, "start": now, "end": now + 9}},
    }


def prepare(db: str, held: int, decided: int) -> dict[str, Any]:
    admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{db}"')
    keys = tempfile.mkdtemp(prefix="bench-console-")
    os.environ.update(
        {
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}",
            "PREFLIGHT_SECRET_KEY": "bench-only-not-a-secret",
            "PREFLIGHT_ALLOWED_HOSTS": "testserver",
            "PREFLIGHT_SIGNING_KEY_PATH": f"{keys}/grant_signing_key.pem",
            "PREFLIGHT_LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
    )
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from console import models
    from console.demo import review_data
    from console.models import record_summary
    from console.services.catalog import catalog_import
    from console.services.executions import execution_answer, execution_create
    from console.services.review import approval_create, execution_reviewer_answer
    from preflight.approvals import value_digest

    call_command("migrate", verbosity=0)
    approver = User.objects.create_user("carol")
    approver.groups.add(Group.objects.get_or_create(name="approver")[0])

    # The 60-slot execution, preflighted for real, with a history worth showing.
    catalog_import(server="bench", tools=[wide_tool()], annotations_trusted=True, actor="bench")
    wide = execution_create(body=wide_request(), token=None, actor="bench")
    approval_create(
        execution_id=wide.pk,
        slot_key="arg:field_00",
        value_digest_seen=value_digest("value-00-"),
        approver=approver,
    )
    execution_reviewer_answer(
        execution_id=wide.pk, slot_key="arg:field_00", value="value-00-edited", reviewer=approver
    )
    execution_reviewer_answer(
        execution_id=wide.pk, slot_key="arg:field_12", value="value-12-answered", reviewer=approver
    )
    wide.refresh_from_db()
    slots = len(models.PreflightRecord.objects.get(execution=wide, seq=wide.records).record["slots"])

    # 10,000 held executions: copies of real records (each verdict, each route), inserted in bulk.
    from config import celery_app
    from console import tasks

    review_data.register_bank()
    celery_app.conf.task_always_eager = True  # lookups in this process: nothing goes to a shared broker
    samples = []
    for kwargs, lookups in (
        ({}, True),  # ask: a missing account, an unverified memo
        ({"from_account": review_data.ALICE_MAIN, "memo": None}, False),  # measure: the lookup stays pending
        # hold: the user confirms the recipient and consents (below); the call awaits an approver's approval
        ({"memo": "rent", "principal": "user:held"}, True),
    ):
        dispatch = tasks.dispatch_lookups
        if not lookups:
            tasks.dispatch_lookups = lambda *a, **k: None  # type: ignore[assignment]
        try:
            body = review_data.transfer_request(**kwargs)
            execution = execution_create(body=body, token=None, actor="bench")
        finally:
            tasks.dispatch_lookups = dispatch  # type: ignore[assignment]
        if kwargs.get("principal") == "user:held":
            # As the review tests settle it: the memo and the account, then the confirmation and consent.
            for answers in (
                {"arg:memo": "rent", "arg:from_account": review_data.ALICE_MAIN},
                {"confirm:arg:to_account": True, "consent:call": True},
            ):
                execution_answer(
                    execution_id=execution.pk,
                    answers=answers,
                    answered_by=execution.principal,
                    channel="agent",
                    actor="bench",
                )
        execution.refresh_from_db()
        row = models.PreflightRecord.objects.get(execution=execution, seq=execution.records)
        samples.append((execution, row))
    assert [row.verdict for _, row in samples] == ["ask", "measure", "hold"], [r.verdict for _, r in samples]
    now = timezone.now()
    executions, record_rows = [], []
    for i in range(held):
        sample, row = samples[i % len(samples)]
        request = dict(sample.request, principal=f"user:p{i // 2}")  # pairs share a conversation
        routes, gaps, unknown = record_summary(row.record)
        execution = models.Execution(
            principal=request["principal"],
            contract=sample.contract,
            request=request,
            verdict=row.verdict,
            records=1,
            conversation_key=models.conversation_key(request["principal"], request),
            routes=routes,
            gap_classes=gaps,
            unknown_count=unknown,
            # Each summary its own (an invoice number), so a search narrows as it would in production.
            summary=f"{sample.summary} (invoice {i:05d})"[:250],
        )
        executions.append(execution)
    # Decided executions (each of them waited on a hold first): rejected, expired, granted in turn.
    hold_sample, hold_row = samples[2]
    for i in range(decided):
        request = dict(hold_sample.request, principal=f"user:d{i}")
        kind = ("rejected", "expired", "granted")[i % 3]
        routes, gaps, unknown = record_summary(hold_row.record)
        executions.append(
            models.Execution(
                principal=request["principal"],
                contract=hold_sample.contract,
                request=request,
                verdict="execute" if kind == "granted" else "block",
                records=1,
                conversation_key=models.conversation_key(request["principal"], request),
                rejected_at=now if kind == "rejected" else None,
                expired_at=now if kind == "expired" else None,
                summary=f"{hold_sample.summary} (decided {i:05d})"[:250],
            )
        )
    models.Execution.objects.bulk_create(executions, batch_size=1000)
    # created_at is auto_now_add: spread the ages afterwards (the queue sorts and filters by them).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE console_execution SET created_at = %s - (random() * interval '3 days') WHERE records = 1",
            [now],
        )
        cursor.execute(
            "UPDATE console_execution SET updated_at = created_at + (random() * interval '1 hour'),"
            " rejected_at = CASE WHEN rejected_at IS NULL THEN NULL ELSE created_at END,"
            " expired_at = CASE WHEN expired_at IS NULL THEN NULL ELSE created_at END"
            " WHERE records = 1 AND verdict NOT IN ('hold', 'ask', 'measure')"
        )
    for i, execution in enumerate(executions):
        _, row = samples[i % len(samples)] if i < held else (hold_sample, hold_row)
        routes, gaps, unknown = record_summary(row.record)
        record_rows.append(
            models.PreflightRecord(
                execution=execution,
                seq=1,
                contract=row.contract,
                verdict=row.verdict,
                record=row.record,
                record_digest=row.record_digest,
                payload_digest=row.payload_digest,
                checklist_version=row.checklist_version,
                trigger="create",
                routes=routes,
                gap_classes=gaps,
                unknown_count=unknown,
            )
        )
    models.PreflightRecord.objects.bulk_create(record_rows, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # what autovacuum does to a table this size soon after
    held_now = models.Execution.objects.filter(verdict__in=("hold", "ask", "measure")).count()
    decided_now = models.Execution.objects.exclude(verdict__in=("hold", "ask", "measure")).count()
    return {
        "decided": decided_now,
        "wide": wide,
        "slots": slots,
        "held": held_now,
        "approver": approver,
        "since": now - timedelta(days=3),
    }


def measure(fetch: Callable[[], Any], runs: int) -> tuple[list[float], int, int]:
    from django.db import connection

    for _ in range(5):
        fetch()  # warm: template loading, plan caches, the engine's compiled contracts
    queries = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = fetch()
    assert response.status_code == 200, response.status_code
    times, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fetch()
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
    return times, cpu, len(queries), len(response.content)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held", type=int, default=10_000, help="held executions in the queue")
    parser.add_argument("--decided", type=int, default=2_000, help="decided executions (that had waited)")
    parser.add_argument("--runs", type=int, default=200, help="timed requests per page")
    parser.add_argument("--db", default="preflight_bench_console")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()

    print(f"preparing {args.held} held executions and a 60-slot execution in {args.db} ...", flush=True)
    started = time.perf_counter()
    try:
        data = prepare(args.db, args.held, args.decided)
        print(
            f"ready in {time.perf_counter() - started:.1f} s: {data['held']} held executions, "
            f"{data['decided']} decided, "
            f"review page of {data['slots']} slots",
            flush=True,
        )
        from django.test import Client

        client = Client()
        client.force_login(data["approver"])
        wide = data["wide"]
        pages = [
            ("review page, 60 slots", lambda: client.get(f"/executions/{wide.pk}/")),
            (
                "review page, htmx partial",
                lambda: client.get(f"/executions/{wide.pk}/", HTTP_HX_REQUEST="true"),
            ),
            ("queue, first page", lambda: client.get("/executions/")),
            ("queue, htmx refresh", lambda: client.get("/executions/", HTTP_HX_REQUEST="true")),
            ("queue, route=measure", lambda: client.get("/executions/", {"route": "measure"})),
            ("queue, last page", lambda: client.get("/executions/", {"page": 10_000})),
            # One invoice among 10,000 (a summary word), and a word most summaries share.
            ("queue, search 'invoice 04217'", lambda: client.get("/executions/", {"q": "invoice 04217"})),
            ("queue, search 'p421'", lambda: client.get("/executions/", {"q": "p421"})),
            ("queue, search common word", lambda: client.get("/executions/", {"q": "invoice"})),
            (
                "queue, route=hold newest",
                lambda: client.get("/executions/", {"route": "hold", "sort": "newest"}),
            ),
            ("recently decided", lambda: client.get("/executions/decided/")),
            ("decided, search", lambda: client.get("/executions/decided/", {"q": "decided 01234"})),
        ]
        # Wall time is what a person waits for; CPU time is this process's own work (Python, templates),
        # which other load on the machine inflates far less. Both per request, in milliseconds.
        print(speed_line())
        print(f"load average before: {loadavg()} on {os.cpu_count()} cpus")
        heads = ("p50 ms", "p99 ms", "max ms", "cpu p50", "queries", "bytes")
        print(f"\n{'page':<32} " + " ".join(f"{h:>8}" for h in heads))
        worst = 0.0
        for name, fetch in pages:
            times, cpu, queries, size = measure(fetch, args.runs)
            p50, p99 = statistics.median(times), pct(times, 0.99)
            worst = max(worst, p99)
            row = f"{name:<32} {p50:8.1f} {p99:8.1f} {max(times):8.1f} {statistics.median(cpu):8.1f}"
            print(f"{row} {queries:8d} {size:8d}")
        verdict = "ok" if worst <= TARGET_MS else "OVER TARGET"
        print(f"load average after: {loadavg()}")
        print(speed_line())
        print(f"\nworst p99 {worst:.1f} ms (target <= {TARGET_MS:.0f} ms): {verdict}")
        return 0 if worst <= TARGET_MS else 1
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            admin(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
