"""Audit appends per second against one PostgreSQL, with 1, 2, 4 and 8 writer processes.

    .venv/bin/python bench/audit.py              # 8 s per point
    .venv/bin/python bench/audit.py --seconds 4 --writers 1,2,4,8,16

Every action appends to one hash chain under one lock (console/audit.py: a transaction-scoped advisory lock,
held from the append's INSERT to its COMMIT). This measures where that serialization point caps: each
writer process loops over transactions that append one event with a preflight's body, as a preflight does,
for a new execution each; then the same with the chain split in 8 by execution (PREFLIGHT_AUDIT_CHAINS=8,
each chain its own lock); and the same loop with the chain taken out (the same row into a plain table, no
lock) says what the database itself would take. A PostgreSQL cluster of its own (bench/scratch.py),
defaults (fsync and synchronous commit on), on this machine's disk; the chains are verified at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import speed_line  # noqa: E402
from scratch import ScratchPostgres  # noqa: E402

CHAINS = 8
BODY = {
    "seq": 1,
    "trigger": "create",
    "verdict": "execute",
    "server": "bank",
    "tool": "transfer_funds",
    "contract_digest": "sha256:" + "a" * 64,
    "record_digest": "sha256:" + "b" * 64,
    "payload_digest": "sha256:" + "c" * 64,
    "checklist_version": "sha256:" + "d" * 64,
    "unknown_count": 0,
}


def writer(mode: str, seconds: float, start_at: float) -> None:
    """One writer process: transactions back to back until the time is up; prints how many committed."""
    import django

    django.setup()
    from django.db import connection, transaction

    from console.audit import audit_append, audit_batch

    while time.time() < start_at:
        time.sleep(0.001)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        execution_id = uuid.uuid4()
        if mode.startswith("chain"):
            with transaction.atomic(), audit_batch():
                audit_append(kind="preflight", execution_id=execution_id, body=BODY)
        else:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO bench_plain (execution_id, body) VALUES (%s, %s::jsonb)",
                    [str(execution_id), __import__("json").dumps(BODY)],
                )
        n += 1
    print(n, flush=True)


def point(env: dict[str, str], mode: str, writers: int, seconds: float) -> float:
    start_at = time.time() + 2.0  # every writer set up before any starts
    if mode == "chains":  # the chain split by execution (settings.PREFLIGHT_AUDIT_CHAINS)
        env = {**env, "PREFLIGHT_AUDIT_CHAINS": str(CHAINS)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--writer",
                mode,
                "--seconds",
                str(seconds),
                "--start-at",
                str(start_at),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(writers)
    ]
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 60)
        total += int(out.strip().splitlines()[-1])
    return total / seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--writers", default="1,2,4,8")
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        writer(args.writer, args.seconds, args.start_at)
        return 0

    print(speed_line())
    print(f"cores: {os.cpu_count()}")
    pg = ScratchPostgres()
    try:
        pg.create()
        env = {
            **os.environ,
            "DATABASE_URL": pg.url,
            "PREFLIGHT_SECRET_KEY": "bench-only-not-a-secret",
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
        os.environ.update(
            {k: env[k] for k in ("DATABASE_URL", "PREFLIGHT_SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
        )
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection, connections

        call_command("migrate", verbosity=0, interactive=False)
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE bench_plain (id bigserial PRIMARY KEY, execution_id uuid, body jsonb)"
            )
        connections.close_all()
        print(f"writers | one chain appends/s | {CHAINS} chains appends/s | plain inserts/s (no chain)")
        for n in [int(x) for x in args.writers.split(",")]:
            chain = point(env, "chain", n, args.seconds)
            chains = point(env, "chains", n, args.seconds)
            plain = point(env, "plain", n, args.seconds)
            print(f"{n:7d} | {chain:20.0f} | {chains:19.0f} | {plain:26.0f}", flush=True)
        from django.test import override_settings

        from console.audit import verify_all

        with override_settings(PREFLIGHT_AUDIT_CHAINS=CHAINS):
            report = verify_all()
        print(f"chain: {report.events} events, {'ok' if report.ok else report.broken}")
        connections.close_all()
        return 0 if report.ok else 1
    finally:
        pg.destroy()


if __name__ == "__main__":
    raise SystemExit(main())
