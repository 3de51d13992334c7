"""Preflighting an execution and storing its record with what the verdict leads to (its grant, its
lookups, its trigger): the step every service that adds evidence ends in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import connection, transaction

from console import models, storage
from console.audit import audit_append, audit_batch
from console.errors import NotFound, Unprocessable
from console.services import common
from console.services.common import _execution_pk
from console.signing import signer
from preflight import Record, compile_plan, preflight, select_tool
from preflight.record import MeasureRequest
from preflight.request import ExecutionRequest, parse_request
from preflight.summary import summarize

# A lookup that keeps answering with values already too old would otherwise be dispatched forever.
MAX_LOOKUPS_PER_KEY = 3


# What a preflight reads of a contract and its server. The rest stays deferred (loaded if ever touched): the
# definition, the large JSON, because `storage.engine_contract` caches the engine's contract by digest and
# reads it only on a miss; timestamps, because a plain cursor gives them as text on SQLite.
_CONTRACT_FIELDS = ("id", "server_id", "name", "digest", "annotations_trusted", "valid", "current")
_SERVER_FIELDS = ("id", "name", "annotations_trusted", "connector")


def _contract_rows(body: Mapping[str, Any]) -> list[models.ToolContract]:
    """The current contract of each tool the request names, in its order, in one plain-SQL read (a contract
    version never changes, so nothing here needs invalidating)."""
    wanted = storage.request_tools(body)
    columns = [f"c.{f}" for f in _CONTRACT_FIELDS] + [f"s.{f}" for f in _SERVER_FIELDS]
    sql = (
        f"SELECT {', '.join(columns)} FROM {storage.table(models.ToolContract)} c"
        f" JOIN {storage.table(models.Server)} s ON s.id = c.server_id"
        f" WHERE c.current AND ({' OR '.join(['(s.name = %s AND c.name = %s)'] * len(wanted))})"
    )
    found: dict[tuple[str, str], models.ToolContract] = {}
    n = len(_CONTRACT_FIELDS)
    for values in storage.raw_rows(sql, [part for pair in wanted for part in pair]):
        # bool(): SQLite answers 0/1, and annotations_trusted is part of the contract's digest.
        pk, server_id, name, digest_, trusted, valid, current = values[:n]
        s_id, s_name, s_trusted, s_connector = values[n:]
        contract_values = (pk, server_id, name, digest_, bool(trusted), bool(valid), bool(current))
        server_values = (s_id, s_name, bool(s_trusted), storage.json_value(s_connector))
        contract = models.ToolContract.from_db(connection.alias, _CONTRACT_FIELDS, contract_values)
        contract.server = models.Server.from_db(connection.alias, _SERVER_FIELDS, server_values)
        found[(s_name, name)] = contract
    rows = []
    for server, tool in wanted:
        row = found.get((server, tool))
        if row is None:
            invalid = models.ToolContract.objects.filter(server__name=server, name=tool, valid=False).exists()
            if invalid:
                raise Unprocessable(
                    "contract_invalid", f"{server}/{tool}: its definition is invalid; see the catalog import"
                )
            raise NotFound("unknown_tool", f"{server}/{tool} is not in the catalog")
        rows.append(row)
    return rows


def _preflight(
    execution: models.Execution,
    request: ExecutionRequest,
    *,
    fresh: bool,
    rows: list[models.ToolContract] | None = None,
) -> tuple[Record, models.ToolContract | None]:
    body = execution.request
    if rows is None:
        try:
            rows = _contract_rows(body)
        except (NotFound, Unprocessable) as exc:
            # The tool left the catalog (or broke) after this execution was submitted: hold, recorded.
            return storage.tool_unavailable(body, request, exc.detail, common._now()), None
    rules = storage.active_rules()
    evidence = storage.evidence_for(execution, now=common._now(), fresh=fresh)
    plans = [compile_plan(storage.engine_contract(r), rules) for r in rows]
    if "tool_candidates" in body:
        chosen = select_tool(plans, request, evidence)
        if isinstance(chosen, Record):
            return chosen, None
        index = next(i for i, p in enumerate(plans) if p is chosen)
        plan, row = plans[index], rows[index]
        tool_source = "user_answer" if "fixed:tool" in evidence.answers else "instruction"
    else:
        plan, row, tool_source = plans[0], rows[0], "instruction"
    evidence = storage.with_tool_evidence(evidence, execution, plan.contract)
    return preflight(plan, request, evidence, tool_source=tool_source), row


# On an Execution instance: (frontier keys, {key: (so far, running, lost)}) as `_exhausted_lookups`
# counted them, for `_dispatch_lookups` to use when it dispatches that same frontier: one query, not two.
_LOOKUP_COUNTS = "_preflight_lookup_counts"


def _lookup_counts(execution: models.Execution, keys: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """{key: (lookups so far, lookups running, of them lost to our infrastructure)} for the execution's
    lookups of these keys. Plain SQL: the
    ORM's annotate spent more CPU building this small read than PostgreSQL spent running it, on the path
    between two levels of lookups. Every key of the execution is counted (it has a few rows per key) and the
    rest dropped here: one statement text for any frontier, on every database."""
    wanted = set(keys)
    rows = storage.raw_rows(_lookup_counts_sql(), [_execution_pk(execution.pk)])
    return {key: (n, running, infra) for key, n, running, infra in rows if key in wanted}


@storage.per_vendor
def _lookup_counts_sql() -> str:
    key = connection.ops.quote_name("key")
    return (
        f"SELECT {key}, COUNT(*), COUNT(*) - COUNT(observed_at), COUNT(retry_after)"
        f" FROM {storage.table(models.Observation)} WHERE execution_id = %s GROUP BY {key}"
    )


def _exhausted_lookups(execution: models.Execution, record: Record, now: datetime) -> bool:
    """Turn lookups tried too often into errors (they hold); True if any was."""
    keys = tuple(m.key for m in record.measures)
    counts = _lookup_counts(execution, keys)
    # Lookups lost to our infrastructure are retried on their own budget (`_back_off_lost_lookups`).
    exhausted = [m for m in record.measures if _tries(counts.get(m.key, (0, 0, 0))) >= MAX_LOOKUPS_PER_KEY]
    for m in exhausted:
        error = f"looked up {MAX_LOOKUPS_PER_KEY} times without a value fresh enough"
        _observation(execution, m, counts[m.key][0] + 1, error=error, observed_at=now).save(force_insert=True)
    # Still true when this record is stored, unless rows were just added (then it is preflighted again).
    setattr(execution, _LOOKUP_COUNTS, None if exhausted else (keys, counts))
    return bool(exhausted)


def _tries(counts: tuple[int, int, int]) -> int:
    return counts[0] - counts[2]


def _expire_lost_lookups(execution: models.Execution, now: datetime) -> None:
    # A lookup whose task vanished (worker and broker both lost it) must not keep the execution waiting.
    cutoff = now - timedelta(seconds=settings.PREFLIGHT_LOOKUP_LOST_AFTER_S)
    lost = models.Observation.objects.filter(
        execution=execution, observed_at__isnull=True, dispatched_at__lt=cutoff, unsent__isnull=True
    ).update(
        error="the lookup was lost (no result within the time limit)",
        observed_at=now,
        retry_after=now,  # for now: `_back_off_lost_lookups` sets when
    )
    if lost:
        _back_off_lost_lookups(execution, now)


def _back_off_lost_lookups(execution: models.Execution, now: datetime) -> None:
    """A lost lookup is our fault, not the provider's: it holds for now, and is looked up again at the next
    preflight after an exponential backoff (PREFLIGHT_LOOKUP_RETRY_S, doubling), up to
    PREFLIGHT_LOOKUP_RETRIES times a key; then it stays a hold like any error."""
    lost: dict[str, int] = {}
    rows = models.Observation.objects.filter(execution=execution, retry_after__isnull=False).order_by("pk")
    for pk, key, retry_after in rows.values_list("pk", "key", "retry_after"):
        before = lost.get(key, 0)
        lost[key] = before + 1
        if retry_after != now:
            continue  # lost earlier: its backoff is set
        again: datetime | None = None
        if before < settings.PREFLIGHT_LOOKUP_RETRIES:
            delay = get_exponential_backoff_interval(
                settings.PREFLIGHT_LOOKUP_RETRY_S, before, settings.PREFLIGHT_LOOKUP_RETRY_MAX_S
            )
            again = now + timedelta(seconds=delay)
        models.Observation.objects.filter(pk=pk).update(retry_after=again)


def _preflight_and_record(
    execution: models.Execution,
    *,
    trigger: str,
    fresh: bool = False,
    rows: list[models.ToolContract] | None = None,
    request: ExecutionRequest | None = None,
    audit: Mapping[str, Any] | None = None,
    none_pending: bool = False,
) -> models.PreflightRecord:
    """`none_pending`: the caller saw, under the execution's row lock, that no lookup of it is pending, so
    there is none to expire (only a holder of that lock adds lookups)."""
    now = common._now()
    if not fresh and not none_pending:
        _expire_lost_lookups(execution, now)
    request = request or parse_request(execution.request)
    record, row = _preflight(execution, request, fresh=fresh, rows=rows)
    if record.verdict == "measure" and not fresh and _exhausted_lookups(execution, record, now):
        record, row = _preflight(execution, request, fresh=False)
    return _store_record(execution, record, row, trigger=trigger, audit=audit)


# What a new record changes on its execution.
_RECORD_FIELDS = (
    *("records", "verdict", "contract", "timing_at", "updated_at"),
    *("routes", "gap_classes", "unknown_count", "summary"),
)


def _call_summary(record: Record, contract: models.ToolContract | None, data: Mapping[str, Any]) -> str:
    """The queue's line for this record: the contract's `x-preflight.summary`, or the tool and its first
    settled arguments. The engine contract is the one the preflight just compiled (cached by digest)."""
    template = storage.engine_contract(contract).extension.summary if contract is not None else None
    return summarize(template, record.tool, record.principal, data["slots"])


# The preflight, its gap report and its grant go into the audit chain in one write, at the end.
@audit_batch()
def _store_record(
    execution: models.Execution,
    record: Record,
    contract: models.ToolContract | None,
    *,
    trigger: str,
    audit: Mapping[str, Any] | None = None,
) -> models.PreflightRecord:
    seq = execution.records + 1
    was = execution.verdict
    execution.records = seq
    execution.verdict = record.verdict
    execution.contract = contract
    execution.timing_at = datetime.fromisoformat(record.timing_at) if record.timing_at else None
    data = record.to_json()
    # The execution carries its latest record's summary; written with the execution's own INSERT or UPDATE.
    execution.routes, execution.gap_classes, execution.unknown_count = models.record_summary(data)
    execution.summary = _call_summary(record, contract, data)
    if execution._state.adding:
        # bulk_create: its id is made here, so no RETURNING, and less CPU than save(), whose only addition on
        # insert is the conversation key.
        execution.conversation_key = execution.conversation_key or models.conversation_key(
            execution.principal, execution.request
        )
        models.Execution.objects.bulk_create([execution])
    else:
        # Refused if final (a reviewer's no, or expiry). Every caller holds the execution's row lock.
        execution.save(update_fields=_RECORD_FIELDS)
    stored = models.PreflightRecord(
        execution=execution,
        seq=seq,
        contract=contract,
        verdict=record.verdict,
        record=data,
        record_digest=data["record_digest"],
        payload_digest=record.payload_digest,
        checklist_version=record.checklist_version,
        trigger=trigger,
        routes=execution.routes,
        gap_classes=execution.gap_classes,
        unknown_count=execution.unknown_count,
    )
    # Written like the execution above: bulk_create costs less CPU than save().
    models.PreflightRecord.objects.bulk_create([stored])
    if record.gaps:
        models.GapRow.objects.bulk_create(
            models.GapRow(
                execution=execution,
                record=stored,
                cls=g.cls,
                server=record.server,
                tool=record.tool,
                slot=g.slot,
                detail=g.detail,
            )
            for g in record.gaps
        )
    audit_append(
        kind="preflight",
        execution_id=execution.pk,
        body={
            "seq": seq,
            "trigger": trigger,
            "verdict": record.verdict,
            "server": record.server,
            "tool": record.tool,
            "contract_digest": record.contract_digest,
            "record_digest": data["record_digest"],
            "payload_digest": record.payload_digest,
            "checklist_version": record.checklist_version,
            "unknown_count": record.unknown_count,
            **(audit or {}),
        },
    )
    if record.gaps:
        audit_append(
            kind="gap_report",
            execution_id=execution.pk,
            body={"seq": seq, "gaps": [{"class": g.cls, "slot": g.slot} for g in record.gaps]},
        )
    grant = None
    if record.verdict == "execute":
        grant = _issue_grant(execution, stored)
    elif record.verdict == "measure":
        _dispatch_lookups(execution, record)
    elif record.verdict == "deferred" and execution.timing_at is not None:
        from console import tasks

        transaction.on_commit(partial(tasks.schedule_trigger, str(execution.pk), execution.timing_at))
    elif record.verdict == "hold" and was != "hold":
        from console import tasks

        # Approvers are told (and the deadline starts) once the hold is committed; robust: a broker that is
        # away fails no preflight, the hold is still in the queue.
        transaction.on_commit(partial(tasks.hold_notify.delay, str(execution.pk)), robust=True)
    # What was just written answers the call that wrote it, without reading it back, unless work after commit
    # may preflight the execution again first: a deferred trigger (in-process in embedded mode), or lookups
    # that did not go to a worker (`_lookups_after_commit` forgets these rows then).
    storage.keep_answer_rows(execution, (stored, grant) if record.verdict != "deferred" else None)
    return stored


def _observation(
    execution: models.Execution, m: MeasureRequest, attempt: int, **fields: Any
) -> models.Observation:
    """The row of one lookup of `m`, its `attempt`th: `task_key` tells two deliveries of one task apart."""
    return models.Observation(
        execution=execution,
        measure=m.measure,
        lookup=m.lookup,
        args=dict(m.args),
        args_digest=m.args_digest,
        key=m.key,
        task_key=f"{execution.pk}:{m.key}:{attempt}",
        **fields,
    )


def _dispatch_lookups(execution: models.Execution, record: Record) -> None:
    """One frontier, one Celery group. Rows are written now, pending; the tasks run after commit."""
    wanted = tuple(m.key for m in record.measures)
    counted = getattr(execution, _LOOKUP_COUNTS, None)
    setattr(execution, _LOOKUP_COUNTS, None)
    # Per key: how often it was looked up, and whether one is running. None before an execution's first
    # record, which is the first thing that writes its observations.
    seen: dict[str, tuple[int, int, int]] = {}
    if counted is not None and counted[0] == wanted:
        seen = counted[1]
    elif execution.records > 1:
        seen = _lookup_counts(execution, wanted)
    rows = [
        _observation(execution, m, seen.get(m.key, (0, 0, 0))[0] + 1)
        for m in record.measures
        if not seen.get(m.key, (0, 0, 0))[1]  # one is running already: its group's last task preflights again
    ]
    if rows:
        models.Observation.objects.bulk_create(rows)  # one statement for the frontier
        transaction.on_commit(partial(_lookups_after_commit, execution, [row.key for row in rows]))


def _lookups_after_commit(execution: models.Execution, keys: list[str]) -> None:
    from console import tasks

    if not tasks.dispatch_lookups(str(execution.pk), keys):
        # They ran here (in-process tasks) or the broker refused them: either way the execution was
        # preflighted again just now, so the record this call wrote is no longer its answer. Lookups that went
        # to a worker leave it the answer, as committed: the worker's record comes later (reading the
        # execution back would cost the POST two round trips).
        storage.keep_answer_rows(execution, None)


def _fresh_until(record: Mapping[str, Any]) -> datetime | None:
    """When the first observation the record rests on goes stale: its grant expires no later."""
    raw = record.get("fresh_until")
    return datetime.fromisoformat(raw) if isinstance(raw, str) else None


def _issue_grant(execution: models.Execution, stored: models.PreflightRecord) -> models.Grant:
    record = stored.record
    _, claims = signer().issue(
        execution_id=str(execution.pk),
        principal=execution.principal,
        server=record["server"],
        tool=record["tool"],
        contract_digest=record["contract_digest"],
        payload_digest=record["payload_digest"],
        record_digest=stored.record_digest,
        checklist_version=stored.checklist_version,
        now=common._now(),
        ttl_s=settings.PREFLIGHT_GRANT_TTL_S,
        not_after=_fresh_until(record),
    )
    grant = models.Grant(
        execution=execution,
        record=stored,
        nonce=claims.nonce,
        claims=asdict(claims),
        expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
    )
    models.Grant.objects.bulk_create([grant])  # as the record it is for: less CPU than save()
    audit_append(
        kind="grant",
        execution_id=execution.pk,
        body={
            "nonce": claims.nonce,
            "record_seq": stored.seq,
            "record_digest": stored.record_digest,
            "payload_digest": claims.payload_digest,
            "expires_at": claims.expires_at,
            "key_id": claims.key_id,
        },
    )
    return grant
