"""Fault injection on the production processes: what each fault costs and how the deployment recovers.

    .venv/bin/python bench/faults.py                  # every fault, ~4 minutes
    .venv/bin/python bench/faults.py --only redis-freeze,worker-kill

Self-contained and loopback only: a PostgreSQL cluster of its own (bench/scratch.py), a redis-server of its
own (append-only file on, as README "Run in production" recommends), and the Procfile's processes with its
commands: gunicorn with gunicorn.conf.py (serving bench/fault_app.py, the console plus a ledger tool that
this script counts), a Celery worker and beat. The machine's shared PostgreSQL and Redis are not touched.

Agents run flows in threads: submit a transfer (its balance is looked up by the worker), wait for the
verdict, run the grant. Each fault hits while flows are in flight. Per fault it prints:

- recovery: seconds from the fault's start until every flow begun before its end reached a final state
  (the API answering again comes sooner; see `api back`);
- lost: answers with a 2xx whose record is missing (a 201 with no execution, a run's 200 with no outcome
  once the sweep reconciled it);
- duplicates: ledger calls beyond one for an execution (a tool that ran twice);
- 5xx: answers of 500 or more, 503 "database unavailable" included (nothing was recorded for those);
- stuck: executions neither final nor clearly waiting at the end;
- slowest answer: the longest any API call of an affected flow waited beyond its own work (a long poll's
  wait and the tool's 1 s are taken off): how long a web worker was held.

Settings are the shipped defaults except PREFLIGHT_RUN_LOST_AFTER_S=10 (so the sweep reconciles a run whose
outcome could not be written within this bench) and a 1 s balance lookup (so lookups are in flight).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration"), str(ROOT / "bench")]

from integration_support import MeasureServer, ScratchRedis, Worker, wait_until  # noqa: E402
from machine import speed_line  # noqa: E402
from scratch import ScratchPostgres, free_port  # noqa: E402

ACCOUNT = "DE89370400440532013000"
PAYEE = "DE02120300000000202051"
LOOKUP_S = 1.0
TOOL_S = 1.0
CLIENTS = 4
FLOW_TIMEOUT_S = 150

TRANSFER: dict[str, Any] = {
    "name": "transfer",
    "description": "Move money between accounts.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "integer", "exclusiveMinimum": 0},
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


def request_body(amount: int) -> dict[str, Any]:
    text = f"Send {amount} EUR from {ACCOUNT} to {PAYEE} now."

    def span(part: str) -> dict[str, int]:
        start = text.index(part)
        return {"turn": 0, "start": start, "end": start + len(part)}

    return {
        "server": "ledger",
        "tool": "transfer",
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {
            "from_account": {"value": ACCOUNT, "pointer": span(ACCOUNT)},
            "to_account": {"value": PAYEE, "pointer": span(PAYEE)},
            "amount": {"value": amount, "pointer": span(f" {amount} ")},
        },
        "action_name": span("Send"),
        "timing": {"mode": "immediate", "pointer": span("now")},
    }


# ---- the deployment -----------------------------------------------------------------------------------


class Deployment:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.pg = ScratchPostgres()
        (tmp / "redis").mkdir()
        # With its append-only file, as production should run it: a restart keeps the queue.
        self.redis = ScratchRedis(tmp / "redis", ["--appendonly", "yes", "--appendfsync", "everysec"])
        self.measures = MeasureServer()
        self.port = free_port()
        self.web: subprocess.Popen[bytes] | None = None
        self.worker: Worker | None = None
        self.beat: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def start(self) -> str:
        self.pg.create()
        self.redis.start()
        self.measures.start()
        self.measures.answer("bank.balance", lambda args: 10**9, delay_s=LOOKUP_S)
        self.measures.answer("ledger.transfer", lambda args: {"sent": True}, delay_s=TOOL_S)
        key = self.tmp / "grant_signing_key.pem"
        self.env = {
            **os.environ,
            "DATABASE_URL": self.pg.url,
            "REDIS_URL": self.redis.url,
            "PREFLIGHT_SECRET_KEY": "bench-only-not-a-secret",
            "PREFLIGHT_ALLOWED_HOSTS": "127.0.0.1",
            "PREFLIGHT_SIGNING_KEY_PATH": str(key),
            "PREFLIGHT_RUN_LOST_AFTER_S": "10",
            "PREFLIGHT_BENCH_LEDGER_URL": self.measures.url,
            "PREFLIGHT_HTTP_ALLOW": "127.0.0.1",  # the loopback measure server
            "PREFLIGHT_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        os.environ.update(
            {
                k: self.env[k]
                for k in (
                    "DATABASE_URL",
                    "REDIS_URL",
                    "PREFLIGHT_SECRET_KEY",
                    "PREFLIGHT_SIGNING_KEY_PATH",
                    "PREFLIGHT_RUN_LOST_AFTER_S",
                    "PREFLIGHT_HTTP_ALLOW",
                )
            }
        )
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        call_command("migrate", verbosity=0, interactive=False)
        from console.services.catalog import catalog_import
        from console.services.measures import measure_create
        from console.services.tokens import agent_token_create

        catalog_import(
            server="ledger",
            tools=[TRANSFER],
            annotations_trusted=False,
            connector={"kind": "python"},
            actor="b",
        )
        measure_create(name="bank.balance", kind="http", url=self.measures.url, timeout_s=5, actor="b")
        _, token = agent_token_create(name="bench")
        connections.close_all()
        self.start_web()
        self.start_worker()
        self.start_beat()
        return token

    def _procfile(self, name: str) -> str:
        for line in (ROOT / "Procfile").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return line.split(":", 1)[1].strip()
        raise SystemExit(f"Procfile has no {name}")

    def _spawn(self, command: str, log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        bindir = str(Path(sys.executable).parent)
        out = open(self.tmp / log, "ab")  # noqa: SIM115 - the child keeps it
        return subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=ROOT,
            env={**env, "PATH": f"{bindir}:{env['PATH']}"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_web(self) -> None:
        command = self._procfile("web") + " bench.fault_app:application"
        env = {**self.env, "PORT": str(self.port), "HOST": "127.0.0.1", "WEB_CONCURRENCY": "3"}
        self.web = self._spawn(command, "web.log", env)

        def up() -> bool:
            try:
                with urllib.request.urlopen(f"{self.url}/health/live", timeout=1) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_until(up, timeout=60, what="gunicorn to serve")

    def start_worker(self) -> None:
        self.worker = Worker(env=self.env, queue="celery", log_dir=self.tmp, concurrency=10, pool="threads")
        self.worker.start(timeout=60)

    def start_beat(self) -> None:
        command = self._procfile("beat").replace(
            "${PREFLIGHT_BEAT_SCHEDULE:-/tmp/preflight-celerybeat-schedule}", str(self.tmp / "beat-schedule")
        )
        self.beat = self._spawn(command, "beat.log", self.env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for proc in (self.web, self.beat):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        if self.worker is not None:
            self.worker.stop()
        from django.db import connections

        connections.close_all()
        self.redis.stop()
        self.measures.close()
        self.pg.destroy()


# ---- agents ------------------------------------------------------------------------------------------


@dataclass
class Flow:
    amount: int
    started: float
    ended: float | None = None
    execution: str | None = None
    statuses: list[int] = field(default_factory=list)
    verdict: str | None = None
    outcome: str | None = None
    ran_2xx: bool = False
    slowest_s: float = 0.0  # the slowest answer this flow got (any call)


class Agents:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.next_amount = 1
        self.lock = threading.Lock()
        self.flows: list[Flow] = []
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def _call(self, flow: Flow, method: str, path: str, body: Any = None, timeout: float = 40) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        started = time.monotonic()
        wait = 2.0 if "wait=" in path else 0.0  # a long poll's own wait is not slowness
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                flow.statuses.append(answer.status)
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            flow.statuses.append(exc.code)
            return None
        except OSError:
            flow.statuses.append(0)  # no answer at all (connection refused, timeout)
            return None
        finally:
            took = time.monotonic() - started - (TOOL_S if path.endswith("/run") else wait)
            flow.slowest_s = max(flow.slowest_s, took)

    def one(self) -> None:
        with self.lock:
            flow = Flow(self.next_amount, time.monotonic())
            self.next_amount += 1
            self.flows.append(flow)
        deadline = flow.started + FLOW_TIMEOUT_S
        record = None
        while record is None and time.monotonic() < deadline and not self.stop.is_set():
            record = self._call(flow, "POST", "/api/v1/executions", request_body(flow.amount))
            if record is None:
                time.sleep(0.5)  # an agent retries a refused submission
        if record is None:
            flow.ended = time.monotonic()
            return
        flow.execution = record["id"]
        while (
            time.monotonic() < deadline
            and record is not None
            and record["verdict"] in ("measure", "deferred")
        ):
            got = self._call(flow, "GET", f"/api/v1/executions/{flow.execution}?wait=2")
            record = got or record
            if got is None:
                time.sleep(0.5)
        flow.verdict = record["verdict"]
        if flow.verdict == "execute":
            ran = self._call(
                flow, "POST", f"/api/v1/executions/{flow.execution}/run", {"grant": record["grant"]}
            )
            if ran is not None:
                flow.ran_2xx = True
                flow.outcome = ran["outcome"]
        flow.ended = time.monotonic()

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.one()

    def start(self, clients: int = CLIENTS) -> None:
        self.stop.clear()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=FLOW_TIMEOUT_S + 10)


# ---- faults ------------------------------------------------------------------------------------------


def postgres_down(d: Deployment, seconds: float = 6) -> None:
    d.pg.stop("fast")
    time.sleep(seconds)
    d.pg.start()


def redis_freeze(d: Deployment, seconds: float = 5) -> None:
    d.redis.freeze()
    time.sleep(seconds)
    d.redis.thaw()


def redis_restart(d: Deployment, seconds: float = 3) -> None:
    d.redis.stop_graceful()
    time.sleep(seconds)
    d.redis.start()


def worker_kill(d: Deployment) -> None:
    assert d.worker is not None
    d.worker.kill()  # SIGKILL, mid-lookup: nothing acked
    d.worker.start(timeout=60)  # its supervisor starts a new one at once


FAULTS: dict[str, tuple[str, Callable[[Deployment], None]]] = {
    "postgres-down": (
        "PostgreSQL stopped 6 s (fast shutdown) while runs and lookups were in flight",
        postgres_down,
    ),
    "redis-freeze": ("Redis frozen 5 s (SIGSTOP) while executions were submitted", redis_freeze),
    "redis-restart": ("Redis stopped 3 s and started again (append-only file on)", redis_restart),
    "worker-kill": (
        "the Celery worker SIGKILLed mid-lookup, a new one started at once (default visibility timeout)",
        worker_kill,
    ),
}


def check(d: Deployment, flows: list[Flow]) -> dict[str, int]:
    from django.db import connections

    from console import models

    connections.close_all()
    ids = [f.execution for f in flows if f.execution]
    known = set(map(str, models.Execution.objects.filter(pk__in=ids).values_list("pk", flat=True)))
    lost = sum(1 for f in flows if f.execution and f.execution not in known)
    ran = [f.execution for f in flows if f.ran_2xx]
    ended = set(
        map(
            str,
            models.Outcome.objects.filter(
                execution_id__in=ran, status__in=("executed", "failed", "outcome_unknown")
            ).values_list("execution_id", flat=True),
        )
    )
    lost += sum(1 for e in ran if e not in ended)
    calls = Counter(c.args.get("amount") for c in d.measures.calls_of("ledger.transfer"))
    duplicates = sum(n - 1 for n in calls.values() if n > 1)
    verdicts = dict(models.Execution.objects.filter(pk__in=ids).values_list("pk", "verdict"))
    stuck = sum(1 for v in verdicts.values() if v in ("measure",))
    fivexx = sum(1 for f in flows for s in f.statuses if s >= 500)
    noanswer = sum(1 for f in flows for s in f.statuses if s == 0)
    unknown = sum(1 for f in flows if f.outcome == "outcome_unknown")
    return {
        "lost": lost,
        "duplicates": duplicates,
        "5xx": fivexx,
        "no answer": noanswer,
        "stuck": stuck,
        "outcome_unknown": unknown,
        "flows": len(flows),
    }


def run_fault(d: Deployment, agents: Agents, name: str) -> dict[str, Any]:
    label, inject = FAULTS[name]
    agents.start()
    time.sleep(4)  # flows in flight
    fault_start = time.monotonic()
    inject(d)
    fault_end = time.monotonic()
    time.sleep(3)  # flows started during and right after the fault
    agents.finish()
    flows = [f for f in agents.flows if f.started <= fault_end + 3]
    affected = [f for f in flows if f.ended is None or f.ended >= fault_start]
    last = max((f.ended or time.monotonic()) for f in affected) if affected else fault_end
    back = [f for f in flows if f.started >= fault_start and f.statuses and 200 <= f.statuses[0] < 300]
    api_back = min((f.started for f in back), default=fault_end) - fault_start
    # The sweep reconciles runs whose outcome could not be written (PREFLIGHT_RUN_LOST_AFTER_S + a sweep).
    time.sleep(22 if name == "postgres-down" else 0)
    result = check(d, flows)
    agents.flows.clear()
    return {
        "fault": name,
        "what": label,
        "recovery_s": round(last - fault_start, 1),
        "api_back_s": round(max(0.0, api_back), 1),
        "slowest_answer_s": round(max((f.slowest_s for f in affected), default=0.0), 2),
        **result,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--keep", action="store_true", help="keep the logs (printed: their directory)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(FAULTS)
    print(speed_line())
    with tempfile.TemporaryDirectory(prefix="preflight-faults-", delete=not args.keep) as tmp:
        if args.keep:
            print(f"logs: {tmp}")
        d = Deployment(Path(tmp))
        try:
            token = d.start()
            agents = Agents(d.url, token)
            agents.start()  # warm-up flows, not counted
            time.sleep(5)
            agents.finish()
            agents.flows.clear()
            rows = [run_fault(d, agents, name) for name in names]
        finally:
            d.stop()
    header = (
        "fault",
        "recovery_s",
        "api_back_s",
        "slowest_answer_s",
        "flows",
        "lost",
        "duplicates",
        "5xx",
        "no answer",
        "outcome_unknown",
        "stuck",
    )
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    for row in rows:
        print(f"  {row['fault']}: {row['what']}")
    return 0 if all(r["lost"] == 0 and r["duplicates"] == 0 and r["stuck"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
