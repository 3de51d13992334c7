"""Lookups over dependency levels: 20 measures of 100 ms each, 10 per level, depth 2.

    .venv/bin/python bench/lookups.py                   # both paths, 5 measured runs each
    .venv/bin/python bench/lookups.py --warmup 1        # a worker just started (8 warm-up runs by default)
    .venv/bin/python bench/lookups.py --runs 10 --workers 2 --concurrency 5
    PREFLIGHT_LOOKUPS_PER_TASK=1 .venv/bin/python bench/lookups.py   # one Celery task per lookup
    .venv/bin/python bench/lookups.py --runs 10 --pool prefork --concurrency 10
    .venv/bin/python bench/lookups.py --engine-only     # no PostgreSQL / Redis needed

The tool: 10 accounts, each an argument settled only by observation (level 1: `owner_i`), and 10 balances,
one per account, each looked up with the account that level 1 observed (level 2: `balance_i`), read by 10
conditions. Every lookup takes 100 ms. Run one after the other that is 20 x 100 ms = 2 s; run frontier by
frontier it is depth x slowest = 0.2 s plus the overhead of each round. Target: <= 1.2 x depth x slowest
= 0.24 s, from submission to the final verdict.

Two paths, both printed:

- engine: `preflight.runner.settle`, the in-process runner (a thread per lookup of the frontier).
- celery: the real server path. A scratch PostgreSQL database (made, migrated, dropped at the end), the
  agent API in this process (POST /api/v1/executions), Redis, and `celery -A config worker` processes
  running HTTP measures against a loopback measure service, a process of its own as a real one would be,
  that answers each lookup after 100 ms. One worker by default, a threads pool of 10 (the machine has 2
  cores and lookups mostly wait). The server's settings are the worker's: PREFLIGHT_LOOKUPS_PER_TASK (10 by
  default: a frontier of 10 is one task, see console/tasks.py `_lookup_tasks`) comes from the environment.
  The wall time runs from just before the POST to the COMMIT of the final record, as this process hears of it:
  a trigger in the scratch database NOTIFYs each record at its commit, and this process LISTENs, blocked, with
  no polling (a query from here while the worker moves between levels took a core from it). Until session 5
  it ran to the final record's created_at, stamped as the worker builds the record, a round trip before its
  COMMIT: that figure is printed too. It also prints the CPU one run costs the workers and this process:
  steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]

from machine import speed_line, wakeup_line  # noqa: E402

N = 10  # lookups per level
DEPTH = 2
LOOKUP_S = 0.100
SEQUENTIAL_S = 2 * N * LOOKUP_S
TARGET_S = 1.2 * DEPTH * LOOKUP_S
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CUSTOMER = "C-1001"
# Runs made before the counted ones: what is measured is a worker that has been serving for a while. A new
# worker's first runs are slower; among other things, each of its threads has a database connection of its
# own, and psycopg prepares a statement on a connection only at its 6th execution there. Counted after 8
# runs rather than 1, the p50 was 2-4 ms lower in 3 of 3 interleaved pairs (231/229/230 against 233/234/233).
WARMUP_RUNS = 8


def tool() -> dict[str, Any]:
    accounts = [f"acct_{i}" for i in range(N)]
    return {
        "name": "sweep",
        "description": "Sweep the customer's accounts into one.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "customer": {"type": "string"},
                "amount": {"type": "number"},
                **{a: {"type": "string"} for a in accounts},
            },
            "required": ["customer", "amount", *accounts],
        },
        "x-preflight": {
            "state_change": "money moves from every account of the customer",
            "slots": {a: {"sources": ["observed"], "measure": f"owner_{i}"} for i, a in enumerate(accounts)},
            "measures": {
                **{
                    f"owner_{i}": {"lookup": "bench.account", "args": {"customer": "arg:customer", "n": i}}
                    for i in range(N)
                },
                **{
                    f"balance_{i}": {"lookup": "bench.balance", "args": {"account": f"arg:acct_{i}"}}
                    for i in range(N)
                },
            },
            "conditions": [
                {"id": f"covered_{i}", "check": f"measure.balance_{i} >= arg.amount", "on_false": "hold"}
                for i in range(N)
            ],
        },
    }


def request_body() -> dict[str, Any]:
    text = f"Sweep 10 EUR from every account of customer {CUSTOMER} now."

    def span(part: str) -> dict[str, int]:
        start = text.index(part)
        return {"turn": 0, "start": start, "end": start + len(part)}

    return {
        "server": "bench",
        "tool": "sweep",
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {
            "customer": {"value": CUSTOMER, "pointer": span(CUSTOMER)},
            "amount": {"value": 10, "pointer": span("10")},
        },
        "action_name": span("Sweep"),
        "timing": {"mode": "immediate", "pointer": span("now")},
    }


def account_of(args: dict[str, Any]) -> str:
    return f"DE{args['n']:020d}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def verdict_line(name: str, walls: list[float]) -> str:
    p50 = statistics.median(walls)
    ok = "meets" if p50 <= TARGET_S else "MISSES"
    return (
        f"  {name:<34} p50 {ms(p50)}  min {ms(min(walls))}  max {ms(max(walls))}"
        f"  ({SEQUENTIAL_S / p50:4.1f}x faster than sequential; {ok} the target)"
    )


# ---- engine: the in-process runner --------------------------------------------------------------------


def engine_runs(runs: int) -> list[float]:
    from preflight import Evidence, compile_plan, contract_from_mcp
    from preflight.request import parse_request
    from preflight.runner import settle

    plan = compile_plan(contract_from_mcp("bench", tool(), annotations_trusted=False))
    request = parse_request(request_body())

    def lookup(fn: Any) -> Any:
        def run(args: Any) -> Any:
            time.sleep(LOOKUP_S)
            return fn(dict(args))

        return run

    registry = {"bench.account": lookup(account_of), "bench.balance": lookup(lambda args: 1000)}
    walls = []
    for i in range(runs + 1):
        started = time.perf_counter()
        record, _ = settle(plan, request, Evidence(now=datetime.now(UTC)), registry)
        wall = time.perf_counter() - started
        assert record.verdict == "execute", record.reasons
        if i:  # the first run warms up imports and thread start-up
            walls.append(wall)
    return walls


# ---- the measure service: a process of its own ---------------------------------------------------------


def serve_measures() -> None:
    """`--serve-measures`: answer lookups after LOOKUP_S (POST /), list the calls so far (GET /calls) and
    forget them (DELETE /calls). Prints its port, then serves until its stdin closes.

    asyncio, one thread: a frontier's lookups arrive together, and a server that starts a thread per
    connection and parses each request with http.server (~0.3 ms of CPU each, under one GIL) started the
    10th lookup's 100 ms ~3 ms after the first, a delay of the stand-in, not of the system measured.

    Its loop waits in select(), not epoll: asyncio wakes for a timer through the selector's timeout, which
    epoll takes in whole milliseconds, rounded up, so `asyncio.sleep(0.1)` held a lookup 101.0-101.2 ms
    (p50, printed as the stand-in's own time), another delay of the stand-in charged to the system
    measured. select() takes microseconds, and watches a few dozen sockets here."""
    import asyncio
    import selectors

    calls: list[dict[str, Any]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # HTTP/1.1: the connection stays open for the next request unless the client asks to close it (the
        # workers keep theirs, as they would with any service).
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the client closed the connection
                method, path = head.split(b" ", 2)[:2]
                length, close = 0, False
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"connection":
                        close = b"close" in value.lower()
                body = json.loads(await reader.readexactly(length)) if length else {}
                answer: Any = {}
                if method == b"POST" and path == b"/":
                    started = time.monotonic()
                    await asyncio.sleep(LOOKUP_S)
                    args = body.get("args") or {}
                    value = account_of(args) if body.get("measure") == "bench.account" else 1000
                    calls.append(
                        {"measure": body.get("measure"), "started": started, "ended": time.monotonic()}
                    )
                    answer = {"value": value, "observed_at": datetime.now(UTC).isoformat()}
                elif method == b"GET":
                    answer = calls
                elif method == b"DELETE":
                    calls.clear()
                raw = json.dumps(answer).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + (b"Connection: close\r\n" if close else b"")
                    + f"Content-Length: {len(raw)}\r\n\r\n".encode()
                    + raw
                )
                await writer.drain()
                if close:
                    return
        finally:
            writer.close()

    async def main() -> None:
        # A large backlog: with the default, a frontier connecting at once lost SYNs (1 s retries).
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=128)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())) as runner:
        runner.run(main())


@dataclass(frozen=True)
class Call:
    measure: str
    started: float  # time.monotonic(), the same clock in every process of this machine
    ended: float


class MeasureService:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-measures"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/"

    def _call(self, method: str) -> Any:
        with urllib.request.urlopen(urllib.request.Request(self.url + "calls", method=method)) as answer:
            return json.loads(answer.read())

    def reset(self) -> None:
        self._call("DELETE")

    def calls_of(self, measure: str) -> list[Call]:
        return [
            Call(c["measure"], c["started"], c["ended"]) for c in self._call("GET") if c["measure"] == measure
        ]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(5)


# ---- celery: API + PostgreSQL + Redis + worker processes ---------------------------------------------


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def services_up(redis_url: str) -> str | None:
    """Why the Celery path cannot run here, or None."""
    try:
        import psycopg

        psycopg.connect(PG_ADMIN_URL, connect_timeout=3).close()
    except Exception as exc:
        return f"PostgreSQL at {PG_ADMIN_URL} does not answer ({exc})"
    try:
        from redis import Redis

        Redis.from_url(redis_url, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"Redis at {redis_url} does not answer ({exc})"
    return None


def celery_runs(
    runs: int, pool: str, workers: int, concurrency: int, redis_url: str, warmup: int = WARMUP_RUNS
) -> tuple[list[float], list[str]]:
    db = f"preflight_bench_lookups_{os.getpid()}"
    queue = f"bench-lookups-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-lookups-"))
    key = tmp / "grant_signing_key.pem"
    env = {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}",
        "REDIS_URL": redis_url,
        "PREFLIGHT_CELERY_QUEUE": queue,
        "PREFLIGHT_SECRET_KEY": "bench-only-not-a-secret",
        "PREFLIGHT_SIGNING_KEY_PATH": str(key),
        "PREFLIGHT_ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
        "PREFLIGHT_EAGER_TASKS": "false",
        "PREFLIGHT_HTTP_ALLOW": "127.0.0.1,localhost",  # the loopback measure server, on any port
        "PREFLIGHT_LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{db}"')
    os.environ.update(env)
    started_workers: list[Any] = []
    server = None
    commits: Commits | None = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from integration_support import Worker
        from rest_framework.test import APIClient

        from console import models
        from console.services.catalog import catalog_import
        from console.services.measures import measure_create
        from console.services.tokens import agent_token_create
        from preflight import GrantSigner

        key.write_bytes(GrantSigner.generate().to_pem())
        call_command("migrate", verbosity=0, interactive=False)
        commits = Commits(f"postgresql://postgres@127.0.0.1:5432/{db}")
        server = MeasureService()
        catalog_import(server="bench", tools=[tool()], annotations_trusted=False, actor="bench")
        for name in ("bench.account", "bench.balance"):
            measure_create(name=name, kind="http", url=server.url, timeout_s=5, actor="bench")
        _, token = agent_token_create(name="bench")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        # This process serves the API as a web worker would, and so starts as config/wsgi.py does.
        from config.startup import freeze_startup_objects, load_request_path

        load_request_path()
        freeze_startup_objects()

        worker_env = {
            **os.environ,
            **env,
            "PREFLIGHT_LOG_LEVEL": "INFO",
        }
        for n in range(workers):
            worker = Worker(env=worker_env, queue=queue, log_dir=tmp, concurrency=concurrency, pool=pool)
            worker.started = n  # its node name and log file
            worker.start()
            started_workers.append(worker)
        pids = [w.proc.pid for w in started_workers]

        def cpu_now() -> tuple[float, float]:
            return sum(cpu_seconds(pid) for pid in pids), time.process_time()

        cpu_from = cpu_now()

        body = request_body()
        walls: list[float] = []
        timelines: list[tuple[float, str]] = []
        stand_in: list[float] = []  # how long the measure service took over each lookup it answered
        for i in range(runs + warmup):
            server.reset()
            if i == warmup:
                cpu_from = cpu_now()
            started_at, started = datetime.now(UTC), time.monotonic()
            response = client.post("/api/v1/executions", body, format="json")
            posted = time.monotonic()
            assert response.status_code == 201, response.content
            execution_id = response.json()["id"]
            heard = commits.wait(execution_id, seq=3, deadline=time.monotonic() + 15)
            if heard is None:
                raise SystemExit(f"no final verdict within 15 s; worker logs in {tmp}")
            rows = list(models.PreflightRecord.objects.filter(execution_id=execution_id).order_by("seq"))
            assert [r.verdict for r in rows] == ["measure", "measure", "execute"], [r.verdict for r in rows]
            wall = heard - started
            built = (rows[-1].created_at - started_at).total_seconds()
            level1 = server.calls_of("bench.account")
            level2 = server.calls_of("bench.balance")
            assert len(level1) == len(level2) == N
            first1, spread1, last1 = _window(level1, started)
            first2, spread2, last2 = _window(level2, started)
            timeline = (
                f"POST answered {ms(posted - started)}\n"
                f"      level 1: starts {ms(first1)} .. {ms(spread1)}, last answer {ms(last1)}\n"
                f"      level 2: starts {ms(first2)} .. {ms(spread2)}, last answer {ms(last2)}"
                f"  (gap after level 1: {ms(first2 - last1)})\n"
                f"      final record built {ms(built)}, committed {ms(wall)}"
                f"  ({ms(wall - last2)} after the last answer)"
            )
            if i >= warmup:
                walls.append(wall)
                timelines.append((wall, timeline))
                stand_in += [c.ended - c.started for c in level1 + level2]
        cpu_to = cpu_now()
        worker_cpu = (cpu_to[0] - cpu_from[0]) / max(1, runs)
        here_cpu = (cpu_to[1] - cpu_from[1]) / max(1, runs)
        timelines.sort()
        return walls, [
            timelines[len(timelines) // 2][1],
            # CPU a run costs: on a loaded machine a steadier figure than wall time. "This process" is the
            # API and the loop that waits for the verdict.
            f"CPU per run: workers {ms(worker_cpu)}, this process {ms(here_cpu)}",
            f"the measure service held each lookup p50 {ms(statistics.median(stand_in))},"
            f" max {ms(max(stand_in))} (it should be {ms(LOOKUP_S)})",
        ]
    finally:
        if commits is not None:
            commits.close()
        for worker in started_workers:
            worker.stop()
        if server is not None:
            server.stop()
        from django.db import connections

        connections.close_all()
        admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        from integration_support import forget_queue

        forget_queue(redis_url, queue)


class Commits:
    """When each preflight record's COMMIT is heard of here: a trigger in the scratch database sends a NOTIFY
    with each record, which PostgreSQL delivers when its transaction commits; this process LISTENs."""

    def __init__(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION bench_record_committed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " PERFORM pg_notify('bench_records', NEW.execution_id::text || ' ' || NEW.seq); RETURN NULL;"
                " END $$"
            )
            conn.execute(
                "CREATE TRIGGER bench_record_committed AFTER INSERT ON console_preflightrecord"
                " FOR EACH ROW EXECUTE FUNCTION bench_record_committed()"
            )
        self._listener = psycopg.connect(url, autocommit=True)
        self._listener.execute("LISTEN bench_records")
        self._heard: dict[str, float] = {}

    def wait(self, execution_id: str, *, seq: int, deadline: float) -> float | None:
        """time.monotonic() when this process heard that record `seq` of the execution committed; None if
        not by `deadline`."""
        key = f"{uuid.UUID(execution_id)} {seq}"
        while key not in self._heard:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for notify in self._listener.notifies(timeout=left, stop_after=1):
                self._heard[notify.payload] = time.monotonic()
        return self._heard[key]

    def close(self) -> None:
        self._listener.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _window(calls: list[Any], started: float) -> tuple[float, float, float]:
    """(first start, last start, last end) of some lookups, in seconds after `started`."""
    starts = [c.started - started for c in calls]
    return min(starts), max(starts), max(c.ended or 0 for c in calls) - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--warmup", type=int, default=WARMUP_RUNS, help="celery: runs made first and not counted"
    )
    parser.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=N, help="threads (or processes) per worker")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14", help="the bench's own Redis DB")
    parser.add_argument("--engine-only", action="store_true")
    parser.add_argument("--serve-measures", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_measures:
        return serve_measures()

    print(
        f"lookups: {2 * N} measures x {LOOKUP_S * 1000:.0f} ms over {DEPTH} dependency levels ({N} per level)"
    )
    print(f"  sequential sum                     {ms(SEQUENTIAL_S)}")
    print(f"  target 1.2 x depth x slowest       {ms(TARGET_S)}")
    print(speed_line())
    print(wakeup_line())
    print(verdict_line("engine (in-process runner)", engine_runs(args.runs)))
    if args.engine_only:
        return
    why = services_up(args.redis)
    if why is not None:
        print(f"  celery: skipped: {why}")
        return
    walls, timelines = celery_runs(
        args.runs, args.pool, args.workers, args.concurrency, args.redis, args.warmup
    )
    per_task = os.environ.get("PREFLIGHT_LOOKUPS_PER_TASK", "10")
    label = f"celery ({args.workers} x {args.pool} {args.concurrency}, {per_task} lookups/task)"
    print(verdict_line(label, walls))
    print(f"    {len(walls)} runs counted, after {args.warmup} made first and not counted (--warmup)")
    median, *more = timelines
    print(f"    median run: {median}")
    for line in more:
        print(f"    {line}")


if __name__ == "__main__":
    main()
