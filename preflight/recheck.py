"""What the gate re-checks at run time, under which lock: the conditions a grant rests on that the world can
change between the verdict and the call (an order exchanged by another run, a balance spent).

A contract marks such conditions `recheck: true`, or declares an `effect_key` (an expression over the
arguments, ``"order:" + arg.order_id``), which re-checks every condition that reads a measure. The gate takes
the key's lock, measures those conditions again, refuses when one no longer holds, and holds the lock until
the call's outcome is recorded, so two runs on one key are one after the other and the second sees what the
first changed.

Pure: the caller runs the lookups (`Recheck.lookups`) and hands their observations to `recheck_failures`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .canonical import digest
from .contract import ConditionSpec, MeasureSpec, ToolContract
from .errors import ExpressionError
from .expressions import evaluate, evaluate_key
from .record import MeasureRequest
from .request import Observation
from .resolve import MAX_CLOCK_SKEW_S, lookup_args

__all__ = ["Recheck", "RecheckFailure", "recheck_failures", "recheck_for"]


@dataclass(frozen=True, slots=True)
class Recheck:
    key: str  # the lock: runs with one key are serialized
    conditions: tuple[ConditionSpec, ...]
    lookups: tuple[MeasureRequest, ...]  # what to measure again, with the granted payload's arguments


@dataclass(frozen=True, slots=True)
class RecheckFailure:
    condition: str
    # `false`: the condition no longer holds (the state changed); `error`: it could not be measured again.
    reason: Literal["false", "error"]
    detail: str


def recheck_for(contract: ToolContract, payload: Mapping[str, Any], *, principal: str) -> Recheck | None:
    """What running this payload re-checks, or None when the contract asks for no re-check.

    The key is `<server>/<effect key>`: tools of one server that touch one order share it. Without an
    `effect_key`, conditions marked `recheck` lock the whole tool (stricter is safe). Raises ExpressionError
    when the effect key has no value for this payload (the gate then refuses: fail closed)."""
    ext = contract.extension
    # Those marked `recheck`, and with an `effect_key` every condition that reads a measure (what the key's
    # runs change is measured state).
    keyed = ext.effect_key is not None
    conditions = tuple(
        c
        for c in ext.conditions
        if c.recheck or (keyed and any(r.startswith("measure:") for r in c.check.reads))
    )
    if not conditions and not keyed:
        return None
    if ext.effect_key is not None:
        key = f"{contract.server}/{evaluate_key(ext.effect_key, args=payload, principal=principal)}"
    else:
        key = f"{contract.identity}/*"
    measures = ext.measures or {}
    names: dict[str, None] = {}
    for cond in conditions:
        for read in sorted(cond.check.reads):
            kind, _, target = read.partition(":")
            if kind != "measure":
                continue
            for name in measures if target == "*" else (target,):
                names[name] = None
    lookups = tuple(_lookup(measures[name], payload, principal) for name in names)
    return Recheck(key, conditions, lookups)


def _lookup(spec: MeasureSpec, payload: Mapping[str, Any], principal: str) -> MeasureRequest:
    # The arguments the preflight gave the lookup, from the granted payload.
    args = lookup_args(spec, lambda path: _at(payload, path), principal)
    return MeasureRequest(spec.name, spec.lookup, args, digest(args), spec.max_age_s)


def _at(payload: Mapping[str, Any], path: str) -> Any:
    node: Any = payload
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None  # an optional argument the payload leaves out: the preflight read it as null too
        node = node[part]
    return node


def recheck_failures(
    recheck: Recheck,
    payload: Mapping[str, Any],
    observations: Mapping[str, Observation],
    *,
    principal: str,
    environment: str,
    now: datetime,
) -> tuple[RecheckFailure, ...]:
    """Each re-checked condition that does not hold now, or could not be evaluated (a lookup that failed,
    is missing or is already stale is an error, never a pass). Empty: every condition still holds."""
    by_name = {m.measure: m for m in recheck.lookups}
    failures = []
    for cond in recheck.conditions:
        values: dict[str, Any] = {}
        problem = None
        for name, request in by_name.items():
            if f"measure:{name}" not in cond.check.reads and "measure:*" not in cond.check.reads:
                continue
            obs = observations.get(request.key)
            if obs is None or obs.error is not None:
                problem = f"{name}: {obs.error if obs is not None else 'not measured'}"
                break
            age = (now - obs.observed_at).total_seconds()
            if age > request.max_age_s or age < -MAX_CLOCK_SKEW_S:
                problem = (
                    f"{name}: the lookup answered with a value observed at {obs.observed_at.isoformat()}"
                )
                break
            values[name] = obs.value
        if problem is not None:
            failures.append(RecheckFailure(cond.id, "error", problem))
            continue
        try:
            holds = evaluate(
                cond.check,
                args=payload,
                measures=values,
                principal=principal,
                env={"environment": environment},
            )
        except ExpressionError as exc:
            failures.append(RecheckFailure(cond.id, "error", exc.reason))
            continue
        if not holds:
            failures.append(RecheckFailure(cond.id, "false", cond.text))
    return tuple(failures)
