"""Provider gap reports: the evidence they freeze, their status, their exports."""

from __future__ import annotations

import json
from typing import Any

import pytest
from operator_support import DELETE_REPO, import_catalog, make_gaps, user_with

from console import models
from console.errors import BadInput, Conflict, NotFound
from console.selectors.gap_reports import gap_evidence, report_json, report_markdown
from console.services.catalog import (
    catalog_import,
)
from console.services.executions import execution_create
from console.services.gap_reports import gap_report_create, gap_report_set_status

pytestmark = pytest.mark.django_db


@pytest.fixture
def gaps() -> list[models.Execution]:
    import_catalog()
    return make_gaps(provider=3, user=2, purge=1)


@pytest.fixture
def operator() -> Any:
    return user_with("olga", "operator")


# ---- gap evidence and reports ----------------------------------------------------------------------------


def test_gap_evidence_counts_the_records_and_executions_of_one_contract_version(gaps: Any) -> None:
    evidence = gap_evidence(cls="provider_gap", server="repo", tool="delete_repo", slot="cond:prose-1")

    contract = models.ToolContract.objects.get(server__name="repo", name="delete_repo", current=True)
    assert evidence.contract_digest == contract.digest
    assert evidence.records == 3
    assert evidence.executions == 3
    assert sorted(evidence.execution_ids) == sorted(str(e.pk) for e in gaps[:3])
    assert {r["seq"] for r in evidence.record_refs} == {1}
    assert evidence.details == ["a condition stated only in prose, not declared: 'Requires admin rights.'"]
    assert evidence.kind == "undeclared condition"


def test_gap_evidence_of_a_gap_never_recorded_is_not_found(gaps: Any) -> None:
    with pytest.raises(NotFound):
        gap_evidence(cls="provider_gap", server="repo", tool="delete_repo", slot="cond:prose-9")
    with pytest.raises(NotFound):
        gap_evidence(
            cls="provider_gap",
            server="repo",
            tool="delete_repo",
            slot="cond:prose-1",
            contract_digest="sha256:x",
        )


def test_a_new_contract_version_is_reported_on_its_own(gaps: Any) -> None:
    fixed = dict(DELETE_REPO, description="Deletes a repository. Requires admin rights!")
    catalog_import(server="repo", tools=[fixed], annotations_trusted=False, actor="test")
    from operator_support import delete_repo_request

    execution_create(body=delete_repo_request("acme/new"), token=None, actor="test")

    latest = gap_evidence(cls="provider_gap", server="repo", tool="delete_repo", slot="cond:prose-1")

    assert latest.records == 1
    assert len(latest.other_digests) == 1
    older = gap_evidence(
        cls="provider_gap",
        server="repo",
        tool="delete_repo",
        slot="cond:prose-1",
        contract_digest=latest.other_digests[0],
    )
    assert older.records == 3


def test_filing_a_report_freezes_the_evidence_and_appends_an_audit_event(gaps: Any, operator: Any) -> None:
    report = gap_report_create(
        cls="provider_gap",
        server="repo",
        tool="delete_repo",
        slot="cond:prose-1",
        contract_digest="",
        detail="",
        title="",
        notes="Seen in production since Monday.",
        user=operator,
    )

    assert report.status == "open"
    assert report.title == "repo/delete_repo: undeclared condition (cond:prose-1)"
    assert report.detail.startswith("a condition stated only in prose")
    assert report.evidence["records"] == 3
    assert report.evidence["executions"] == 3
    assert report.history[0]["by"] == "user:olga"
    event = models.AuditEvent.objects.filter(kind="gap_report", body__action="create").get()
    assert event.body["report"] == report.pk
    assert event.body["contract_digest"] == report.contract_digest
    assert event.body["actor"] == "user:olga"


def test_only_provider_gaps_are_reported_to_a_provider(gaps: Any, operator: Any) -> None:
    with pytest.raises(BadInput, match="provider_gap"):
        gap_report_create(
            cls="user_gap",
            server="bank",
            tool="transfer",
            slot="arg:from_account",
            contract_digest="",
            detail="",
            title="",
            notes="",
            user=operator,
        )
    assert not models.GapReport.objects.exists()


def _report(operator: Any, slot: str = "cond:prose-1", tool: str = "delete_repo") -> models.GapReport:
    return gap_report_create(
        cls="provider_gap",
        server="repo",
        tool=tool,
        slot=slot,
        contract_digest="",
        detail="",
        title="",
        notes="",
        user=operator,
    )


def test_status_changes_are_tracked_and_audited(gaps: Any, operator: Any) -> None:
    report = _report(operator)

    gap_report_set_status(report_id=report.pk, status="sent", note="mailed to the provider", user=operator)
    report = gap_report_set_status(report_id=report.pk, status="resolved", user=operator)

    assert [h["status"] for h in report.history] == ["open", "sent", "resolved"]
    assert report.history[1]["note"] == "mailed to the provider"
    changes = models.AuditEvent.objects.filter(kind="gap_report", body__action="status").order_by("seq")
    assert [(e.body["from"], e.body["to"]) for e in changes] == [("open", "sent"), ("sent", "resolved")]


def test_status_changes_refuse_nonsense(gaps: Any, operator: Any) -> None:
    report = _report(operator)

    with pytest.raises(Conflict):
        gap_report_set_status(report_id=report.pk, status="open", user=operator)
    with pytest.raises(BadInput):
        gap_report_set_status(report_id=report.pk, status="lost", user=operator)
    with pytest.raises(NotFound):
        gap_report_set_status(report_id=report.pk + 100, status="sent", user=operator)


def test_markdown_export_carries_the_evidence(gaps: Any, operator: Any) -> None:
    report = _report(operator)
    gap_report_set_status(report_id=report.pk, status="sent", note="to repo-team@", user=operator)
    report.refresh_from_db()

    md = report_markdown(report)

    assert md.startswith(f"# Provider gap report #{report.pk}: repo/delete_repo: undeclared condition")
    assert "- **Tool:** `repo/delete_repo`" in md
    assert f"- **Contract digest:** `{report.contract_digest}`" in md
    assert "- **Slot:** `cond:prose-1`" in md
    assert "- **Status:** sent" in md
    assert "Seen on **3 preflight records** of **3 executions**" in md
    assert "x-preflight.conditions" in md  # what we ask the provider to do about an undeclared condition
    for execution_id in report.evidence["execution_ids"]:
        assert f"| `{execution_id}` | #1 |" in md
    assert "## History" in md and "to repo-team@" in md


def test_json_export_is_stable_and_complete(gaps: Any, operator: Any) -> None:
    report = _report(operator, slot="schema:#", tool="purge_cache")

    data = json.loads(json.dumps(report_json(report)))

    assert data["format"] == "preflight.gap_report/1"
    assert data["gap"] == {
        "class": "provider_gap",
        "kind": "missing schema",
        "slot": "schema:#",
        "detail": "the tool declares no inputSchema (that is not a tool without arguments)",
    }
    assert data["tool"]["server"] == "repo" and data["tool"]["name"] == "purge_cache"
    assert data["tool"]["contract_digest"].startswith("sha256:")
    assert data["evidence"]["records"] == 1
    assert len(data["evidence"]["execution_ids"]) == 1
    assert data["status"] == "open"
    assert "inputSchema" in data["ask"]
