"""The ORM edge: engine values built from rows (contracts, rules, evidence) and the record answer built back.

Nothing here writes. Engine objects that are costly to build and never change for a given digest (contracts,
checklists) are cached per process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field

from console import models
from preflight import (
    Answer,
    Approval,
    Checklist,
    Evidence,
    ExecutionRequest,
    Observation,
    Preset,
    PriorValue,
    ToolContract,
    compile_plan,
    contract_from_mcp,
    load_rules,
    preflight,
)
from preflight.canonical import digest
from preflight.record import AWAITING_APPROVAL, Record, SlotState
from preflight.validation import same_json

_lock = threading.Lock()
_contracts: dict[tuple[str, str], ToolContract] = {}
_checklists: dict[tuple[int, str], Checklist] = {}


class ContractTampered(Exception):
    """A stored definition no longer hashes to the digest it was stored under."""


def engine_contract(row: models.ToolContract) -> ToolContract:
    key = (row.server.name, row.digest)
    found = _contracts.get(key)
    if found is None:
        found = contract_from_mcp(
            row.server.name, row.definition, annotations_trusted=row.annotations_trusted
        )
        if found.digest != row.digest:
            # Preflighting against a definition that was edited in the database would grant calls nobody
            # imported; refuse instead.
            raise ContractTampered(f"{row}: stored definition hashes to {found.digest}")
        with _lock:
            _contracts[key] = found
    return found


Read = tuple[str, Sequence[Any]]  # a statement and its parameters


def _db() -> Any:
    """The default database's wrapper itself, for the hot paths here to read once: every attribute read
    through `django.db.connection`, a proxy, looks the wrapper up in the thread's context again, dozens of
    times in a POST /executions."""
    return connections[DEFAULT_DB_ALIAS]


def raw_rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Rows of one read on the hot path, in plain SQL: the ORM spends more CPU building a small indexed query
    than PostgreSQL spends running it (bench/api.py). JSON columns come back as text; see `json_value`."""
    with _db().cursor() as cursor:
        cursor.execute(sql, params)
        return cast(list[tuple[Any, ...]], cursor.fetchall())


def per_vendor[T](build: Callable[[], T]) -> Callable[[], T]:
    """`build` run once per database vendor and kept: for the statement texts of hot paths, where the ORM
    spent more CPU building a small query than PostgreSQL spent running it (bench/api.py, bench/lookups.py).
    """
    built: dict[str, T] = {}

    def get() -> T:
        connection = _db()
        found = built.get(connection.vendor)
        if found is None:
            found = built[connection.vendor] = build()
        return found

    return get


def json_value(raw: Any) -> Any:
    # Django's PostgreSQL backend loads jsonb as text (JSONField decodes it); SQLite gives text too.
    return json.loads(raw) if isinstance(raw, str) else raw


def table(model: type[Any]) -> str:
    return str(connection.ops.quote_name(model._meta.db_table))


def datetime_value(raw: Any) -> datetime | None:
    # A plain cursor gives SQLite's timestamps as text, or naive; both are UTC, as Django stores them.
    if isinstance(raw, str):
        raw = datetime.fromisoformat(raw)
    if isinstance(raw, datetime) and raw.tzinfo is None:
        raw = raw.replace(tzinfo=UTC)
    return cast(datetime | None, raw)


def active_rules() -> tuple[Checklist, ...]:
    # Which versions are active is read every time (a new version applies at once, in every process); only
    # the parsed checklist of an (id, version), which never changes, is cached, and its data read only then.
    out = []
    for row_pk, row_version in raw_rows(f"SELECT id, version FROM {table(models.RuleSet)} WHERE active", ()):
        found = _checklists.get((row_pk, row_version))
        if found is None:
            data = models.RuleSet.objects.values_list("data", flat=True).get(pk=row_pk)
            found = load_rules(data)
            with _lock:
                _checklists[(row_pk, row_version)] = found
        out.append(found)
    return tuple(sorted(out, key=lambda c: c.stamp))


def contract_preview(
    contract: ToolContract, now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What every call of this tool must settle (before any request), and what the provider left out."""
    record = preflight(compile_plan(contract), ExecutionRequest(principal="preview"), Evidence(now=now))
    obligations = []
    for slot in record.slots:
        item: dict[str, Any] = {
            "key": slot.key,
            "kind": slot.kind,
            "defined_by": slot.defined_by,
            "label": slot.label,
            "labels": list(slot.labels),
        }
        if slot.key.startswith("arg:"):
            item["sources"] = list(contract.slot_config(slot.key[4:]).sources)
        if slot.route is not None:
            item["route"] = slot.route
        obligations.append(item)
    problems = [g.to_json() for g in record.gaps if g.cls in ("provider_gap", "implementation_gap")]
    return obligations, problems


def tool_unavailable(
    body: Mapping[str, Any], request: ExecutionRequest, detail: str, now: datetime
) -> Record:
    """A hold for an execution whose tool is no longer in the catalog: recorded like any verdict."""
    server, tool = request_tools(body)[0] if "tool_candidates" not in body else ("", "")
    return Record.one_open_slot(
        verdict="hold",
        server=server,
        tool=tool,
        contract_digest="",
        principal=request.principal,
        checklist_version="fixed@1",
        slot=SlotState.tool_held(detail),
        reason=f"fixed:tool: {detail}",
        evaluated_at=now.isoformat(),
    )


def request_tools(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    if "tool_candidates" in body:
        return [(c["server"], c["tool"]) for c in body["tool_candidates"]]
    return [(body["server"], body["tool"])]


def evidence_for(execution: models.Execution, *, now: datetime, fresh: bool) -> Evidence:
    """Evidence collected for this execution. `fresh`: created in this transaction, so nothing to read."""
    if fresh:
        return Evidence(now=now)
    answers: dict[str, Answer] = {}
    observations: dict[str, Observation] = {}
    pending = set()
    approvals = []
    # Rows come kind by kind, each oldest first, so the newest answer and observation of a key win.
    own: dict[str, Answer] = {}  # the requesting user's latest answer of each key
    pk = models.Execution._meta.pk
    assert pk is not None
    rows = raw_rows(_evidence_sql(), [pk.get_db_prep_value(execution.pk, connection)] * 3)
    for kind, row_pk, key, value, who, at, text, error, retry_after in rows:
        if kind == 1:
            answer = Answer(json_value(value), who, id=f"answer-{row_pk}", after_user_answer=key in own)
            if who == execution.principal:
                own[key] = answer
            elif key in own and same_json(own[key].value, answer.value):
                # A reviewer's edit back to the user's own answer: the user's answer is the source again.
                answer = own[key]
            answers[key] = answer
        elif kind == 2 and at is None:
            pending.add(key)
        elif kind == 2 and _retry_due(retry_after, now):
            # An error of our infrastructure (a lost lookup) whose backoff has passed: not evidence any
            # more, so the key is looked up again. A newer row of the key, if any, still wins below.
            observations.pop(key, None)
        elif kind == 2:
            observed_at = datetime_value(at)
            assert observed_at is not None
            observations[key] = Observation(
                who, text, observed_at, value=json_value(value), error=error, id=f"observation-{row_pk}"
            )
        else:
            approved_at = datetime_value(at)
            assert approved_at is not None  # a NOT NULL column
            approvals.append(Approval(key, text, f"user:{who}", approved_at))
    return Evidence(
        now=now,
        answers=answers,
        observations=observations,
        approvals=tuple(approvals),
        pending=frozenset(pending),
    )


def _retry_due(retry_after: Any, now: datetime) -> bool:
    if retry_after is None:
        return False
    at = datetime_value(retry_after)
    return at is not None and at <= now


@per_vendor
def _evidence_sql() -> str:
    """Answers, observations and approvals of an execution (the approver's username joined in) in one read:
    one round trip instead of three, and no ORM query building (bench/lookups.py re-preflights twice on its
    critical path). Columns: kind (1 answer, 2 observation, 3 approval), id, slot or observation key, JSON
    value, who (answered_by, measure, approver), when (observed_at, created_at), digest, error, retry_after
    (an infrastructure error's time to look up again)."""
    user = get_user_model()
    quote = connection.ops.quote_name
    username_column = cast("Field[Any, Any]", user._meta.get_field(user.USERNAME_FIELD)).column
    pk_column = user._meta.pk.column if user._meta.pk else None
    assert username_column and pk_column  # concrete columns of the user table
    username, user_pk = quote(username_column), quote(pk_column)
    return (
        f"SELECT 1, id, slot_key, value, answered_by, NULL, NULL, NULL, NULL"
        f" FROM {table(models.Answer)} WHERE execution_id = %s"
        " UNION ALL SELECT 2, id, key, value, measure, observed_at, args_digest, error, retry_after"
        f" FROM {table(models.Observation)} WHERE execution_id = %s"
        f" UNION ALL SELECT 3, a.id, a.slot_key, NULL, u.{username}, a.created_at, a.value_digest, NULL, NULL"
        f" FROM {table(models.Approval)} a JOIN {table(user)} u ON u.{user_pk} = a.approver_id"
        " WHERE a.execution_id = %s"
        " ORDER BY 1, 2"
    )


def with_tool_evidence(evidence: Evidence, execution: models.Execution, contract: ToolContract) -> Evidence:
    """Add what depends on the chosen tool: the principal's presets for it, and prior state."""
    presets = {}
    sql = (
        f"SELECT id, slot_key, value, consent FROM {table(models.Preset)}"
        " WHERE principal = %s AND tool = %s AND revoked_at IS NULL"
    )
    for pk, key, value, consent in raw_rows(sql, (execution.principal, contract.identity)):
        consent = json_value(consent)
        if isinstance(consent, Mapping) and str(consent.get("execution")) == str(execution.pk):
            # Made from an answer in this execution: the answer itself settles what it can, and its preset
            # must not settle anything more here.
            continue
        presets[key] = Preset(json_value(value), f"preset-{pk}", consent=_consent_text(consent))
    prior: dict[str, PriorValue] = {}
    if any("prior_state" in cfg.sources for cfg in (contract.extension.slots or {}).values()):
        prior = _prior_state(execution, contract)
    if not presets and not prior:
        return evidence
    return replace(evidence, presets=presets, prior=prior)


def _consent_text(consent: Mapping[str, Any]) -> str:
    return f"{consent.get('who')} at {consent.get('when')} in execution {consent.get('execution')}"


def _prior_state(execution: models.Execution, contract: ToolContract) -> dict[str, PriorValue]:
    # The values of this principal's last call of the same tool that actually ran.
    row = (
        models.PreflightRecord.objects.filter(
            execution__principal=execution.principal,
            execution__outcomes__status="executed",
            contract__server__name=contract.server,
            contract__name=contract.name,
            verdict="execute",
        )
        .exclude(execution=execution)
        .order_by("-created_at")
        .first()
    )
    if row is None:
        return {}
    return {
        s["key"]: PriorValue(s["value"], f"{row.execution_id}#{row.seq}", s["source"] or "")
        for s in row.record["slots"]
        if s["key"].startswith("arg:") and s["status"] == "known"
    }


def latest_record(execution: models.Execution) -> models.PreflightRecord:
    return models.PreflightRecord.objects.get(execution=execution, seq=execution.records)


def record_body_digest(record: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in record.items() if k != "record_digest"})


def editor_of(record: Mapping[str, Any], slot_key: str) -> str | None:
    """Who set this slot's value by an answer, when not the requesting user (an approver's edit)."""
    slot: Mapping[str, Any] = next((s for s in record["slots"] if s["key"] == slot_key), {})
    by = (slot.get("pointer") or {}).get("by") if slot.get("source") == "user_answer" else None
    return by if isinstance(by, str) and by != record.get("principal") else None


def approval_value(record: Mapping[str, Any], slot_key: str) -> tuple[bool, Any]:
    """(approvable, value) for a slot of a record: what an approval of it binds to right now."""
    slot = next((s for s in record["slots"] if s["key"] == slot_key), None)
    if slot is None or slot.get("approval") not in AWAITING_APPROVAL:
        return False, None
    if slot_key.startswith("approval:"):
        # An approval slot approves the whole call: it binds to the digest of the valid payload.
        if record.get("payload_valid") is not True:
            return False, None
        return True, record["payload_digest"]
    if slot["status"] == "unknown":
        return False, None
    return True, slot["value"]  # a null an approver set needs approving too (four eyes)


# On an Execution instance: (record, grant) that services just wrote for it, so the answer to the call that
# wrote them need not read them back. Set only when nothing after commit can preflight the execution again.
_ANSWER_ROWS = "_preflight_answer_rows"


def keep_answer_rows(
    execution: models.Execution, rows: tuple[models.PreflightRecord, models.Grant | None] | None
) -> None:
    setattr(execution, _ANSWER_ROWS, rows)


def has_answer_rows(execution: models.Execution) -> bool:
    """True if `record_answer(execution)` can answer from what this instance's last write left on it."""
    rows = getattr(execution, _ANSWER_ROWS, None)
    return rows is not None and rows[0].seq == execution.records


def _jsonb_order(value: Any) -> Any:
    # How PostgreSQL's jsonb orders an object's keys: shorter first (in bytes), then bytewise.
    if isinstance(value, dict):
        return {k: _jsonb_order(value[k]) for k in sorted(value, key=_jsonb_key)}
    if isinstance(value, list):
        return [_jsonb_order(item) for item in value]
    return value


def _jsonb_key(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return len(raw), raw


def record_answer(execution: models.Execution, *, read_back_order: bool = False) -> dict[str, Any]:
    """The Agent API answer for an execution: its latest record plus id, grant and console URL.
    `read_back_order`: answered from what was just written, its record's keys come in the order reading it
    back would give them, for an answer that always read it back to stay byte for byte as it was."""
    from console.signing import token_for
    from preflight import GrantClaims

    grant: models.Grant | None
    if has_answer_rows(execution):
        row, grant = getattr(execution, _ANSWER_ROWS)
        record = row.record
        if read_back_order and _db().vendor == "postgresql":
            record = _jsonb_order(record)
    else:
        row = latest_record(execution)
        # A call runs only on the grant of the latest record, and nothing is preflighted after it, so only
        # an `execute` record whose grant is used can have an outcome.
        grant = models.Grant.objects.filter(record=row).first() if row.verdict == "execute" else None
        record = row.record
    out = dict(record)
    out["id"] = str(execution.id)
    out["seq"] = row.seq
    out["grant"] = out["grant_expires_at"] = out["outcome"] = None
    if grant is not None and grant.used_at is None:
        out["grant"] = token_for(GrantClaims(**grant.claims))
        out["grant_expires_at"] = grant.expires_at.isoformat()
    elif grant is not None:
        # Refused attempts (denied, expired) are in the audit trail; this says whether the call ran.
        outcome = models.Outcome.objects.filter(
            execution=execution, status__in=("executed", "failed", "outcome_unknown")
        ).values_list("status", flat=True)
        out["outcome"] = outcome.first()
    if row.verdict == "measure" and not has_answer_rows(execution):
        # Lookups the broker refused wait to be sent (the sweep sends them): say so, the record says measure.
        unsent = models.Observation.objects.filter(
            execution=execution, observed_at__isnull=True, unsent__isnull=False
        ).values_list("key", flat=True)
        if keys := list(unsent):
            out["lookups_unsent"] = keys
    out["console_url"] = f"/executions/{execution.id}/"
    return out
