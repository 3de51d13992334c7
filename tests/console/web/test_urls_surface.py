"""Every console URL with every method, as every kind of signed-in person who is not an operator (and as
nobody): never a 5xx, a policy without inline script on every answer (error pages too), CSRF on every
write, and nothing an operator owns changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from console_helpers import TRANSFER
from django.contrib.auth.models import Group, User
from django.test import Client
from operator_support import import_catalog, make_gaps, user_with

from console import models
from console.services.gap_reports import gap_report_create

pytestmark = pytest.mark.django_db

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
HOSTILE_FORM = {
    "server": "bank\x00",
    "tools": "[" * 5000,
    "text": '{"name": "x", "rules": NaN}',
    "kind": "mcp_stdio",
    "command": 'python -c \'open("MARKER", "w")\'',
    "url": "http://169.254.169.254/",
    "annotations_trusted": "on",
    "trusted": "on",
    "slot": "arg:amount",
    "value": "1" * 100_000,
    "value_digest": "sha256:" + "0" * 64,
    "payload_digest": "x",
    "status": "closed",
    "action": "save",
    "next": "//evil.example/",
}


def operator_state() -> list[Any]:
    return [
        list(models.Server.objects.order_by("pk").values()),
        list(
            models.ToolContract.objects.order_by("pk").values(
                "pk", "digest", "current", "annotations_trusted"
            )
        ),
        list(models.Measure.objects.order_by("pk").values()),
        list(models.RuleSet.objects.order_by("pk").values()),
        list(models.GapReport.objects.order_by("pk").values("pk", "status")),
        list(models.Approval.objects.order_by("pk").values("pk")),
        list(models.Execution.objects.order_by("pk").values("pk", "verdict", "records")),
    ]


def console_paths() -> list[str]:
    execution = make_gaps(provider=1, user=1, purge=0)[-1]
    operator = user_with("olga", "operator")
    report = gap_report_create(
        cls="provider_gap",
        server="repo",
        tool="delete_repo",
        slot="cond:prose-1",
        contract_digest="",
        detail="",
        title="",
        notes="",
        user=operator,
    )
    server = models.Server.objects.get(name="bank")
    contract = models.ToolContract.objects.filter(server=server).first()
    assert contract is not None
    record = models.PreflightRecord.objects.filter(execution=execution).first()
    assert record is not None
    ex = f"/executions/{execution.pk}/"
    return [
        "/",
        "/health/",
        "/accounts/login/",
        "/accounts/login/?next=//evil.example/",
        "/accounts/logout/",
        "/executions/",
        "/executions/?route=%00&age=-1&page=999999999999",
        ex,
        f"{ex}progress/",
        f"{ex}approve-slot/",
        f"{ex}answer/",
        f"{ex}approve/",
        f"{ex}reject/",
        "/executions/00000000-0000-0000-0000-000000000000/",
        "/audit/",
        "/audit/?verdict=%00&server=%ff",
        f"/audit/records/{record.pk}/",
        "/audit/records/999999/",
        "/audit/verify/",
        "/audit/export.csv",
        "/audit/export.jsonl",
        "/dashboards/",
        "/gap-reports/",
        "/gap-reports/new/",
        f"/gap-reports/{report.pk}/",
        f"/gap-reports/{report.pk}/status/",
        f"/gap-reports/{report.pk}/export.md",
        f"/gap-reports/{report.pk}/export.exe",
        "/catalog/",
        "/catalog/import/",
        "/catalog/import/mcp/",
        f"/catalog/servers/{server.pk}/",
        f"/catalog/servers/{server.pk}/trust/",
        f"/catalog/contracts/{contract.pk}/",
        f"/catalog/contracts/{contract.pk}/diff/{contract.pk}/",
        "/rules/",
        "/rules/new/",
        "/rules/nope/edit/",
        "/rules/%00/edit/",
        "/admin/",
        "/admin/auth/user/",
        "/admin/console/server/",
        "/no/such/page/",
        "/static/../settings.py",
    ]


def test_no_console_url_or_method_gets_a_5xx_a_script_policy_gap_or_a_change_from_a_non_operator(
    tmp_path: Path,
) -> None:
    import_catalog()
    paths = console_paths()
    people: dict[str, User | None] = {
        "nobody": None,
        "requester": user_with("rita"),
        "approver": user_with("carol", "approver"),
        "auditor": user_with("audrey", "auditor"),
        "staff": User.objects.create_user("sam", is_staff=True),
        # Last, and only for "never a 5xx": an operator may change things, but not with this form.
        "operator": user_with("otto", "operator"),
    }
    marker = tmp_path / "pwned"
    form = {**HOSTILE_FORM, "command": HOSTILE_FORM["command"].replace("MARKER", str(marker))}
    before = operator_state()
    bad: list[tuple[Any, ...]] = []
    for who, user in people.items():
        if who == "operator":
            unchanged = operator_state() == before
        for csrf in (True, False):
            client = Client(enforce_csrf_checks=csrf, raise_request_exception=False)
            if user is not None:
                client.force_login(user)
            for path in paths:
                for method in METHODS:
                    if method == "GET" or method == "HEAD" or method == "OPTIONS":
                        response = client.generic(method, path)
                    else:
                        response = getattr(client, method.lower())(path, form)
                    status = response.status_code
                    if status >= 500:
                        bad.append((who, csrf, method, path, status))
                    policy = response.get("Content-Security-Policy", "")
                    if (
                        "script-src 'self'" not in policy
                        or "'unsafe-inline'" in policy.split("script-src")[1].split(";")[0]
                    ):
                        bad.append((who, csrf, method, path, status, "policy", policy[:60]))
                    unsafe = method in ("POST", "PUT", "PATCH", "DELETE") and status in (200, 201, 302)
                    exempt = path.startswith(("/accounts/login/", "/no/", "/static/"))
                    if csrf and unsafe and not exempt:
                        bad.append((who, csrf, method, path, status, "write without a CSRF token"))
                    location = response.get("Location", "")
                    if location.startswith(("//", "http:", "https:", "/\\")):
                        bad.append((who, csrf, method, path, status, "off-site", location))
    assert not bad, "\n".join(map(repr, bad[:60])) + f"\n... {len(bad)} in all"
    assert unchanged
    assert not marker.exists()


def test_a_server_error_page_carries_the_policy_and_says_nothing_of_the_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from console.web import review_queue

    def broken(filters: Any) -> Any:
        raise RuntimeError("secret detail from deep inside")

    monkeypatch.setattr(review_queue, "held", broken)
    client = Client(raise_request_exception=False)
    client.force_login(user_with("carol", "approver"))

    response = client.get("/executions/")

    assert response.status_code == 500
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert b"secret detail" not in response.content and b"Traceback" not in response.content


def test_a_missing_page_and_a_refused_method_carry_the_policy() -> None:
    client = Client()

    for response in (client.get("/no/such/page/"), client.put("/executions/"), client.get("/api/v1/nothing")):
        assert "script-src 'self'" in response["Content-Security-Policy"], response.status_code


@pytest.mark.parametrize(
    "path", ["/rules/%00/edit/", "/catalog/?server=%00", "/executions/?q%00=1", "/gap-reports/%00/"]
)
def test_a_nul_in_a_url_is_a_400_with_the_policy_even_for_an_operator(path: str) -> None:
    client = Client()
    client.force_login(user_with("otto", "operator"))

    response = client.get(path)

    assert response.status_code in (400, 404)
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_an_operator_whose_role_is_removed_mid_session_is_refused_on_the_next_request() -> None:

    otto = user_with("otto", "operator")
    client = Client()
    client.force_login(otto)
    assert client.get("/catalog/import/").status_code == 200
    otto.groups.remove(Group.objects.get(name="operator"))

    response = client.post("/catalog/import/", {"server": "bank", "tools": json.dumps([TRANSFER])})

    assert response.status_code == 403
    assert not models.Server.objects.exists()
