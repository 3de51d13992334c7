"""Every write the console makes. Keyword-only, one transaction each, and each appends to the audit chain
inside that transaction, so an action whose audit write fails does not happen.

The one exception is `execution_run`: it commits the consumed nonce before calling the tool and records the
outcome in a second transaction, because holding a transaction open across a downstream call would make
every concurrent attempt wait on it, and a crash between the two leaves a consumed grant, never a re-run.
For a contract that declares re-checks it holds its effect key's lock across both (`console.effect_locks`: a
session advisory lock, not a transaction), so only runs that change the same thing wait for each other.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Case, Exists, F, OuterRef, Value, When
from django.db.models.functions import Cast
from django.utils import timezone
from kombu.utils.functional import retry_over_time

from console import connectors, egress, json_values, models, queries, records
from console.audit import audit_append, audit_batch
from console.effect_locks import effect_lock
from console.errors import BadInput, Conflict, InvalidAnswer, NotFound, Unprocessable
from console.signing import signer, verification_keys
from preflight import (
    ContractError,
    GrantError,
    GrantExpectation,
    Record,
    compile_plan,
    contract_from_mcp,
    load_rules,
    preflight,
    select_tool,
    verify_grant,
)
from preflight.answers import accepted_form, answer_problem, normalise_answer, rememberable
from preflight.approvals import value_digest
from preflight.canonical import canonical_json, digest
from preflight.confirmations import bound_answer, is_user_yes_key
from preflight.errors import ChecklistError, ExpressionError, RequestError
from preflight.grants import read_claims
from preflight.recheck import Recheck, recheck_failures, recheck_for
from preflight.request import Observation, parse_request
from preflight.summary import summarize

logger = logging.getLogger(__name__)

# A lookup that keeps answering with values already too old would otherwise be dispatched forever.
MAX_LOOKUPS_PER_KEY = 3
ANSWERABLE_FIXED = frozenset({"fixed:tool", "fixed:timing", "fixed:action_name"})
# The channels that carry the requesting user's own words (the agent API relays them): only these give a
# confirmation or consent. A reviewer's channel never does.
USER_CHANNELS = frozenset({"agent"})
EFFECT_LOCK_MARGIN_S = 5.0  # how much longer than two tool timeouts a run waits for its effect key's lock


def _now() -> datetime:
    return timezone.now()


def lock_execution(execution_id: Any) -> models.Execution:
    """The execution, its row locked until commit: the one way an action takes it."""
    try:
        return (
            # Only the execution row (its contract is shared by every execution of the tool), and NO KEY:
            # PostgreSQL checks foreign keys to it at commit with KEY SHARE, which must not wait on this lock
            # while holding the audit lock (that ordering deadlocks concurrent runs).
            models.Execution.objects.select_for_update(of=("self",), no_key=True)
            .select_related("contract__server")
            .get(pk=execution_id)
        )
    except (models.Execution.DoesNotExist, ValidationError, ValueError):
        raise NotFound("unknown_execution", f"no execution {execution_id}") from None


def _has_run(execution: models.Execution) -> bool:
    # Plain SQL, built once: every re-preflight asks, and the ORM spent ~1 ms of CPU building this read.
    return bool(records.raw_rows(_has_run_sql(), [_execution_pk(execution.pk)]))


@records.per_vendor
def _has_run_sql() -> str:
    return (
        f"SELECT 1 FROM {records.table(models.Grant)} WHERE execution_id = %s AND used_at IS NOT NULL LIMIT 1"
    )


# ---- catalog ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedTool:
    name: str
    contract_digest: str | None
    obligations: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    version: str  # "new", "unchanged" or "invalid"


@dataclass(frozen=True, slots=True)
class CatalogImport:
    server: models.Server
    tools: list[ImportedTool]
    retired: list[str]
    # What this import did not name and so carried over from the operator's earlier decisions, e.g.
    # "annotations_trusted", "connector", "extensions.transfer".
    kept: list[str] = field(default_factory=list)


def _extension_of(tool: Mapping[str, Any], sidecar: Mapping[str, Any] | None) -> Any:
    # Side-car wins; then the Tool object's own field; then `_meta`, the one free-form place MCP SDKs keep.
    if sidecar is not None:
        return sidecar
    if "x-preflight" in tool:
        return None  # contract_from_mcp reads it from the definition
    meta = tool.get("_meta")
    return meta.get("x-preflight") if isinstance(meta, Mapping) else None


@transaction.atomic
def catalog_import(
    *,
    server: str,
    tools: Sequence[Any],
    actor: str,
    annotations_trusted: bool | None = None,
    connector: Mapping[str, Any] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> CatalogImport:
    """Import a `tools/list` result. Each tool is checked on its own: a bad one is reported, not fatal.

    The list is the server's whole catalog: tools missing from it stop being current (their versions stay,
    so records that name them keep their contract). What an operator decided before and this import does
    not name is kept, never silently reset: trust (None: as it was; a new server is untrusted), the
    connector (None: as it was), each tool's side-car extension (a tool not in `extensions` keeps its
    stored one; `null` for a tool removes it)."""
    if not server:
        raise BadInput("invalid", "server: required, a non-empty string")
    if connector is not None:
        connector = _checked(connectors.checked_connector, connector)
        check_connector_timeout(connector)
    srv, created = models.Server.objects.select_for_update().get_or_create(
        name=server, defaults={"connector": dict(connector or {"kind": "python"})}
    )
    changed, kept = [], []
    if annotations_trusted is None:
        if not created and srv.annotations_trusted:
            kept.append("annotations_trusted")
    elif srv.annotations_trusted != annotations_trusted:
        srv.annotations_trusted = annotations_trusted
        changed.append("annotations_trusted")
    if connector is None:
        if not created:
            kept.append("connector")
    elif srv.connector != dict(connector):
        srv.connector = dict(connector)
        changed.append("connector")
    sidecars = dict(srv.extensions or {})
    for name, extension in (extensions or {}).items():
        if extension is None:
            sidecars.pop(name, None)
        else:
            sidecars[name] = extension
    if sidecars != (srv.extensions or {}):
        srv.extensions = sidecars
        changed.append("extensions")
    listed = {t.get("name") for t in tools if isinstance(t, Mapping)}
    kept += [f"extensions.{n}" for n in sorted(sidecars) if n in listed and n not in (extensions or {})]
    if changed:
        srv.save(update_fields=[*changed, "updated_at"])

    now = _now()
    results: list[ImportedTool] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, Mapping) else None
        if not isinstance(name, str) or not name:
            problem = {
                "class": "invalid",
                "where": f"tools[{i}]",
                "detail": "a tool is an object with a name",
            }
            results.append(ImportedTool(f"tools[{i}]", None, [], [problem], "invalid"))
            continue
        if name in seen:
            problem = {"class": "invalid", "where": f"tools[{i}]", "detail": f"tool {name!r} is listed twice"}
            results.append(ImportedTool(name, None, [], [problem], "invalid"))
            continue
        seen.add(name)
        results.append(_import_tool(srv, tool, _extension_of(tool, sidecars.get(name)), now))

    retired = list(
        models.ToolContract.objects.filter(server=srv, current=True)
        .exclude(name__in=seen)
        .values_list("name", flat=True)
    )
    models.ToolContract.objects.filter(server=srv, current=True, name__in=retired).update(current=False)
    audit_append(
        kind="catalog_import",
        execution_id=None,
        body={
            "server": server,
            "annotations_trusted": srv.annotations_trusted,
            "actor": actor,
            "tools": [{"name": t.name, "digest": t.contract_digest, "version": t.version} for t in results],
            "retired": retired,
            "changed": changed,
            "kept": kept,
        },
    )
    return CatalogImport(srv, results, retired, kept)


def check_connector_timeout(connector: Mapping[str, Any]) -> None:
    """A tool is called inside the web request: a timeout the web worker's own limit cannot fit would end in
    a killed worker and no outcome, so it is refused when configured (settings.PREFLIGHT_WEB_TIMEOUT_S)."""
    timeout_s = connector.get("timeout_s")
    limit = settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S
    if timeout_s is not None and float(timeout_s) > limit:
        raise Unprocessable(
            "timeout_too_long",
            f"connector.timeout_s: {timeout_s:g}s does not fit inside the web worker's limit"
            f" ({settings.PREFLIGHT_WEB_TIMEOUT_S}s, PREFLIGHT_WEB_TIMEOUT_S); at most {limit}s",
        )


def _import_tool(srv: models.Server, tool: Mapping[str, Any], extension: Any, now: datetime) -> ImportedTool:
    name = tool["name"]
    try:
        contract = contract_from_mcp(
            srv.name, tool, annotations_trusted=srv.annotations_trusted, extension=extension
        )
    except ContractError as exc:
        problem = {"class": "invalid", "where": exc.path or "", "detail": exc.reason}
        definition = dict(tool) if extension is None else {**tool, "x-preflight": extension}
        try:
            bad_digest = digest(
                {"server": srv.name, "tool": definition, "annotations_trusted": srv.annotations_trusted}
            )
        except TypeError as err:
            return ImportedTool(name, None, [], [{**problem, "detail": str(err)}], "invalid")
        # Kept as a version so the operator sees what was offered, but never current: nothing can run on it.
        models.ToolContract.objects.get_or_create(
            server=srv,
            name=name,
            digest=bad_digest,
            defaults={
                "definition": definition,
                "annotations_trusted": srv.annotations_trusted,
                "problems": [problem],
                "valid": False,
                "current": False,
            },
        )
        models.ToolContract.objects.filter(server=srv, name=name, current=True).update(current=False)
        return ImportedTool(name, None, [], [problem], "invalid")

    obligations, problems = records.contract_preview(contract, now)
    row = models.ToolContract.objects.filter(server=srv, name=name, digest=contract.digest).first()
    version = "unchanged" if row is not None and row.current else "new"
    models.ToolContract.objects.filter(server=srv, name=name, current=True).exclude(
        digest=contract.digest
    ).update(current=False)
    if row is None:
        models.ToolContract.objects.create(
            server=srv,
            name=name,
            digest=contract.digest,
            definition=dict(contract.definition),
            annotations_trusted=srv.annotations_trusted,
            obligations=obligations,
            problems=problems,
            valid=True,
            current=True,
        )
    elif not row.current:
        row.current = True
        row.save(update_fields=["current"])
    return ImportedTool(name, contract.digest, obligations, problems, version)


@transaction.atomic
def measure_create(
    *,
    name: str,
    kind: str,
    url: str = "",
    timeout_s: float = 5.0,
    config: Mapping[str, Any] | None = None,
    actor: str,
) -> tuple[models.Measure, bool]:
    """Register (or redefine) a lookup. Returns (measure, created). Where it leads is checked against the
    deployment's allow-lists here and again on every lookup (console/egress.py)."""
    if kind not in models.Measure.KINDS:
        raise BadInput("invalid", f"kind: one of {', '.join(models.Measure.KINDS)}")
    if kind == "http" and not url:
        raise BadInput("invalid", f"url: required for a {kind} measure")
    limit = settings.PREFLIGHT_MEASURE_TIMEOUT_MAX_S  # inside the lookup task's limits (settings.py)
    if not 0 < timeout_s <= limit:
        raise BadInput("invalid", f"timeout_s: more than 0 and at most {limit} seconds")
    config = _checked(_measure_config, kind, url, dict(config or {}))
    measure, created = models.Measure.objects.update_or_create(
        name=name, defaults={"kind": kind, "url": url, "timeout_s": timeout_s, "config": dict(config or {})}
    )
    audit_append(
        kind="measure",
        execution_id=None,
        body={
            "name": name,
            "kind": kind,
            "url": url,
            "timeout_s": timeout_s,
            "created": created,
            "actor": actor,
        },
    )
    return measure, created


def _checked(check: Callable[..., Any], *args: Any) -> Any:
    """`check`'s answer; its egress refusal as the API's error (400 for a shape, 422 for a place)."""
    try:
        return check(*args)
    except egress.EgressRefused as exc:
        error = BadInput if exc.code == "invalid_connector" else Unprocessable
        raise error(exc.code, exc.detail) from None


# What each measure kind's config may hold: anything else is refused rather than stored unread.
_MEASURE_CONFIG = {
    "http": frozenset(),
    "python": frozenset({"lookup"}),
    "mcp": frozenset({"connector", "tool", "field"}),
}


def _measure_config(kind: str, url: str, config: dict[str, Any]) -> dict[str, Any]:
    extra = sorted(set(config) - _MEASURE_CONFIG[kind])
    if extra:
        raise egress.EgressRefused(
            "invalid_connector", f"config.{extra[0]}: not accepted for a {kind} measure"
        )
    if kind == "http":
        egress.check_url(url)
    elif kind == "mcp":
        if url:
            raise egress.EgressRefused(
                "invalid_connector", "url: an mcp measure's server is config.connector"
            )
        config["connector"] = connectors.checked_connector(config.get("connector"), what="config.connector")
        if config["connector"]["kind"] == "python":
            raise egress.EgressRefused("invalid_connector", "config.connector.kind: mcp_stdio or mcp_http")
        for key in ("tool", "field"):
            if (key in config or key == "tool") and not (isinstance(config.get(key), str) and config[key]):
                raise egress.EgressRefused("invalid_connector", f"config.{key}: a tool's name, a string")
    elif kind == "python" and "lookup" in config and not isinstance(config["lookup"], str):
        raise egress.EgressRefused("invalid_connector", "config.lookup: a registered lookup's name")
    return config


@transaction.atomic
def ruleset_create(*, data: Mapping[str, Any], actor: str) -> models.RuleSet:
    """Store a user/org checklist as the active version of its id; older versions stop applying."""
    try:
        checklist = load_rules(data)
    except ChecklistError as exc:
        raise Unprocessable("invalid_checklist", str(exc)) from None
    models.RuleSet.objects.filter(name=checklist.id, active=True).update(active=False)
    row, _ = models.RuleSet.objects.update_or_create(
        name=checklist.id, version=checklist.version, defaults={"data": dict(data), "active": True}
    )
    audit_append(
        kind="ruleset",
        execution_id=None,
        body={"name": checklist.id, "version": checklist.version, "stamp": checklist.stamp, "actor": actor},
    )
    return row


@transaction.atomic
def agent_token_create(*, name: str, principals: Sequence[str] = ()) -> tuple[models.AgentToken, str]:
    """A new agent token; only its SHA-256 is stored. `principals`: the only principals it may act for
    (none given: any principal). Either way it sees only the executions it created itself."""
    if not name:
        raise BadInput("invalid", "name: required, a non-empty string")
    wanted = list(dict.fromkeys(principals))
    bad = [p for p in wanted if not isinstance(p, str) or not p.strip() or p != p.strip()]
    if bad:
        raise BadInput("invalid", f"principals: not a principal: {bad[0]!r}")
    token = "pfa_" + secrets.token_urlsafe(32)
    row = models.AgentToken.objects.create(
        name=name,
        token_sha256=hashlib.sha256(token.encode()).hexdigest(),
        prefix=token[:10],
        principals=wanted,
    )
    audit_append(
        kind="agent_token",
        execution_id=None,
        body={"name": name, "prefix": row.prefix, "principals": wanted},
    )
    return row, token


def _refuse_principal(principal: str) -> PermissionDenied:
    return PermissionDenied(f"this token may not act for principal {principal!r}")


# ---- executions ------------------------------------------------------------------------------------


# What a preflight reads of a contract and its server. The rest stays deferred (loaded if ever touched): the
# definition, the large JSON, because `records.engine_contract` caches the engine's contract by digest and
# reads it only on a miss; timestamps, because a plain cursor gives them as text on SQLite.
_CONTRACT_FIELDS = ("id", "server_id", "name", "digest", "annotations_trusted", "valid", "current")
_SERVER_FIELDS = ("id", "name", "annotations_trusted", "connector")


def _contract_read(body: Mapping[str, Any]) -> records.Read:
    wanted = records.request_tools(body)
    columns = [f"c.{f}" for f in _CONTRACT_FIELDS] + [f"s.{f}" for f in _SERVER_FIELDS]
    sql = (
        f"SELECT {', '.join(columns)} FROM {records.table(models.ToolContract)} c"
        f" JOIN {records.table(models.Server)} s ON s.id = c.server_id"
        f" WHERE c.current AND ({' OR '.join(['(s.name = %s AND c.name = %s)'] * len(wanted))})"
    )
    return sql, [part for pair in wanted for part in pair]


def _presets_reads(principal: str, body: Mapping[str, Any]) -> list[records.Read]:
    """The presets read, when the request names its tool (with candidates, it depends on the choice)."""
    if "tool_candidates" in body:
        return []
    return [records.presets_read(principal, f"{body['server']}/{body['tool']}")]


def _contract_rows(body: Mapping[str, Any]) -> list[models.ToolContract]:
    """The current contract of each tool the request names, in its order, in one plain-SQL read (a contract
    version never changes, so nothing here needs invalidating)."""
    wanted = records.request_tools(body)
    found = {}
    n = len(_CONTRACT_FIELDS)
    for values in records.raw_rows(*_contract_read(body)):
        # bool(): SQLite answers 0/1, and annotations_trusted is part of the contract's digest.
        pk, server_id, name, digest_, trusted, valid, current = values[:n]
        s_id, s_name, s_trusted, s_connector = values[n:]
        contract_values = (pk, server_id, name, digest_, bool(trusted), bool(valid), bool(current))
        server_values = (s_id, s_name, bool(s_trusted), records.json_value(s_connector))
        row = models.ToolContract.from_db(connection.alias, _CONTRACT_FIELDS, contract_values)
        row.server = models.Server.from_db(connection.alias, _SERVER_FIELDS, server_values)
        found[(s_name, name)] = row
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


def check_pointers(body: Mapping[str, Any]) -> None:
    """A pointer that lands outside the conversation is a broken request, not an unverified value."""
    turns = body.get("conversation") or []

    def check(pointer: Any, field: str) -> None:
        spans = pointer if isinstance(pointer, list) else [pointer]
        for i, span in enumerate(spans):
            where = f"{field}[{i}]" if isinstance(pointer, list) else field
            turn, start, end = span["turn"], span["start"], span["end"]
            if not 0 <= turn < len(turns):
                raise Unprocessable(
                    "pointer_out_of_range",
                    f"{where}: turn {turn} is not in the conversation ({len(turns)} turns)",
                )
            length = len(turns[turn]["content"])
            if not 0 <= start < end <= length:
                raise Unprocessable(
                    "pointer_out_of_range",
                    f"{where}: [{start}, {end}) is not a span of turn {turn} ({length} characters)",
                )

    for key, cand in (body.get("candidates") or {}).items():
        if cand.get("pointer") is not None:
            check(cand["pointer"], f"candidates.{key}.pointer")
    if body.get("action_name") is not None:
        check(body["action_name"], "action_name")
    timing = body.get("timing")
    if isinstance(timing, Mapping) and timing.get("pointer") is not None:
        check(timing["pointer"], "timing.pointer")


def _preflight(
    execution: models.Execution, *, fresh: bool, rows: list[models.ToolContract] | None = None
) -> tuple[Record, models.ToolContract | None]:
    body = execution.request
    request = parse_request(body)
    if rows is None:
        try:
            rows = _contract_rows(body)
        except (NotFound, Unprocessable) as exc:
            # The tool left the catalog (or broke) after this execution was submitted: hold, recorded.
            return records.tool_unavailable(body, request, exc.detail, _now()), None
    rules = records.active_rules()
    evidence = records.evidence_for(execution, now=_now(), fresh=fresh)
    plans = [compile_plan(records.engine_contract(r), rules) for r in rows]
    if "tool_candidates" in body:
        chosen = select_tool(plans, request, evidence)
        if isinstance(chosen, Record):
            return chosen, None
        index = next(i for i, p in enumerate(plans) if p is chosen)
        plan, row = plans[index], rows[index]
        tool_source = "user_answer" if "fixed:tool" in evidence.answers else "instruction"
    else:
        plan, row, tool_source = plans[0], rows[0], "instruction"
    evidence = records.with_tool_evidence(evidence, execution, plan.contract)
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
    rows = records.raw_rows(*_lookup_counts_read(execution))
    return {key: (n, running, infra) for key, n, running, infra in rows if key in wanted}


def _lookup_counts_read(execution: models.Execution) -> records.Read:
    return _lookup_counts_sql(), [_execution_pk(execution.pk)]


@records.per_vendor
def _lookup_counts_sql() -> str:
    key = connection.ops.quote_name("key")
    return (
        f"SELECT {key}, COUNT(*), COUNT(*) - COUNT(observed_at), COUNT(retry_after)"
        f" FROM {records.table(models.Observation)} WHERE execution_id = %s GROUP BY {key}"
    )


def _execution_pk(execution_id: Any) -> Any:
    pk = models.Execution._meta.pk
    assert pk is not None
    return pk.get_db_prep_value(pk.to_python(execution_id), connection)


def _exhausted_lookups(execution: models.Execution, record: Record, now: datetime) -> bool:
    """Turn lookups tried too often into errors (they hold); True if any was."""
    keys = tuple(m.key for m in record.measures)
    counts = _lookup_counts(execution, keys)
    # Lookups lost to our infrastructure are retried on their own budget (`_back_off_lost_lookups`).
    exhausted = [m for m in record.measures if _tries(counts.get(m.key, (0, 0, 0))) >= MAX_LOOKUPS_PER_KEY]
    for m in exhausted:
        models.Observation.objects.create(
            execution=execution,
            measure=m.measure,
            lookup=m.lookup,
            args=dict(m.args),
            args_digest=m.args_digest,
            key=m.key,
            error=f"looked up {MAX_LOOKUPS_PER_KEY} times without a value fresh enough",
            observed_at=now,
            task_key=f"{execution.pk}:{m.key}:{counts[m.key][0] + 1}",
        )
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


def infra_retry_due(*, execution_id: Any | None = None, now: datetime | None = None) -> list[Any]:
    """Held executions with a lookup lost to our infrastructure whose backoff has passed since their latest
    preflight (that is, not looked up again yet): the next preflight looks it up again."""
    now = now or _now()
    newer = models.Observation.objects.filter(
        execution_id=OuterRef("execution_id"), key=OuterRef("key"), pk__gt=OuterRef("pk")
    )
    due = models.Observation.objects.filter(
        retry_after__lte=now, retry_after__gt=F("execution__updated_at"), execution__verdict="hold"
    ).filter(~Exists(newer))
    if execution_id is not None:
        due = due.filter(execution_id=execution_id)
    return list(due.values_list("execution_id", flat=True).distinct())


def _preflight_and_record(
    execution: models.Execution,
    *,
    trigger: str,
    fresh: bool = False,
    rows: list[models.ToolContract] | None = None,
    audit: Mapping[str, Any] | None = None,
    none_pending: bool = False,
) -> models.PreflightRecord:
    """`none_pending`: the caller saw, under the execution's row lock, that no lookup of it is pending, so
    there is none to expire (only a holder of that lock adds lookups)."""
    now = _now()
    if not fresh and not none_pending:
        _expire_lost_lookups(execution, now)
    reads = _preflight_reads(execution.pk, execution.principal, execution.request, rows=rows, fresh=fresh)
    with records.prefetched(*reads):
        record, row = _preflight(execution, fresh=fresh, rows=rows)
        if record.verdict == "measure" and not fresh and _exhausted_lookups(execution, record, now):
            record, row = _preflight(execution, fresh=False)
        return _store_record(execution, record, row, trigger=trigger, audit=audit)


def _preflight_reads(
    execution_id: Any,
    principal: str,
    request: Mapping[str, Any],
    *,
    rows: list[models.ToolContract] | None = None,
    fresh: bool = False,
) -> list[records.Read]:
    """What a preflight reads, to be read at once (one round trip): the contract, the active rules, the
    presets of a named tool and, for an execution with a past, its evidence and how often each lookup ran
    (bench/lookups.py preflights again twice on its critical path)."""
    reads = [records.rules_read(), *_presets_reads(principal, request)]
    if rows is None:
        reads.insert(0, _contract_read(request))
    if not fresh:
        execution = models.Execution(pk=execution_id)
        reads += [records.evidence_read(execution), _lookup_counts_read(execution)]
    return reads


# What a new record changes on its execution.
_RECORD_FIELDS = (
    *("records", "verdict", "contract", "timing_at", "updated_at"),
    *("routes", "gap_classes", "unknown_count", "summary"),
)


def _call_summary(record: Record, contract: models.ToolContract | None, data: Mapping[str, Any]) -> str:
    """The queue's line for this record: the contract's `x-preflight.summary`, or the tool and its first
    settled arguments. The engine contract is the one the preflight just compiled (cached by digest)."""
    template = records.engine_contract(contract).extension.summary if contract is not None else None
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
    # bulk_create, not PreflightRecord.save(), which would UPDATE the execution's summary a second time.
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
    records.keep_answer_rows(execution, (stored, grant) if record.verdict != "deferred" else None)
    return stored


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
        (
            m.measure,
            m.lookup,
            m.args,
            m.args_digest,
            m.key,
            f"{execution.pk}:{m.key}:{seen.get(m.key, (0, 0, 0))[0] + 1}",
        )
        for m in record.measures
        if not seen.get(m.key, (0, 0, 0))[1]  # one is running already: its group's last task preflights again
    ]
    if rows:
        now = _now()
        models.Observation.objects.bulk_create(  # one statement for the frontier
            models.Observation(
                execution=execution,
                measure=measure,
                lookup=lookup,
                args=dict(args),
                args_digest=args_digest,
                key=key,
                task_key=task_key,
                dispatched_at=now,
            )
            for measure, lookup, args, args_digest, key, task_key in rows
        )
        transaction.on_commit(partial(_lookups_after_commit, execution, [row[4] for row in rows]))


def _lookups_after_commit(execution: models.Execution, keys: list[str]) -> None:
    from console import tasks

    if not tasks.dispatch_lookups(str(execution.pk), keys):
        # They ran here (in-process tasks) or the broker refused them: either way the execution was
        # preflighted again just now, so the record this call wrote is no longer its answer. Lookups that went
        # to a worker leave it the answer, as committed: the worker's record comes later (bench/lookups.py:
        # reading the execution back cost its POST ~1 ms and two round trips).
        records.keep_answer_rows(execution, None)


@transaction.atomic
def execution_create(
    *, body: Mapping[str, Any], token: models.AgentToken | None, actor: str
) -> models.Execution:
    """Record a candidate execution and its first preflight. `body` has passed the API's shape checks."""
    try:
        request = parse_request(body)
    except RequestError as exc:
        raise BadInput("invalid", f"{exc.field}: {exc.reason}") from None
    if token is not None and not token.may_act_for(request.principal):
        raise _refuse_principal(request.principal)
    check_pointers(body)
    # One round trip for the contract, the rules and the presets the preflight reads.
    with records.prefetched(*_preflight_reads(None, request.principal, body, fresh=True)):
        rows = _contract_rows(body)  # an unknown tool records nothing
        # Inserted by _store_record together with its first verdict (one INSERT instead of INSERT + UPDATE).
        execution = models.Execution(principal=request.principal, token=token, request=dict(body), verdict="")
        _preflight_and_record(
            execution,
            trigger="create",
            fresh=True,
            rows=rows,
            audit={"principal": request.principal, "actor": actor, "request_digest": digest(body)},
        )
    return execution


def _check_answer_key(execution: models.Execution, key: str) -> None:
    if key in ANSWERABLE_FIXED or key.startswith("branch:") or is_user_yes_key(key):
        return
    if key.startswith("arg:"):
        if execution.contract is None:
            raise Unprocessable("unknown_slot", f"{key}: choose the action first (answer fixed:tool)")
        if not key[4:] or "" in key[4:].split("."):
            raise Unprocessable("unknown_slot", f"{key}: not an argument path")
        # An argument the tool does not declare is answerable too: what the user states is never dropped;
        # the preflight makes it a slot and the whole-payload validation decides whether the tool takes it.
        return
    # Conditions, approvals and rules are settled by code and by approvers, never by an answer.
    raise Unprocessable("not_answerable", f"{key}: this slot is not settled by an answer")


def execution_answer(
    *,
    execution_id: Any,
    answers: Mapping[str, Any],
    answered_by: str,
    channel: str,
    actor: str,
    remember: Sequence[str] = (),
) -> models.PreflightRecord:
    """Record the user's answers (remembered ones become presets, with consent) and preflight again.

    Each answer is checked against its question's schema first: one it refuses raises InvalidAnswer
    (`invalid_answer`, or `not_rememberable` for a remember the slot does not allow), and nothing is
    settled; the refused attempt is still written to the audit chain (committed before the raise)."""
    outcome = _execution_answer(
        execution_id=execution_id,
        answers=answers,
        answered_by=answered_by,
        channel=channel,
        actor=actor,
        remember=remember,
    )
    if isinstance(outcome, InvalidAnswer):
        raise outcome
    return outcome


_YES_SCHEMA: Mapping[str, Any] = {"type": "boolean"}


def _refused_answer(
    execution: models.Execution, answers: Mapping[str, Any], remember: Sequence[str]
) -> InvalidAnswer | None:
    contract = execution.contract
    plan = compile_plan(records.engine_contract(contract)) if contract is not None else None
    asked: dict[str, Mapping[str, Any]] = {}
    if execution.records:
        for question in records.latest_record(execution).record.get("questions") or []:
            asked[question["slot"]] = question["schema"]
    for key, value in answers.items():
        if is_user_yes_key(key):
            # A yes/no is checked on the boolean the user gave (bare, or beside the digest it names), and
            # against a boolean schema even when its question is not open now (a mind changed after a yes).
            if isinstance(value, Mapping) and set(value) == {"yes", "digest"}:
                value = value["yes"]
            asked.setdefault(key, _YES_SCHEMA)
        problem = answer_problem(plan, key, value, asked)
        if problem is not None:
            return InvalidAnswer(key, problem, accepts=accepted_form(plan, key, asked))
    for key in remember:
        if not rememberable(plan, key):
            reason = "this slot does not take remembered values (its sources lack user_answer or preset)"
            return InvalidAnswer(key, reason, code="not_rememberable")
    return None


@transaction.atomic
@audit_batch()
def _execution_answer(
    *,
    execution_id: Any,
    answers: Mapping[str, Any],
    answered_by: str,
    channel: str,
    actor: str,
    remember: Sequence[str] = (),
) -> models.PreflightRecord | InvalidAnswer:
    execution = lock_execution(execution_id)
    if _has_run(execution):
        raise Conflict("already_ran", "this execution already ran; submit a new one")
    for key in answers:
        _check_answer_key(execution, key)
    answers = {key: normalise_answer(key, value) for key, value in answers.items()}
    _check_user_yes(answers, channel=channel, remember=remember)
    for key in remember:
        if key not in answers:
            raise BadInput("invalid", f"remember: {key} is not among the answers")
    try:
        canonical_json(dict(answers))
    except TypeError as exc:
        raise BadInput("invalid", f"answers: {exc}") from None
    # Checked as the user sent them (a yes/no is a boolean), then a yes/no is bound to what it was shown.
    refused = _refused_answer(execution, answers, remember)
    if refused is not None:
        audit_append(
            kind="answer_refused",
            execution_id=execution.pk,
            body={
                "answered_by": answered_by,
                "channel": channel,
                "actor": actor,
                "answers": {k: value_digest(v) for k, v in answers.items()},
                "remember": list(remember),
                "error": refused.code,
                "slot": refused.slot,
                "reason": refused.reason,
            },
        )
        return refused
    answers = _bind_user_yes(execution, answers)
    models.Answer.objects.bulk_create(
        models.Answer(
            execution=execution,
            slot_key=key,
            value=value,
            answered_by=answered_by,
            channel=channel,
            remember=key in remember,
        )
        for key, value in answers.items()
    )
    audit_append(
        kind="answer",
        execution_id=execution.pk,
        body={
            "answered_by": answered_by,
            "channel": channel,
            "actor": actor,
            "answers": {k: value_digest(v) for k, v in answers.items()},
            "remember": list(remember),
        },
    )
    if remember:
        if execution.contract is None:
            raise Unprocessable("unknown_slot", "remember: choose the action first (answer fixed:tool)")
        tool = f"{execution.contract.server.name}/{execution.contract.name}"
        for key in remember:
            _preset_put(execution, tool, key, answers[key], answered_by)
    return _preflight_and_record(execution, trigger="answer")


def _check_user_yes(answers: Mapping[str, Any], *, channel: str, remember: Sequence[str] = ()) -> None:
    """Only the requesting user's channel gives a yes or no (the agent relays the user's words): a reviewer's
    yes is an approval, never the user's confirmation. A yes or no is given each time, never remembered."""
    keys = [k for k in answers if is_user_yes_key(k)]
    if keys and channel not in USER_CHANNELS:
        raise Unprocessable(
            "not_answerable", f"{keys[0]}: only the requesting user confirms or consents; approve instead"
        )
    for key in remember:
        if is_user_yes_key(key):
            raise Unprocessable(
                "not_answerable", f"remember: {key}: a yes or no is given each time, never kept"
            )


def _bind_user_yes(execution: models.Execution, answers: Mapping[str, Any]) -> Mapping[str, Any]:
    """Answers to confirmation and consent questions, bound to the digest the question showed.

    Only the requesting user's channel may give them (the agent relays the user's words): a reviewer's yes
    is an approval, never the user's confirmation. A yes or no answers the question in the latest record, so
    it binds to what that question showed, even when the same batch changes the value (the new value is then
    asked again): a confirmation cannot be carried over to a value the user was not shown. An answer may
    instead name the digest it was given for ({"yes": true, "digest": ...}), which must be the one shown."""
    keys = [k for k in answers if is_user_yes_key(k)]
    if not keys:
        return answers
    latest = records.latest_record(execution).record
    # An open question, or a yes/no already given (the user may change their mind before the call runs).
    shown = {
        s["key"]: {"digest": (s.get("pointer") or {}).get("digest")}
        for s in latest.get("slots") or []
        if is_user_yes_key(s["key"]) and s.get("status") == "known"
    }
    shown |= {
        q["slot"]: q.get("shows") or {}
        for q in latest.get("questions") or []
        if q.get("kind") in ("confirmation", "consent")
    }
    bound = dict(answers)
    for key in keys:
        if key not in shown or not isinstance(shown[key].get("digest"), str):
            raise Conflict("not_asked", f"{key}: no question awaits this yes or no; read the latest record")
        answer, current = answers[key], shown[key]["digest"]
        if isinstance(answer, Mapping) and set(answer) == {"yes", "digest"}:
            if answer["digest"] != current:
                raise Conflict("stale_value", f"{key}: the question now shows another value; read it again")
            answer = answer["yes"]
        if not isinstance(answer, bool):
            raise Unprocessable("invalid_answer", f"{key}: answer true (yes) or false (no)")
        bound[key] = bound_answer(answer, current)
    return bound


def _preset_put(execution: models.Execution, tool: str, key: str, value: Any, who: str) -> None:
    now = _now()
    models.Preset.objects.filter(
        principal=execution.principal, tool=tool, slot_key=key, revoked_at__isnull=True
    ).update(revoked_at=now)
    consent = {"who": who, "when": now.isoformat(), "execution": str(execution.pk)}
    preset = models.Preset.objects.create(
        principal=execution.principal, tool=tool, slot_key=key, value=value, consent=consent
    )
    audit_append(
        kind="preset",
        execution_id=execution.pk,
        body={
            "action": "create",
            "preset": preset.pk,
            "principal": execution.principal,
            "tool": tool,
            "slot": key,
            "value_digest": value_digest(value),
            "consent": consent,
        },
    )


@transaction.atomic
def execution_repreflight(*, execution_id: Any, trigger: str) -> models.PreflightRecord:
    """Preflight again from everything recorded so far. Never reuses an earlier verdict. An execution that
    already ran is left alone: a fresh `execute` would mint a second grant for a call that happened."""
    execution = lock_execution(execution_id)
    if _has_run(execution):
        return records.latest_record(execution)
    return _preflight_and_record(execution, trigger=trigger)


@dataclass(frozen=True, slots=True)
class LookupResult:
    observation_id: int
    value: Any
    error: str | None
    observed_at: datetime


def observations_fill(*, results: Sequence[LookupResult]) -> int:
    """Record lookups' results in one UPDATE; returns how many were recorded. Conditional, so of two
    deliveries of one task only the first counts. Not wrapped in a transaction of its own (its BEGIN and
    COMMIT were two more round trips); inside a caller's transaction it is part of that one."""
    if not results:
        return 0
    if records.pipelines():
        return len(records.raw_rows(*_fill_read(results)))
    meta = models.Observation._meta

    def each(name: str, values: Sequence[Any]) -> Case:
        field = meta.get_field(name)
        pairs = zip(results, values, strict=True)
        # Cast: a branch of NULLs only is untyped for PostgreSQL (text), which a jsonb column refuses.
        whens = [When(pk=r.observation_id, then=Cast(Value(v, output_field=field), field)) for r, v in pairs]
        return Case(*whens, output_field=field)

    return models.Observation.objects.filter(
        pk__in=[r.observation_id for r in results], observed_at__isnull=True
    ).update(
        value=each("value", [None if r.error else r.value for r in results]),
        error=each("error", [r.error for r in results]),
        observed_at=each("observed_at", [r.observed_at for r in results]),
    )


def _fill_read(results: Sequence[LookupResult]) -> records.Read:
    return queries.fill_read(
        [(r.observation_id, None if r.error else r.value, r.error, r.observed_at) for r in results]
    )


@records.per_vendor
def _pending_sql() -> str:
    return (
        f"SELECT 1 FROM {records.table(models.Observation)}"
        " WHERE execution_id = %s AND observed_at IS NULL LIMIT 1"
    )


@transaction.atomic
def lookups_settled(
    *,
    execution_id: Any,
    filled: bool = False,
    results: Sequence[LookupResult] = (),
) -> models.PreflightRecord | None:
    """A lookup task is done: record its last `results`, and preflight again if none of the execution's
    lookups is pending any more and the latest record waits on lookups. `filled`: the task recorded results
    before these (a redelivered copy finds them recorded). Returns the new record, if one was made.

    The results are recorded and the pending lookups read under the execution's row lock, in one
    transaction, by every task of a group. So the looks are one after another, each after the commit of the
    one before, and the task that locks last sees every fill of the group (a fill a task made earlier, on its
    own, committed before its own look): none is skipped under READ COMMITTED, and lookups are only added by
    a preflight under that lock. The locks before the last find a lookup pending and stop; one that comes
    after the last finds the next group pending, or the record no longer `measure`, and changes nothing.
    (Each task used to fill on its own and look without the lock first, one round trip and one commit more
    between two levels; a fill under the lock in one task and a look without it in another could each miss
    the other's, so every task takes the lock.)

    Not again if that has happened with these results already (a redelivered copy): a second preflight of an
    `execute` would mint a new grant and void the one the agent holds."""
    try:
        execution = lock_execution(execution_id)
    except NotFound:
        return None
    fill = []
    if results and records.pipelines():
        fill = [_fill_read(results)]
    elif results:
        filled = observations_fill(results=results) > 0 or filled
    # The fill, the looks and what a preflight would read, in one round trip (in this order: each statement
    # sees those before it).
    pk = [_execution_pk(execution.pk)]
    reads = _preflight_reads(execution.pk, execution.principal, execution.request)
    answers = records.raw_reads(*fill, (_pending_sql(), pk), (_has_run_sql(), pk), *reads)
    n = len(fill)
    filled = filled or any(answers[:n])
    pending, ran = answers[n : n + 2]
    if pending:
        return None  # another task of the group is still to record, or a newer group was dispatched
    if execution.verdict != "measure" and not (filled and _may_wait_on_lookups(execution)):
        return None
    if ran:
        return None  # a fresh `execute` would mint a second grant for a call that happened
    with records.prefetched(*reads, rows=answers[n + 2 :]):
        return _preflight_and_record(execution, trigger="lookups", none_pending=True)


def _may_wait_on_lookups(execution: models.Execution) -> bool:
    """For a lookup just recorded, whether the latest record (not `measure`) may have been made without it.
    A record that is not `measure` dispatches nothing, so the lookup was dispatched before it and was still
    running when it was made (an `ask`, say, that came while the group ran); at worst another preflight came
    after the fill, and this one repeats it. Decided from what the server stores, not from the wording of the
    engine's findings.

    Not after `execute`: nothing that record needed was running, and a new preflight would void the grant the
    agent holds. Not after a reviewer's rejection, which is final."""
    return execution.verdict != "execute" and execution.final_at is None


@transaction.atomic
@audit_batch()
def lookups_unsent(*, execution_id: Any, keys: Sequence[str], reason: str) -> int:
    """The broker refused the frontier: its lookups stay pending, marked as waiting to be sent, and the
    execution stays `measure` (waiting) until the sweep sends them (`lookups_sent`). A broker outage is
    ours, not the provider's: it never becomes a hold. Returns how many were newly marked."""
    execution = lock_execution(execution_id)
    marked = models.Observation.objects.filter(
        execution=execution, key__in=keys, observed_at__isnull=True, unsent__isnull=True
    ).update(unsent=reason)
    if marked:  # once per outage, not at every sweep that finds the broker still down
        audit_append(
            kind="lookup_dispatch_failed",
            execution_id=execution.pk,
            body={"keys": list(keys), "reason": reason},
        )
    return marked


@transaction.atomic
@audit_batch()
def lookups_sent(*, execution_id: Any, keys: Sequence[str]) -> int:
    """Lookups that waited for the broker were handed to it now; their time limit counts from now."""
    execution = lock_execution(execution_id)
    # Not only the pending ones: in-process tasks (embedded mode) have recorded theirs already.
    sent = models.Observation.objects.filter(execution=execution, key__in=keys, unsent__isnull=False).update(
        unsent=None, dispatched_at=_now()
    )
    if sent:
        audit_append(kind="lookup_dispatched", execution_id=execution.pk, body={"keys": list(keys)})
    return sent


@transaction.atomic
@audit_batch()
def approval_create(
    *, execution_id: Any, slot_key: str, value_digest_seen: str, approver: AbstractBaseUser
) -> models.Approval:
    """A person's yes to the value of one slot as they saw it (by digest). Approvers cannot approve their own
    request, and an approval of a value that has since changed is refused rather than moved to the new one."""
    execution = lock_execution(execution_id)
    if execution.principal == f"user:{approver.get_username()}":
        raise Conflict("own_request", "an approver cannot approve an execution they requested")
    if _has_run(execution):
        raise Conflict("already_ran", "this execution already ran")
    latest = records.latest_record(execution)
    if is_user_yes_key(slot_key):
        raise Conflict("not_approvable", f"{slot_key}: the requesting user's to answer, not an approver's")
    editor = records.editor_of(latest.record, slot_key)
    if editor == f"user:{approver.get_username()}":
        raise Conflict("four_eyes", f"{slot_key}: you edited this value; another approver has to approve it")
    approvable, value = records.approval_value(latest.record, slot_key)
    if not approvable:
        raise Conflict("not_approvable", f"{slot_key}: nothing awaits approval in the latest record")
    current = value_digest(value)
    if current != value_digest_seen:
        raise Conflict("stale_value", f"{slot_key}: the value changed since it was shown; review it again")
    approval = models.Approval.objects.create(
        execution=execution, slot_key=slot_key, value_digest=current, approver=approver
    )
    audit_append(
        kind="approval",
        execution_id=execution.pk,
        body={
            "slot": slot_key,
            "value_digest": current,
            "approver": f"user:{approver.get_username()}",
            "record_seq": latest.seq,
        },
    )
    _preflight_and_record(execution, trigger="approval")
    return approval


# ---- grants and the execution gate -------------------------------------------------------------------


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
        now=_now(),
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
    grant.save(force_insert=True)
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


@transaction.atomic
def grant_issue(*, execution_id: Any) -> models.Grant | None:
    """A grant for the latest record, which must say `execute`. Preflights issue one themselves; this is for
    a caller whose grant expired unused and whose record still stands. A record whose observations have gone
    stale no longer stands: it is preflighted again (its lookups run again) and None is returned."""
    execution = lock_execution(execution_id)
    latest = records.latest_record(execution)
    if latest.verdict != "execute":
        raise Conflict("not_executable", f"the latest verdict is {latest.verdict}, not execute")
    if _has_run(execution):
        raise Conflict("already_ran", "this execution already ran")
    stale_at = _fresh_until(latest.record)
    if stale_at is not None and stale_at <= _now():
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


@dataclass(frozen=True, slots=True)
class _Refusal:
    code: str
    detail: str


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
            _record_busy(execution_id=execution_id, detail=exc.detail, actor=actor)
        raise


@transaction.atomic
def _record_busy(*, execution_id: Any, detail: str, actor: str) -> None:
    # Refused before the claim (the key's lock was not free): recorded like every refusal of the gate.
    execution = lock_execution(execution_id)
    models.Outcome.objects.create(execution=execution, status="denied", detail=f"effect_busy: {detail}")
    audit_append(
        kind="outcome",
        execution_id=execution.pk,
        body={"status": "denied", "code": "effect_busy", "detail": detail, "grant": None, "actor": actor},
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
    if isinstance(claim, _Refusal):
        raise Conflict(claim.code, claim.detail)
    connector, timeout = _run_timeouts(claim.connector)
    result: Any = None
    try:
        if call_tool is not None:  # the gateway: it checks its upstream's live definition itself
            result = call_tool(connector, claim.server, claim.tool, claim.payload, timeout_s=timeout)
        else:
            result = connectors.call_tool(
                connector,
                claim.server,
                claim.tool,
                claim.payload,
                timeout_s=timeout,
                expected=claim.definition,
            )
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


def json_safe(value: Any) -> Any:
    """The value if it is canonical JSON that PostgreSQL can store (no NUL, no lone surrogate: a tool's answer
    is a server's text), else a description of it: a record must always be writable, above all the record
    that a call ran."""
    try:
        canonical_json(value)
        json_values.check_json(value)
        return value
    except (TypeError, json_values.JSONProblem):
        return {"unrepresentable": repr(value)[:10_000]}


@transaction.atomic
def _gate_claim(
    *, execution_id: Any, token: str, actor: str, rechecked: _Rechecked | None = None
) -> _Claim | _Refusal:
    # The execution row lock serializes every attempt on one execution; the conditional UPDATE below is
    # what makes a nonce single-use even without it.
    execution = lock_execution(execution_id)
    now = _now()
    grant: models.Grant | None = None

    def refuse(status: str, code: str, detail: str) -> _Refusal:
        models.Outcome.objects.create(
            execution=execution, grant=grant, status=status, detail=f"{code}: {detail}"
        )
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
        return _Refusal(code, detail)

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
    stored = grant.record if grant is not None else records.latest_record(execution)
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
        records.record_body_digest(stored.record) != stored.record_digest
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
            retry_over_time(
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


# ---- the gate re-checks what a grant rests on ----------------------------------------------------------


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
            now=_now(),
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
    try:
        recheck = recheck_for(records.engine_contract(stored.contract), payload, principal=claims.principal)
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
                request.measure, request.args_digest, _now(), error=str(exc) or type(exc).__name__
            )
        out[request.key] = obs
    return out


def _gate_recheck(
    execution: models.Execution,
    contract: models.ToolContract,
    stored: models.PreflightRecord,
    rechecked: _Rechecked | None,
    now: datetime,
) -> _Refusal | None:
    """Refuse a grant whose ground has moved: the tool's contract is no longer the current one (a catalog
    change voids grants), or a re-checked condition no longer holds (`state_changed`) or could not be
    measured again (`recheck_failed`)."""
    current = (
        models.ToolContract.objects.filter(server_id=contract.server_id, name=contract.name, current=True)
        .values_list("digest", flat=True)
        .first()
    )
    if current != contract.digest:
        return _Refusal(
            "contract_changed",
            "the tool's contract changed since this grant was issued"
            + ("" if current else " (the tool left the catalog)")
            + "; preflight again",
        )
    engine_contract = records.engine_contract(contract)
    if compile_plan(engine_contract, records.active_rules()).checklist_version != stored.checklist_version:
        # The user/org rules the call was checked against are part of what it was granted under.
        return _Refusal(
            "contract_changed", "the rules this grant was checked against changed; preflight again"
        )
    payload = stored.record["payload"]
    try:
        wanted = recheck_for(engine_contract, payload, principal=execution.principal)
    except ExpressionError as exc:
        return _Refusal("recheck_failed", f"the effect key has no value for this payload: {exc.reason}")
    if wanted is None:
        return None
    if rechecked is None or rechecked.recheck != wanted:
        # Fail closed: a contract that asks for a re-check is never run without one.
        detail = rechecked.error if rechecked is not None and rechecked.error else "the re-check did not run"
        return _Refusal("recheck_failed", detail)
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
        return _Refusal(
            "state_changed",
            "; ".join(f"{f.condition} no longer holds ({f.detail})" for f in changed) + "; preflight again",
        )
    if failures:
        return _Refusal("recheck_failed", "; ".join(f"{f.condition}: {f.detail}" for f in failures))
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
    cutoff = (now or _now()) - timedelta(seconds=settings.PREFLIGHT_RUN_LOST_AFTER_S)
    ended = models.Outcome.objects.filter(grant=OuterRef("pk"), status__in=_RUN_OUTCOMES)
    lost = models.Grant.objects.filter(used_at__lt=cutoff).filter(~Exists(ended))
    n = 0
    for grant_id, execution_id, used_at in lost.values_list("pk", "execution_id", "used_at"):
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


# ---- presets ---------------------------------------------------------------------------------------


def token_sees_presets_of(token: models.AgentToken, principal: str) -> bool:
    """Whether an agent token may list and revoke the presets of `principal`.

    A token restricted to principals: only theirs. An unrestricted token (it may submit for anyone): only
    the principals it has already submitted an execution for, so one agent cannot enumerate or revoke what
    the users of other agents consented to have remembered. Fail closed: a principal the token has never
    acted for is refused, even though submitting for them would be allowed."""
    if token.principals:
        return principal in token.principals
    return models.Execution.objects.filter(token=token, principal=principal).exists()


def preset_list(*, principal: str, token: models.AgentToken | None = None) -> list[models.Preset]:
    """The active presets of `principal`. With a token (the agent API): 403 unless `token_sees_presets_of`."""
    if token is not None and not token_sees_presets_of(token, principal):
        if token.principals:
            raise _refuse_principal(principal)
        raise PermissionDenied(f"this token has submitted no execution for principal {principal!r}")
    return list(
        models.Preset.objects.filter(principal=principal, revoked_at__isnull=True).order_by(
            "tool", "slot_key"
        )
    )


@transaction.atomic
def preset_revoke(*, preset_id: Any, actor: str, token: models.AgentToken | None = None) -> models.Preset:
    """Revoke an active preset. With a token (the agent API), a preset of a principal the token may not see
    (`token_sees_presets_of`) is answered like an unknown one, so its existence does not leak."""
    try:
        preset = models.Preset.objects.select_for_update().get(pk=preset_id, revoked_at__isnull=True)
    except (models.Preset.DoesNotExist, ValueError, ValidationError):
        raise NotFound("unknown_preset", f"no active preset {preset_id}") from None
    if token is not None and not token_sees_presets_of(token, preset.principal):
        raise NotFound("unknown_preset", f"no active preset {preset_id}")
    preset.revoked_at = _now()
    preset.save(update_fields=["revoked_at"])
    audit_append(
        kind="preset",
        execution_id=None,
        body={
            "action": "revoke",
            "preset": preset.pk,
            "principal": preset.principal,
            "tool": preset.tool,
            "slot": preset.slot_key,
            "actor": actor,
        },
    )
    return preset
