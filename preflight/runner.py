"""An in-process runner: one frontier's lookups run concurrently, then the execution is preflighted again.

The server runs the same frontier as a Celery group; this runner is for embedded use and tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from .engine import Plan, preflight
from .record import MeasureRequest, Record
from .request import Evidence, ExecutionRequest, Observation

__all__ = ["Lookup", "run_frontier", "settle"]

# A registered lookup: takes the measure's arguments, returns the observed value (or a (value, observed_at)
# pair when the source knows when it observed it). Raising is an error finding, never "no result".
Lookup = Callable[[Mapping[str, Any]], Any]

_ids = itertools.count(1)


def _failed(request: MeasureRequest, clock: Callable[[], datetime], error: str) -> Observation:
    return Observation(request.measure, request.args_digest, clock(), error=error, id=f"obs-{next(_ids)}")


def _observe(request: MeasureRequest, clock: Callable[[], datetime], future: Any) -> Observation:
    try:
        result = future.result(timeout=0)
    except Exception as exc:  # the lookup's own failure: recorded, then held
        return _failed(request, clock, f"{type(exc).__name__}: {exc}")
    value, observed_at = (
        result
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], datetime)
        else (result, clock())
    )
    return Observation(request.measure, request.args_digest, observed_at, value=value, id=f"obs-{next(_ids)}")


def run_frontier(
    requests: tuple[MeasureRequest, ...],
    registry: Mapping[str, Lookup],
    *,
    timeout_s: float = 5.0,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> dict[str, Observation]:
    """Run one frontier's lookups in parallel. A missing lookup, an exception or a timeout is an error."""
    out: dict[str, Observation] = {}
    if not requests:
        return out
    pool = ThreadPoolExecutor(max_workers=min(32, len(requests)), thread_name_prefix="preflight-lookup")
    try:
        futures = {}
        for req in requests:
            fn = registry.get(req.lookup)
            if fn is None:
                out[req.key] = _failed(req, clock, f"no lookup registered as {req.lookup!r}")
                continue
            futures[req.key] = (req, pool.submit(fn, dict(req.args)))
        wait([f for _, f in futures.values()], timeout=timeout_s)
        for key, (req, fut) in futures.items():
            if not fut.done():
                fut.cancel()
                out[key] = _failed(req, clock, f"timed out after {timeout_s}s")
            else:
                out[key] = _observe(req, clock, fut)
    finally:
        # A lookup that overran its timeout is abandoned, not waited for: its answer would be ignored anyway.
        pool.shutdown(wait=False, cancel_futures=True)
    return out


def settle(
    plan: Plan,
    request: ExecutionRequest,
    evidence: Evidence,
    registry: Mapping[str, Lookup],
    *,
    timeout_s: float = 5.0,
    max_rounds: int = 16,
) -> tuple[Record, Evidence]:
    """Preflight, run the lookup frontier, repeat until the verdict no longer waits for lookups.

    Round trips scale with dependency depth: each round runs every lookup whose inputs are settled. Time runs
    on the evidence's clock (`evidence.now` plus the time elapsed): lookups are stamped with it and each round
    is preflighted at it, so a caller's fixed or simulated clock and the observations agree.
    """
    started, origin = time.monotonic(), evidence.now

    def clock() -> datetime:
        return origin + timedelta(seconds=time.monotonic() - started)

    record = preflight(plan, request, evidence)
    for _ in range(max_rounds):
        if record.verdict != "measure" or not record.measures:
            break
        observed = run_frontier(record.measures, registry, timeout_s=timeout_s, clock=clock)
        evidence = replace(evidence, now=clock(), observations={**evidence.observations, **observed})
        record = preflight(plan, request, evidence)
    return record, evidence
