"""The execution gate: a grant issued again, and the run that only a grant for exactly this call starts.

`execution_run` is the one service of two transactions: it commits the consumed nonce before calling
the tool and records the outcome in a second transaction, because holding a transaction open across a
downstream call would make every concurrent attempt wait on it, and a crash between the two leaves a
consumed grant, never a re-run. For a contract that declares re-checks it holds its effect key's lock
across both (`console.effect_locks`: a session advisory lock, not a transaction), so only runs that
change the same thing wait for each other."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import partial
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, OuterRef
from kombu.utils.functional import retry_over_time

from console import connectors, json_values, models, storage
from console.audit import audit_append
from console.effect_locks import effect_lock
from console.errors import Conflict
from console.services import common
from console.services.common import _has_run, json_safe, lock_execution
from console.services.preflights import _fresh_until, _issue_grant, _preflight_and_record
from console.signing import verification_keys
from preflight import GrantError, GrantExpectation, compile_plan, verify_grant
from preflight.approvals import value_digest
from preflight.canonical import digest
from preflight.errors import ExpressionError
from preflight.grants import read_claims
from preflight.recheck import Recheck, recheck_failures, recheck_for
from preflight.request import Observation

logger = logging.getLogger(__name__)


EFFECT_LOCK_MARGIN_S = 5.0  # how much longer than two tool timeouts a run waits for its effect key's lock


@transaction.atomic
def grant_issue(*, execution_id: Any) -> models.Grant | None:
    """A grant for the latest record, which must say `execute`. Preflights issue one themselves; this is for
    a caller whose grant expired unused and whose record still stands. A record whose observations have gone
    stale no longer stands: it is preflighted again (its lookups run again) and None is returned."""
    execution = lock_execution(execution_id)
    latest = storage.latest_record(execution)
    if latest.verdict != "execute":
        raise Conflict("not_executable", f"the latest verdict is {latest.verdict}, not execute")
    if _has_run(execution):
        raise Conflict("already_ran", "this execution already ran")
    stale_at = _fresh_until(latest.record)
    if stale_at is not None and stale_at <= common._now():
        _preflight_and_record(execution, trigger="stale")
        return None
    return _issue_grant(execution, latest)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    outcome: str
    result: Any
    detail: str


@dataclass(frozen=True, slots=True)
class _Claim:
    grant_id: int
    connector: dict[str, Any]
    server: str
    tool: str
    payload: dict[str, Any]
    definition: dict[str, Any]  # the contract's tool definition, which the live server must still list


def execution_run(
    *, execution_id: Any, token: str, actor: str, call_tool: Callable[..., Any] | None = None
) -> RunOutcome:
    """The gate: only a grant issued for exactly this call runs it, once. Never retried. A contract that
    declares re-checks has them measured again under its effect key's lock, held until the outcome is in.

    `call_tool` (same signature and failure classes as `connectors.call_tool`) is how the MCP gateway sends
    the granted payload over its kept upstream session instead of a connection of its own."""
    try:
        with _effect_guard(execution_id=execution_id, token=token) as rechecked:
            return _execution_run(
                execution_id=execution_id, token=token, actor=actor, rechecked=rechecked, call_tool=call_tool
            )
    except Conflict as exc:
        if exc.code == "effect_busy":
            # Refused before the claim (the key's lock was not free): recorded like every refusal of the gate.
            with transaction.atomic():
                _record_refusal(
                    lock_execution(execution_id), None, "denied", "effect_busy", exc.detail, actor
                )
        raise


def _record_refusal(
    execution: models.Execution, grant: models.Grant | None, status: str, code: str, detail: str, actor: str
) -> None:
    models.Outcome.objects.create(execution=execution, grant=grant, status=status, detail=f"{code}: {detail}")
    audit_append(
        kind="outcome",
        execution_id=execution.pk,
        body={
            "status": status,
            "code": code,
            "detail": detail,
            "grant": grant.nonce if grant else None,
            "actor": actor,
        },
    )


def _execution_run(
    *,
    execution_id: Any,
    token: str,
    actor: str,
    rechecked: _Rechecked | None,
    call_tool: Callable[..., Any] | None = None,
) -> RunOutcome:
    claim = _gate_claim(execution_id=execution_id, token=token, actor=actor, rechecked=rechecked)
    if isinstance(claim, Conflict):
        raise claim  # returned, not raised, by the claim: its refusal is recorded in the claim's transaction
    connector, timeout = _run_timeouts(claim.connector)
    if call_tool is None:  # not the gateway, which checks its upstream's live definition itself
        call_tool = partial(connectors.call_tool, expected=claim.definition)
    result: Any = None
    try:
        result = call_tool(connector, claim.server, claim.tool, claim.payload, timeout_s=timeout)
        status, detail = "executed", ""
    except connectors.ToolCallFailed as exc:
        status, detail = "failed", str(exc) or type(exc).__name__
        result = exc.result  # the tool's own error answer, if it gave one
    except connectors.OutcomeUnknown as exc:
        status, detail = "outcome_unknown", str(exc) or type(exc).__name__
    except Exception as exc:  # whatever broke, the call may have reached the tool: unknown, never retried
        logger.exception("tool call %s/%s raised", claim.server, claim.tool)
        status, detail = "outcome_unknown", f"{type(exc).__name__}: {exc}"
    return _outcome_written(
        execution_id=execution_id,
        grant_id=claim.grant_id,
        status=status,
        result=json_safe(result),
        detail=json_values.storable_text(detail),
        actor=actor,
    )


@transaction.atomic
def _gate_claim(
    *, execution_id: Any, token: str, actor: str, rechecked: _Rechecked | None = None
) -> _Claim | Conflict:
    # The execution row lock serializes every attempt on one execution; the conditional UPDATE below is
    # what makes a nonce single-use even without it.
    execution = lock_execution(execution_id)
    now = common._now()
    grant: models.Grant | None = None

    def refuse(status: str, code: str, detail: str) -> Conflict:
        _record_refusal(execution, grant, status, code, detail, actor)
        return Conflict(code, detail)

    try:
        claims = read_claims(token)
    except GrantError as exc:
        return refuse("denied", "grant_malformed", str(exc))
    grant = (
        models.Grant.objects.select_related("record").filter(execution=execution, nonce=claims.nonce).first()
    )
    contract = execution.contract
    if contract is None:
        return refuse("denied", "grant_mismatch", "this execution has no chosen tool")
    stored = grant.record if grant is not None else storage.latest_record(execution)
    payload = stored.record.get("payload")
    expect = GrantExpectation(
        execution_id=str(execution.pk),
        principal=execution.principal,
        server=contract.server.name,
        tool=contract.name,
        contract_digest=contract.digest,
        # Recomputed from the stored payload: a payload edited after the verdict no longer matches.
        payload_digest=digest(payload) if payload is not None else "",
    )
    try:
        verify_grant(token, keys=verification_keys(), expect=expect, now=now)
    except GrantError as exc:
        if exc.reason == "expired":
            return refuse("expired", "grant_expired", str(exc))
        return refuse("denied", f"grant_{exc.reason}", str(exc))
    if grant is None:
        return refuse("denied", "grant_unknown", "no such grant was issued for this execution")
    if stored.seq != execution.records or stored.verdict != "execute":
        return refuse("denied", "grant_superseded", "the execution was preflighted again after this grant")
    if (
        storage.record_body_digest(stored.record) != stored.record_digest
        or claims.record_digest != stored.record_digest
    ):
        return refuse("denied", "grant_mismatch", "the record this grant names was altered")
    gone = _gate_recheck(execution, contract, stored, rechecked, now)
    if gone is not None:
        return refuse("denied", gone.code, gone.detail)
    if _has_run(execution):
        return refuse("denied", "grant_used", "this execution already ran")
    consumed = models.Grant.objects.filter(pk=grant.pk, used_at__isnull=True).update(used_at=now)
    if consumed != 1:
        return refuse("denied", "grant_used", "this grant was already used")
    audit_append(
        kind="run",
        execution_id=execution.pk,
        body={
            "grant": grant.nonce,
            "server": contract.server.name,
            "tool": contract.name,
            "payload_digest": expect.payload_digest,
            "actor": actor,
        },
    )
    return _Claim(
        grant.pk,
        dict(contract.server.connector),
        contract.server.name,
        contract.name,
        dict(payload),
        dict(contract.definition),
    )


def _run_timeouts(connector: Mapping[str, Any]) -> tuple[dict[str, Any], float]:
    """The connector and call timeout a run uses: connecting (MCP) and calling together end inside
    PREFLIGHT_TOOL_TIMEOUT_MAX_S, and so inside the web worker's timeout, whatever was configured before
    that limit was checked; a run must answer, never be killed with its worker."""
    limit = float(settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S)
    timeout = min(float(connector.get("timeout_s") or settings.PREFLIGHT_TOOL_TIMEOUT_S), limit)
    fitted = dict(connector)
    if fitted.get("kind") in ("mcp_stdio", "mcp_http"):
        connect = float(fitted.get("connect_timeout_s") or max(timeout, connectors.CONNECT_TIMEOUT_FLOOR_S))
        fitted["connect_timeout_s"] = min(connect, max(5.0, limit - timeout))
    return fitted, timeout


def _outcome_written(
    *, execution_id: Any, grant_id: int, status: str, result: Any, detail: str, actor: str
) -> RunOutcome:
    """Record a run's outcome, through a database blip of a few seconds; past that, the call has left and
    its outcome is not recorded, so the agent is told `outcome_unknown` (never "nothing was recorded") and
    the sweep records that (`runs_reconcile`) once the run's start, committed with its nonce, is old."""

    def reconnect(exc: Exception, intervals: Any, retries: int) -> float:
        logger.warning("outcome of %s not recorded yet (%s); retrying", execution_id, exc)
        connection.close()  # a broken connection is not reused; the next attempt opens a new one
        return float(next(intervals))

    try:
        return cast(
            RunOutcome,
            retry_over_time(  # type: ignore[no-untyped-call]  # kombu ships no types
                _record_outcome,
                (OperationalError, InterfaceError),
                kwargs={
                    "execution_id": execution_id,
                    "grant_id": grant_id,
                    "status": status,
                    "result": result,
                    "detail": detail,
                    "actor": actor,
                },
                errback=reconnect,
                interval_start=0.2,
                interval_step=0.4,
                interval_max=1.0,
                timeout=settings.PREFLIGHT_OUTCOME_WRITE_S,
            ),
        )
    except (OperationalError, InterfaceError):
        logger.exception("outcome of %s (%s) could not be recorded", execution_id, status)
        connection.close()
        return RunOutcome(
            "outcome_unknown",
            None,
            f"the tool was called ({status}) but the database was unavailable to record its outcome;"
            " it is recorded as outcome_unknown. Do not retry the call blindly",
        )


# What a run may end in; refused attempts (`denied`, `expired`) are outcomes of no run.
_RUN_OUTCOMES = ("executed", "failed", "outcome_unknown")


@dataclass(frozen=True, slots=True)
class _Rechecked:
    """What the gate measured again, under the effect key's lock, before deciding (None: nothing to)."""

    recheck: Recheck | None
    observations: Mapping[str, Observation]
    error: str | None = None  # the effect key has no value for this payload


@contextmanager
def _effect_guard(*, execution_id: Any, token: str) -> Iterator[_Rechecked | None]:
    """Take the effect key's lock and measure the re-checked conditions again, for a grant whose signature
    and expiry hold (anything else is refused by `_gate_claim` without a lookup, so a forged token never makes
    the gate call a measure). The key comes from the grant's own record, which never changes."""
    try:
        claims = read_claims(token)
        verify_grant(
            token,
            keys=verification_keys(),
            expect=GrantExpectation(**{f.name: getattr(claims, f.name) for f in fields(GrantExpectation)}),
            now=common._now(),
        )
        grant = (
            models.Grant.objects.select_related("record__contract__server")
            .filter(execution_id=execution_id, nonce=claims.nonce)
            .first()
        )
    except (GrantError, ValidationError, ValueError):
        grant = None
    if grant is None or grant.record.contract is None or grant.record.record.get("payload") is None:
        yield None
        return
    stored = grant.record
    payload = stored.record["payload"]
    assert stored.contract is not None  # checked above
    try:
        recheck = recheck_for(storage.engine_contract(stored.contract), payload, principal=claims.principal)
    except ExpressionError as exc:
        yield _Rechecked(None, {}, f"the effect key has no value for this payload: {exc.reason}")
        return
    if recheck is None:
        yield _Rechecked(None, {})
        return
    # The holder's lookups and call are bounded by their timeouts; wait a little longer than that for it.
    wait_s = float(settings.PREFLIGHT_TOOL_TIMEOUT_S) * 2 + EFFECT_LOCK_MARGIN_S
    with effect_lock(recheck.key, timeout_s=wait_s):
        yield _Rechecked(recheck, _measure_again(recheck))


def _measure_again(recheck: Recheck) -> dict[str, Observation]:
    """Run the re-checked lookups now, in parallel; a failure is an error observation (it refuses)."""
    specs = {
        m.name: m.as_connector_spec()
        for m in models.Measure.objects.filter(name__in=[r.lookup for r in recheck.lookups])
    }
    started = []
    for request in recheck.lookups:
        spec = specs.get(request.lookup)
        if spec is None:
            failed = connectors.MeasureFailed(f"no measure is registered as {request.lookup!r}")
            started.append((request, connectors.StartedMeasure("", failed=failed)))
        else:
            started.append((request, connectors.start_measure(spec, request.args)))
    out = {}
    for request, lookup in started:
        try:
            value, observed_at = lookup.result()
            obs = Observation(request.measure, request.args_digest, observed_at, value=json_safe(value))
        except Exception as exc:  # the lookup's own failure, of whatever kind: refused, never passed
            obs = Observation(
                request.measure, request.args_digest, common._now(), error=str(exc) or type(exc).__name__
            )
        out[request.key] = obs
    return out


def _gate_recheck(
    execution: models.Execution,
    contract: models.ToolContract,
    stored: models.PreflightRecord,
    rechecked: _Rechecked | None,
    now: datetime,
) -> Conflict | None:
    """Refuse a grant whose ground has moved: the tool's contract is no longer the current one (a catalog
    change voids grants), or a re-checked condition no longer holds (`state_changed`) or could not be
    measured again (`recheck_failed`)."""
    current = (
        models.ToolContract.objects.filter(server_id=contract.server_id, name=contract.name, current=True)
        .values_list("digest", flat=True)
        .first()
    )
    if current != contract.digest:
        return Conflict(
            "contract_changed",
            "the tool's contract changed since this grant was issued"
            + ("" if current else " (the tool left the catalog)")
            + "; preflight again",
        )
    engine_contract = storage.engine_contract(contract)
    if compile_plan(engine_contract, storage.active_rules()).checklist_version != stored.checklist_version:
        # The user/org rules the call was checked against are part of what it was granted under.
        return Conflict(
            "contract_changed", "the rules this grant was checked against changed; preflight again"
        )
    payload = stored.record["payload"]
    try:
        wanted = recheck_for(engine_contract, payload, principal=execution.principal)
    except ExpressionError as exc:
        return Conflict("recheck_failed", f"the effect key has no value for this payload: {exc.reason}")
    if wanted is None:
        return None
    if rechecked is None or rechecked.recheck != wanted:
        # Fail closed: a contract that asks for a re-check is never run without one.
        detail = rechecked.error if rechecked is not None and rechecked.error else "the re-check did not run"
        return Conflict("recheck_failed", detail)
    failures = recheck_failures(
        wanted,
        payload,
        rechecked.observations,
        principal=execution.principal,
        environment=str(execution.request.get("environment") or ""),
        now=now,
    )
    audit_append(
        kind="recheck",
        execution_id=execution.pk,
        body={
            "effect_key": wanted.key,
            "observed": [
                {
                    "key": key,
                    "observed_at": obs.observed_at.isoformat(),
                    "value_digest": None if obs.error else value_digest(obs.value),
                    "error": obs.error,
                }
                for key, obs in sorted(rechecked.observations.items())
            ],
            "failures": [
                {"condition": f.condition, "reason": f.reason, "detail": f.detail} for f in failures
            ],
        },
    )
    changed = [f for f in failures if f.reason == "false"]
    if changed:
        return Conflict(
            "state_changed",
            "; ".join(f"{f.condition} no longer holds ({f.detail})" for f in changed) + "; preflight again",
        )
    if failures:
        return Conflict("recheck_failed", "; ".join(f"{f.condition}: {f.detail}" for f in failures))
    return None


@transaction.atomic
def _record_outcome(
    *, execution_id: Any, grant_id: int, status: str, result: Any, detail: str, actor: str
) -> RunOutcome:
    lock_execution(execution_id)  # the execution lock before the audit lock, as everywhere
    # Once per run: a retry after a COMMIT whose answer was lost, or the sweep, finds it recorded.
    first = models.Outcome.objects.filter(grant_id=grant_id, status__in=_RUN_OUTCOMES).first()
    if first is not None:
        return RunOutcome(first.status, first.result, first.detail)
    outcome = models.Outcome.objects.create(
        execution_id=execution_id, grant_id=grant_id, status=status, result=result, detail=detail
    )
    audit_append(
        kind="outcome",
        execution_id=execution_id,
        body={
            "status": status,
            "outcome": outcome.pk,
            "result_digest": digest(result),
            "detail": detail,
            "actor": actor,
        },
    )
    return RunOutcome(status, result, detail)


def runs_reconcile(*, now: datetime | None = None) -> int:
    """Record `outcome_unknown` for every run started (its grant consumed, in the transaction that recorded
    the run) with no outcome PREFLIGHT_RUN_LOST_AFTER_S later: the process that ran it cannot still be
    running it, and the call may have reached the tool. Returns how many it recorded."""
    cutoff = (now or common._now()) - timedelta(seconds=settings.PREFLIGHT_RUN_LOST_AFTER_S)
    ended = models.Outcome.objects.filter(grant=OuterRef("pk"), status__in=_RUN_OUTCOMES)
    lost = models.Grant.objects.filter(used_at__lt=cutoff).filter(~Exists(ended))
    n = 0
    for grant_id, execution_id, used_at in lost.values_list("pk", "execution_id", "used_at"):
        assert used_at is not None  # filtered on it
        _record_outcome(
            execution_id=execution_id,
            grant_id=grant_id,
            status="outcome_unknown",
            result=None,
            detail=f"the run started at {used_at.isoformat()} and recorded no outcome; the call may have"
            " reached the tool",
            actor="system:sweep",
        )
        n += 1
    return n
