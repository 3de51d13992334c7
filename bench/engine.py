"""Engine throughput: preflights per second on one core, and p50/p99 latency.

    .venv/bin/python bench/engine.py            # full run
    .venv/bin/python bench/engine.py --quick    # fewer iterations
    .venv/bin/python bench/engine.py --profile  # also cProfile the synthetic tool and print the hotspots
    .venv/bin/python bench/engine.py --repeat 5 # (b) as the best of 5 runs: steadier on a shared machine

(a) every tool of the shared catalogs, each with a grounded request built from its schema (every required
    argument verified by a pointer into a trusted user turn, or answered): compile once, evaluate many.
(b) a synthetic 10-slot tool: 10 required arguments, all verified by pointers, one CEL condition that reads a
    measure already observed. Target: >= 5,000 preflights/s on one core.

Single-threaded on purpose: the figures are per core.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "preflight")]

from catalog_util import (  # noqa: E402
    CATALOGS,
    EXTENSION,
    NOW,
    catalog_tools,
    catalogs_present,
    grounded_request,
)
from machine import speed_line  # noqa: E402

from preflight import (  # noqa: E402
    Candidate,
    Evidence,
    ExecutionRequest,
    Observation,
    Span,
    Timing,
    Turn,
    compile_plan,
    contract_from_mcp,
    preflight,
)
from preflight.canonical import digest  # noqa: E402

TARGET_PER_S = 5_000


def percentile(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile, in microseconds."""
    if not sorted_ns:
        return float("nan")
    k = min(len(sorted_ns) - 1, max(0, round(q / 100 * len(sorted_ns)) - 1))
    return sorted_ns[k] / 1000


def measure(call: Callable[[], Any], iterations: int, warmup: int, repeat: int = 1) -> list[int]:
    """Per-call times in ns; with `repeat` > 1, the run with the least total time (others' load only
    ever adds time, so the fastest run is the closest to the machine's own speed)."""
    best: list[int] = []
    for _ in range(repeat):
        for _ in range(warmup):
            call()
        out = []
        clock = time.perf_counter_ns
        for _ in range(iterations):
            t0 = clock()
            call()
            out.append(clock() - t0)
        if not best or sum(out) < sum(best):
            best = out
    return best


def row(label: str, samples_ns: list[int]) -> str:
    s = sorted(samples_ns)
    total = sum(s)
    rate = len(s) / (total / 1e9) if total else float("nan")
    return f"{label:<26} {len(s):>8} {rate:>12,.0f} {percentile(s, 50):>9.1f} {percentile(s, 99):>9.1f}"


HEADER = f"{'':<26} {'calls':>8} {'per s/core':>12} {'p50 µs':>9} {'p99 µs':>9}"


# --- (a) the catalogs -------------------------------------------------------------------------------------


def bench_catalogs(iterations: int, warmup: int) -> None:
    if not catalogs_present():
        print(f"(a) skipped: no catalogs at {CATALOGS}")
        return
    contract_ns: list[int] = []
    compile_ns: list[int] = []
    by_server: dict[str, list[int]] = {}
    verdicts: dict[str, int] = {}
    slowest: list[tuple[float, str]] = []
    for server, tool in catalog_tools():
        t0 = time.perf_counter_ns()
        contract = contract_from_mcp(server, tool, extension=EXTENSION)
        t1 = time.perf_counter_ns()
        plan = compile_plan(contract)  # the first call compiles; later calls hit the cache
        t2 = time.perf_counter_ns()
        contract_ns.append(t1 - t0)
        compile_ns.append(t2 - t1)
        g = grounded_request(tool)
        record = preflight(plan, g.request, g.evidence)
        verdicts[record.verdict] = verdicts.get(record.verdict, 0) + 1
        samples = measure(lambda p=plan, g=g: preflight(p, g.request, g.evidence), iterations, warmup)
        by_server.setdefault(server, []).extend(samples)
        slowest.append((statistics.median(samples) / 1000, f"{server}/{tool['name']}"))
    print(f"(a) catalog tools, grounded requests ({iterations} calls per tool after {warmup} warm-up)")
    print(HEADER)
    for server, samples in sorted(by_server.items()):
        print(row(server, samples))
    print(row("overall", [x for s in by_server.values() for x in s]))
    print("    verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    print("    slowest tools by p50: " + ", ".join(f"{n} {t:.0f} µs" for t, n in sorted(slowest)[-3:]))
    print()
    print(
        f"    per tool, once ({len(compile_ns)} tools)   "
        f"{'mean µs':>9} {'p50 µs':>9} {'p99 µs':>9} {'max µs':>9}"
    )
    for label, ns in (("contract_from_mcp", contract_ns), ("compile_plan", compile_ns)):
        s = sorted(ns)
        print(
            f"    {label:<30} {statistics.mean(s) / 1000:>9.1f} {percentile(s, 50):>9.1f} "
            f"{percentile(s, 99):>9.1f} {s[-1] / 1000:>9.1f}"
        )
    print()


# --- (b) the synthetic 10-slot tool ----------------------------------------------------------------------

SYNTHETIC_TOOL: dict[str, Any] = {
    "name": "transfer_funds",
    "description": "Move money between accounts.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "currency": {"type": "string", "enum": ["EUR", "USD"]},
            "reference": {"type": "string"},
            "execute_on": {"type": "string", "format": "date"},
            "recipient_name": {"type": "string"},
            "recipient_email": {"type": "string", "format": "email"},
            "instalments": {"type": "integer", "minimum": 1},
            "instant": {"type": "boolean"},
        },
        "required": [
            "from_account",
            "to_account",
            "amount",
            "currency",
            "reference",
            "execute_on",
            "recipient_name",
            "recipient_email",
            "instalments",
            "instant",
        ],
    },
    "x-preflight": {
        "state_change": "money leaves from_account and arrives at to_account",
        "prose_reviewed": True,
        "measures": {"balance": {"lookup": "bank.balance", "args": {"account": "arg:from_account"}}},
        "conditions": [
            {"id": "balance_covers_amount", "check": "measure.balance >= arg.amount", "on_false": "hold"}
        ],
    },
}
SYNTHETIC_VALUES: dict[str, Any] = {
    "from_account": "DE11 5203 0000 0000 0001",
    "to_account": "DE02 1203 0000 0000 1234 56",
    "amount": 120.5,
    "currency": "EUR",
    "reference": "invoice-7",
    "execute_on": "2026-12-01",
    "recipient_name": "Bob Baker",
    "recipient_email": "bob@example.com",
    "instalments": 3,
    "instant": True,
}


def synthetic() -> tuple[Any, ExecutionRequest, Evidence]:
    plan = compile_plan(contract_from_mcp("bank", SYNTHETIC_TOOL))
    text = "Please do it now."
    candidates = {}
    for name, value in SYNTHETIC_VALUES.items():
        text += f" {name.replace('_', ' ')}: "
        start = len(text)
        text += "true" if value is True else str(value)
        candidates[name] = Candidate(value, Span(0, start, len(text)))
        text += ";"
    request = ExecutionRequest(
        principal="user:alice",
        conversation=(Turn("user", text, trusted=True),),
        candidates=candidates,
        action_name=Span(0, 7, 12),  # "do it"
        timing=Timing("immediate", pointer=Span(0, 13, 16)),  # "now"
    )
    args = {"account": SYNTHETIC_VALUES["from_account"]}
    obs = Observation("balance", digest(args), NOW - timedelta(seconds=5), value=5000, id="obs-1")
    return plan, request, Evidence(now=NOW, observations={obs.key: obs})


def bench_synthetic(iterations: int, warmup: int, profile: bool, repeat: int = 1) -> None:
    t0 = time.perf_counter_ns()
    plan, request, evidence = synthetic()
    compile_us = (time.perf_counter_ns() - t0) / 1000
    record = preflight(plan, request, evidence)
    if record.verdict != "execute":
        raise SystemExit(f"the synthetic tool did not execute: {record.verdict} {record.reasons}")
    slots = [s for s in record.slots if s.key.startswith(("arg:", "cond:"))]
    samples = measure(lambda: preflight(plan, request, evidence), iterations, warmup, repeat)
    rate = len(samples) / (sum(samples) / 1e9)
    best = f", best of {repeat} runs" if repeat > 1 else ""
    print(f"(b) synthetic tool: {len(slots)} argument/condition slots, verdict {record.verdict}{best}")
    print(HEADER)
    print(row("10-slot tool", samples))
    also = measure(
        lambda: preflight(plan, request, evidence).to_json(), max(1, iterations // 4), warmup, repeat
    )
    print(row("  + record.to_json()", also))
    print(row("  record.to_json() alone", measure(record.to_json, max(1, iterations // 4), warmup, repeat)))
    print(f"    contract + plan compile: {compile_us:.0f} µs (once)")
    verdict = "met" if rate >= TARGET_PER_S else "MISSED"
    print(f"    target >= {TARGET_PER_S:,}/s per core: {verdict} ({rate:,.0f}/s)")
    if profile or rate < TARGET_PER_S:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            preflight(plan, request, evidence)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
        print("\n    hotspots (cProfile, 2,000 calls, by own time):")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[6:] if line.strip()))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--profile", action="store_true", help="profile the synthetic tool even if on target")
    parser.add_argument("--repeat", type=int, default=1, help="(b): report the fastest of this many runs")
    args = parser.parse_args()
    per_tool, synthetic_n = (20, 2_000) if args.quick else (100, 20_000)
    gc.collect()
    print(f"Python {sys.version.split()[0]}, single thread, time.perf_counter_ns")
    print(speed_line() + "\n")
    bench_synthetic(synthetic_n, 500, args.profile, max(1, args.repeat))
    bench_catalogs(per_tool, 10)


if __name__ == "__main__":
    main()
