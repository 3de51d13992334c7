"""What the console persists. Thin on purpose: engine values are translated at the edge (console/storage.py)
and every write goes through console/services/, which also appends to the audit chain."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q


class AppendOnlyError(Exception):
    """An attempt to change or delete a row whose history must stay as written."""


class AppendOnly(models.Model):
    """Rows that are history: written once, never saved again, never deleted through the ORM.

    Tampering below the ORM (SQL) is what the audit hash chain and record digests detect.
    """

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")


# ---- catalog ---------------------------------------------------------------------------------------


class Server(models.Model):
    CONNECTOR_KINDS = ("python", "mcp_stdio", "mcp_http")

    name = models.CharField(max_length=200, unique=True)
    annotations_trusted = models.BooleanField(default=False)
    # How the execution gate reaches the tools, in the one shape console.connectors.checked_connector accepts.
    connector = models.JSONField(default=dict)
    # Side-car `x-preflight` per tool name, as an operator last gave it: a re-import that names none keeps it.
    extensions = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name


class ToolContract(models.Model):
    """One version of one tool definition. A changed definition is a new row; records keep theirs."""

    server = models.ForeignKey(Server, on_delete=models.PROTECT, related_name="contracts")
    name = models.CharField(max_length=200)
    digest = models.CharField(max_length=80)
    definition = models.JSONField()
    # Part of the digest: the same definition from a trusted server is a different contract.
    annotations_trusted = models.BooleanField(default=False)
    obligations = models.JSONField(default=list)  # preview: what a call must settle, before any request
    problems = models.JSONField(default=list)
    valid = models.BooleanField(default=True)  # False: the engine cannot build a contract from it
    current = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server", "name", "digest"], name="contract_version_unique"),
            models.UniqueConstraint(
                fields=["server", "name"], condition=Q(current=True), name="one_current_contract"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server.name}/{self.name}@{self.digest[7:19]}"


class Measure(models.Model):
    KINDS = ("http", "python", "mcp")

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=10, choices=[(k, k) for k in KINDS])
    url = models.CharField(max_length=2000, blank=True, default="")
    timeout_s = models.FloatField(default=5.0)
    config = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def as_connector_spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "url": self.url,
            "timeout_s": self.timeout_s,
            "config": self.config,
        }

    def __str__(self) -> str:
        return self.name


class RuleSet(models.Model):
    """A user/org checklist, stored as the data `preflight.load_rules` reads."""

    name = models.CharField(max_length=200)
    version = models.CharField(max_length=100)
    data = models.JSONField()
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "version"], name="ruleset_version_unique")]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


class AgentToken(models.Model):
    """An agent's credential for the API. It sees only the executions it created; `principals`, when not
    empty, are the only principals it may submit for (empty: any principal)."""

    name = models.CharField(max_length=200)
    token_sha256 = models.CharField(max_length=64, unique=True)  # the token itself is never stored
    prefix = models.CharField(max_length=16)  # enough to recognise a token in a list
    # A JSON list of principal strings rather than a table: read with the token in the one query that
    # authenticates every API request.
    principals = models.JSONField(default=list, blank=True)
    # Set: an operator token (`manage.py create_operator_token`). It may configure the gate (catalog,
    # measures) and nothing an agent does; the user's operator role is checked on every call, not here.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    @property
    def is_operator_token(self) -> bool:
        return self.user_id is not None

    def may_act_for(self, principal: str) -> bool:
        return not self.principals or principal in self.principals

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


# ---- executions ------------------------------------------------------------------------------------


# Verdicts that wait on a person, a lookup or a provider: the review queue.
HELD_VERDICTS = ("hold", "ask", "measure")


class Execution(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    principal = models.CharField(max_length=200)
    token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL)
    # The contract the latest record was computed against; null while the user picks among tools.
    contract = models.ForeignKey(ToolContract, null=True, blank=True, on_delete=models.PROTECT)
    request = models.JSONField()  # the candidate execution as submitted (validated)
    verdict = models.CharField(max_length=10)  # of the latest record
    timing_at = models.DateTimeField(null=True, blank=True, db_index=True)
    records = models.PositiveIntegerField(default=0)  # how many PreflightRecords; the next seq is +1
    # Executions submitted from the same conversation (same principal, same turns) share this key, so the
    # review queue can show parallel calls of one conversation together. Set once, on insert.
    conversation_key = models.CharField(max_length=80, blank=True, default="")
    # Set by a reviewer's rejection (see Rejection); after it the execution takes no new verdict.
    rejected_at = models.DateTimeField(null=True, blank=True)
    # A hold's deadline (its server's or tool's ReviewPolicy), and when it passed with no decision: expiry is
    # as final as a rejection (console/notifications.py).
    expires_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    # Of the latest record, like `verdict` (written with each record): what the review queue
    # filters and counts by, without a join or a JSON document per row.
    routes = models.CharField(max_length=200, default="", blank=True)
    gap_classes = models.CharField(max_length=200, default="", blank=True)
    unknown_count = models.PositiveIntegerField(default=0)
    # The call in one line (preflight/summary.py) as of the latest record: what the queue shows and searches.
    summary = models.CharField(max_length=250, default="", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The review queue reads only this index: held executions, oldest first, with what it filters on.
            # (Key columns rather than INCLUDE, which SQLite, the embedded database, does not have.)
            models.Index(
                fields=["created_at", "id", "routes", "gap_classes", "contract", "conversation_key"],
                condition=Q(verdict__in=HELD_VERDICTS),
                name="execution_held_queue",
            ),
            models.Index(fields=["conversation_key", "created_at"], name="execution_conversation"),
            # Not db_index=True, which on PostgreSQL adds a LIKE index (varchar_pattern_ops) nothing uses:
            # every preflight changes the verdict, so each index of this table is written on every preflight.
            models.Index(fields=["principal"], name="execution_principal"),
            models.Index(fields=["verdict"], name="execution_verdict"),
        ]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding and not self.conversation_key:
            self.conversation_key = conversation_key(self.principal, self.request)
        elif self.final_at is not None and "verdict" in (kwargs.get("update_fields") or ("verdict",)):
            # A reviewer's no (or an expired deadline) is final. Every new verdict is saved here first, so
            # refusing it here keeps an answer or a lookup arriving later from turning it back into `execute`.
            raise self.final_conflict()
        super().save(*args, **kwargs)

    @property
    def deadline_passed(self) -> bool:
        """Whether it waits past its deadline, not yet expired: whoever reads it first expires it (the sweep
        otherwise), so nobody is shown a decision that can no longer be made."""
        from django.utils import timezone

        return (
            self.expires_at is not None
            and self.expires_at <= timezone.now()
            and self.final_at is None
            and self.verdict in HELD_VERDICTS
        )

    @property
    def final_at(self) -> Any:
        return self.rejected_at or self.expired_at

    def final_conflict(self) -> Exception:
        from console.errors import Conflict

        if self.rejected_at is not None:
            when = f"{self.rejected_at:%Y-%m-%d %H:%M}"
            return Conflict("rejected", f"a reviewer rejected this execution at {when}; submit a new one")
        when = f"{self.expired_at:%Y-%m-%d %H:%M} UTC"
        return Conflict("expired", f"this hold expired undecided at {when}; submit a new one")

    def __str__(self) -> str:
        return f"{self.id} ({self.verdict})"


def conversation_key(principal: str, request: Any) -> str:
    """Digest of who asked and the turns they asked in: equal for calls made from one conversation state."""
    turns = request.get("conversation") if isinstance(request, dict) else None
    raw = json.dumps([principal, turns or []], sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()


class PreflightRecord(AppendOnly):
    """One preflight, exactly as the engine returned it (Record.to_json()), blocked and held ones too."""

    # No index of its own: record_seq_unique (execution, seq) serves it.
    execution = models.ForeignKey(
        Execution, on_delete=models.PROTECT, related_name="preflight_records", db_index=False
    )
    seq = models.PositiveIntegerField()
    contract = models.ForeignKey(ToolContract, null=True, blank=True, on_delete=models.PROTECT)
    verdict = models.CharField(max_length=10)
    record = models.JSONField()
    record_digest = models.CharField(max_length=80)
    payload_digest = models.CharField(max_length=80, null=True, blank=True)
    checklist_version = models.CharField(max_length=500)
    trigger = models.CharField(max_length=20)  # what caused this preflight: create, answer, lookups, ...
    # record_summary(record), written with it, so the review queue can filter and count without the JSON:
    # " ask_user measure " (routes of unresolved slots), " user_gap " (gap classes), how many are unknown.
    routes = models.CharField(max_length=200, default="", blank=True)
    gap_classes = models.CharField(max_length=200, default="", blank=True)
    unknown_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["execution", "seq"], name="record_seq_unique")]
        ordering = ["execution", "seq"]
        indexes = [
            # Audit history: newest first, optionally one verdict.
            models.Index(fields=["created_at"], name="record_created"),
            models.Index(fields=["verdict", "created_at"], name="record_verdict_created"),
        ]


def record_summary(record: Any) -> tuple[str, str, int]:
    """(routes, gap classes, unknown count) of a record, space-delimited with a space at both ends so that
    `routes__contains=" measure "` matches one whole word."""
    if not isinstance(record, dict):
        return "", "", 0
    slots = record.get("slots") or []
    routes = sorted({s["route"] for s in slots if s.get("status") == "unknown" and s.get("route")})
    gaps = sorted({g["class"] for g in record.get("gaps") or []})
    unknown = record.get("unknown_count")
    if not isinstance(unknown, int):
        unknown = sum(1 for s in slots if s.get("status") == "unknown")
    return (f" {' '.join(routes)} " if routes else ""), (f" {' '.join(gaps)} " if gaps else ""), unknown


class Answer(AppendOnly):
    CHANNELS = ("agent", "reviewer")

    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="answers")
    slot_key = models.CharField(max_length=500)
    value = models.JSONField(null=True)
    answered_by = models.CharField(max_length=200)
    channel = models.CharField(max_length=10, choices=[(c, c) for c in CHANNELS])
    remember = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)


class Preset(models.Model):
    """A value a principal consented to have remembered; looked up instead of asked."""

    principal = models.CharField(max_length=200, db_index=True)
    slot_key = models.CharField(max_length=500)
    # "server/tool" the value was given for: an account remembered for transfers is not an answer
    # for every other tool that happens to have an argument of the same name.
    tool = models.CharField(max_length=401)
    value = models.JSONField(null=True)
    consent = models.JSONField()  # {"who", "when", "execution"}
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["principal", "tool", "slot_key"],
                condition=Q(revoked_at__isnull=True),
                name="one_active_preset",
            )
        ]


class Observation(models.Model):
    """One lookup: created pending when dispatched, filled once by the task (a redelivery finds it filled)."""

    # No index of its own: the (execution, key) index serves it.
    execution = models.ForeignKey(
        Execution, on_delete=models.PROTECT, related_name="observations", db_index=False
    )
    measure = models.CharField(max_length=200)  # the contract's measure name
    lookup = models.CharField(max_length=200)  # the Measure it runs
    args = models.JSONField(default=dict)
    args_digest = models.CharField(max_length=80)
    key = models.CharField(max_length=300)  # measure#args_digest, the engine's Observation.key
    value = models.JSONField(null=True)
    error = models.TextField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)  # null: the lookup is still running
    dispatched_at = models.DateTimeField(auto_now_add=True)
    task_key = models.CharField(max_length=400)
    # Set while the broker has refused this pending lookup: it waits to be sent (the sweep sends it again).
    unsent = models.TextField(null=True, blank=True)
    # Set on an error of our own infrastructure (a lookup lost with its task): from then, the next preflight
    # looks it up again. A provider's own error answer never gets one: it stays a hold.
    retry_after = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["execution", "key"]),
            # The sweep's two questions; both columns are NULL on nearly every row.
            models.Index(
                fields=["retry_after"],
                name="observation_retry_after",
                condition=models.Q(retry_after__isnull=False),
            ),
            models.Index(
                fields=["unsent"], name="observation_unsent", condition=models.Q(unsent__isnull=False)
            ),
        ]
        # A constraint rather than unique=True, which on PostgreSQL adds a LIKE index nothing uses.
        constraints = [models.UniqueConstraint(fields=["task_key"], name="observation_task_key_unique")]


class Approval(AppendOnly):
    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="approvals")
    slot_key = models.CharField(max_length=500)
    value_digest = models.CharField(max_length=80)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)


class Rejection(AppendOnly):
    """A reviewer's no, with the reason. It is recorded as a `block` verdict (`record`), and it is final."""

    execution = models.OneToOneField(Execution, on_delete=models.PROTECT, related_name="rejection")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    reason = models.TextField()
    record = models.ForeignKey(PreflightRecord, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)


class ReviewClaim(models.Model):
    """An approver's "I am on it" for one held execution: one approver at a time, shown to the others in the
    queue. Not a decision (nothing is granted or refused by it); its holder releases it."""

    execution = models.OneToOneField(Execution, on_delete=models.CASCADE, related_name="claim")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="claims")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.execution_id} claimed by {self.approver_id}"


class Grant(models.Model):
    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="grants")
    record = models.ForeignKey(PreflightRecord, on_delete=models.PROTECT, related_name="grants")
    nonce = models.CharField(max_length=100)
    claims = models.JSONField()  # the signed claims; the token is re-derived from them, never stored
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # A constraint rather than unique=True, which on PostgreSQL adds a LIKE index nothing uses.
        constraints = [models.UniqueConstraint(fields=["nonce"], name="grant_nonce_unique")]
        # The reconciliation looks for runs started (used) with no outcome; most grants are never used.
        indexes = [
            models.Index(fields=["used_at"], name="grant_used_at", condition=models.Q(used_at__isnull=False))
        ]


class Outcome(AppendOnly):
    STATUSES = ("executed", "failed", "outcome_unknown", "expired", "denied")

    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="outcomes")
    grant = models.ForeignKey(Grant, null=True, blank=True, on_delete=models.PROTECT)
    status = models.CharField(max_length=20, choices=[(s, s) for s in STATUSES])
    result = models.JSONField(null=True)
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)


class GapRow(AppendOnly):
    """One gap of one record, flattened for dashboards (which provider lacks what, how often)."""

    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="gap_rows")
    record = models.ForeignKey(PreflightRecord, on_delete=models.PROTECT, related_name="gap_rows")
    cls = models.CharField(max_length=30)
    server = models.CharField(max_length=200)
    tool = models.CharField(max_length=200)
    slot = models.CharField(max_length=500)
    detail = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["cls", "server", "tool"]),
            # Dashboards read a time window first (last 30 days), then group by class, server and tool.
            models.Index(fields=["created_at", "cls"], name="gaprow_created_cls"),
        ]


class AuditEvent(AppendOnly):
    """One link of the tamper-evident chain. See console/audit.py for what the hash covers."""

    seq = models.PositiveBigIntegerField()
    # Which chain (settings.PREFLIGHT_AUDIT_CHAINS; an execution's events are all in one): each has its own
    # seq, head and lock, and chain 0 anchors the heads of the others (console/audit.py).
    chain = models.PositiveSmallIntegerField(default=0, db_default=0)
    kind = models.CharField(max_length=40)
    execution_id = models.UUIDField(null=True, blank=True, db_index=True)
    body = models.JSONField()
    prev_hash = models.CharField(max_length=80)
    hash = models.CharField(max_length=80)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["chain", "seq"]
        constraints = [models.UniqueConstraint(fields=["chain", "seq"], name="auditevent_chain_seq_unique")]


class AuditChain(models.Model):
    """The head of one audit chain: appends lock it (read in the statement that locks it, console/queries.py
    `advance_head`), so two never link to the same head, and move it on. Its row exists from the chain's
    first append on."""

    chain = models.PositiveSmallIntegerField(primary_key=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=80)


# ---- who is told that a decision waits, and for how long it may wait ---------------------------------


class ReviewPolicy(models.Model):
    """An operator's rule for the holds of one server (tool blank) or one of its tools: who is told that a
    decision waits, and how long it may wait. A tool's policy replaces its server's, it does not add to it."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="review_policies")
    tool = models.CharField(max_length=200, blank=True, default="")
    emails = models.JSONField(default=list, blank=True)  # addresses, as the operator gave them
    webhook_url = models.CharField(max_length=2000, blank=True, default="")
    deadline_s = models.PositiveIntegerField(null=True, blank=True)  # none: a hold waits until decided
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "tool"], name="review_policy_unique")]

    def __str__(self) -> str:
        return f"{self.server}/{self.tool or '*'}"


class Notification(models.Model):
    """One message to one approver channel that one execution waits for a decision; attempts are recorded."""

    CHANNELS = ("email", "webhook")
    STATUSES = ("pending", "sent", "failed")

    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="notifications")
    channel = models.CharField(max_length=10, choices=[(c, c) for c in CHANNELS])
    target = models.CharField(max_length=2000)
    body = models.JSONField()  # what is sent: the summary and the absolute console URL
    status = models.CharField(max_length=10, choices=[(s, s) for s in STATUSES], default="pending")
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["execution", "channel", "target"], name="notification_once_per_target"
            )
        ]


# ---- provider gap reports ----------------------------------------------------------------------------


class GapReport(models.Model):
    """An operator's report of one gap to the tool's provider, with the evidence it was filed from.

    The evidence is frozen when the report is filed (what the operator saw and sent); the gap rows it counts
    stay where they are. Status changes go through services, which append them to `history` and the audit
    chain."""

    STATUSES = ("open", "sent", "resolved")

    cls = models.CharField(max_length=30)
    server = models.CharField(max_length=200)
    tool = models.CharField(max_length=200)
    contract_digest = models.CharField(max_length=80, blank=True, default="")
    slot = models.CharField(max_length=500)
    detail = models.TextField()
    title = models.CharField(max_length=300)
    notes = models.TextField(blank=True, default="")
    # {"records": n, "executions": n, "execution_ids": [...], "record_refs": [...], "first_seen", "last_seen"}
    evidence = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=[(s, s) for s in STATUSES], default="open")
    history = models.JSONField(default=list)  # [{"status", "at", "by", "note"}], oldest first
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "-created_at"], name="gapreport_status_created"),
            models.Index(fields=["server", "tool", "slot"], name="gapreport_tool_slot"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.server}/{self.tool} {self.slot} ({self.status})"
