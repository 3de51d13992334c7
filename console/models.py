"""What the console persists. Thin on purpose: engine values are translated at the edge (console/records.py)
and every write goes through console/services.py, which also appends to the audit chain."""

from __future__ import annotations

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
    # {"kind": "python"|"mcp_stdio"|"mcp_http", "target": ...}: how the execution gate reaches the tools.
    connector = models.JSONField(default=dict)
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
    name = models.CharField(max_length=200)
    token_sha256 = models.CharField(max_length=64, unique=True)  # the token itself is never stored
    prefix = models.CharField(max_length=16)  # enough to recognise a token in a list
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


# ---- executions ------------------------------------------------------------------------------------


class Execution(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    principal = models.CharField(max_length=200, db_index=True)
    token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL)
    # The contract the latest record was computed against; null while the user picks among tools.
    contract = models.ForeignKey(ToolContract, null=True, blank=True, on_delete=models.PROTECT)
    request = models.JSONField()  # the candidate execution as submitted (validated)
    verdict = models.CharField(max_length=10, db_index=True)  # of the latest record
    timing_at = models.DateTimeField(null=True, blank=True, db_index=True)
    records = models.PositiveIntegerField(default=0)  # how many PreflightRecords; the next seq is +1
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.id} ({self.verdict})"


class PreflightRecord(AppendOnly):
    """One preflight, exactly as the engine returned it (Record.to_json()), blocked and held ones too."""

    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="preflight_records")
    seq = models.PositiveIntegerField()
    contract = models.ForeignKey(ToolContract, null=True, blank=True, on_delete=models.PROTECT)
    verdict = models.CharField(max_length=10)
    record = models.JSONField()
    record_digest = models.CharField(max_length=80)
    payload_digest = models.CharField(max_length=80, null=True, blank=True)
    checklist_version = models.CharField(max_length=500)
    trigger = models.CharField(max_length=20)  # what caused this preflight: create, answer, lookups, ...
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["execution", "seq"], name="record_seq_unique")]
        ordering = ["execution", "seq"]


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

    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="observations")
    measure = models.CharField(max_length=200)  # the contract's measure name
    lookup = models.CharField(max_length=200)  # the Measure it runs
    args = models.JSONField(default=dict)
    args_digest = models.CharField(max_length=80)
    key = models.CharField(max_length=300)  # measure#args_digest, the engine's Observation.key
    value = models.JSONField(null=True)
    error = models.TextField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)  # null: the lookup is still running
    dispatched_at = models.DateTimeField(auto_now_add=True)
    task_key = models.CharField(max_length=400, unique=True)

    class Meta:
        indexes = [models.Index(fields=["execution", "key"])]


class Approval(AppendOnly):
    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="approvals")
    slot_key = models.CharField(max_length=500)
    value_digest = models.CharField(max_length=80)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)


class Grant(models.Model):
    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="grants")
    record = models.ForeignKey(PreflightRecord, on_delete=models.PROTECT, related_name="grants")
    nonce = models.CharField(max_length=100, unique=True)
    claims = models.JSONField()  # the signed claims; the token is re-derived from them, never stored
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)


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
        indexes = [models.Index(fields=["cls", "server", "tool"])]


class AuditEvent(AppendOnly):
    """One link of the tamper-evident chain. See console/audit.py for what the hash covers."""

    seq = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=40)
    execution_id = models.UUIDField(null=True, blank=True, db_index=True)
    body = models.JSONField()
    prev_hash = models.CharField(max_length=80)
    hash = models.CharField(max_length=80)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["seq"]
