"""The approver's queue: what each call would do in words (escaped), search, sort, claims, "assigned to me",
the recently decided, and filters that refuse invalid values instead of listing everything."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from console_helpers import said
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from review_support import person, signed_in, use_demo_bank

from console import models
from console.demo import review_data
from console.demo.review_data import BOB
from console.errors import Conflict
from console.services.catalog import catalog_import
from console.services.claims import claim_release, claim_take
from console.services.executions import execution_create
from console.services.review import execution_expire, execution_reject
from console.web.review_rows import when_text

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}

# Held on every call: its description states a rule in prose only (a provider gap).
DELETE_REPO: dict[str, Any] = {
    "name": "delete_repo",
    "description": "Deletes a repository. Requires admin rights.",
    "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
    "x-preflight": {"state_change": "the repository is gone", "summary": "delete the repository {arg.repo}"},
}


@pytest.fixture
def bank(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    use_demo_bank(monkeypatch)


@pytest.fixture
def repo(db: None) -> None:
    catalog_import(server="repo", tools=[DELETE_REPO], annotations_trusted=False, actor="test")


@pytest.fixture
def carol(db: None) -> User:
    return person("carol", "approver")


@pytest.fixture
def approver(carol: User) -> Client:
    return signed_in(carol)


def delete(repo_name: str, principal: str = "user:dave") -> models.Execution:
    text = f"Delete the repository {repo_name} now."
    body = said("repo", "delete_repo", text, {"repo": repo_name}, action="Delete", principal=principal)
    return execution_create(body=body, token=None, actor="test")


def listed(client: Client, **params: Any) -> list[Any]:
    response = client.get("/executions/", params)
    assert response.status_code == 200, response.content.decode()
    return [row["id"] for row in response.context["page"].rows]


# ---- what each call would do ------------------------------------------------------------------------------


def test_each_row_says_what_the_call_would_do_why_it_waits_and_for_whom(approver: Client, bank: None) -> None:
    held = review_data.held_transfer(amount=1500)

    html = approver.get("/executions/").content.decode()

    row = re.search(rf'<tr class="item[^"]*" data-execution="{held.pk}">.*?</tr>', html, re.S)
    assert row, html
    text = " ".join(unescape(re.sub(r"<[^>]+>", " ", row.group(0))).split())
    # The bank's side-car template; the source account is not settled yet, so it shows as "?".
    assert f"send 1500 EUR from ? to {BOB}" in text
    assert "waits for the user's answer" in text
    assert "user:alice" in text


def test_without_a_template_the_tool_and_its_first_settled_arguments_are_the_summary(
    approver: Client, db: None
) -> None:
    plain = {k: v for k, v in DELETE_REPO.items() if k != "x-preflight"}
    plain["x-preflight"] = {"state_change": "the repository is gone"}
    catalog_import(server="repo", tools=[plain], annotations_trusted=False, actor="test")
    held = delete("acme/web")

    assert models.Execution.objects.get(pk=held.pk).summary == "delete_repo: repo=acme/web"


def test_a_summary_from_the_agent_is_escaped(approver: Client, repo: None) -> None:
    delete("<img src=x onerror=alert(1)>")

    html = approver.get("/executions/").content.decode()

    assert "<img src=x" not in html
    assert "delete the repository &lt;img src=x onerror=alert(1)&gt;" in html


def test_an_invalid_summary_template_refuses_the_import_with_the_reason(db: None) -> None:
    bad = {**DELETE_REPO, "x-preflight": {"summary": "delete {arg.repository}"}}

    result = catalog_import(server="repo", tools=[bad], annotations_trusted=False, actor="test")

    assert result.tools[0].version == "invalid"
    assert result.tools[0].problems == [
        {
            "class": "invalid",
            "where": "x-preflight/summary",
            "detail": "summary: unknown placeholder {arg.repository}: 'repository' is not an argument",
        }
    ]


# ---- search, sort, filters --------------------------------------------------------------------------------


def test_search_finds_words_of_the_summary_tool_principal_and_server(
    approver: Client, bank: None, repo: None
) -> None:
    transfer = review_data.held_transfer(amount=1500)
    web = delete("acme/web", principal="user:dave")
    api = delete("acme/api", principal="user:erin")

    assert listed(approver, q="acme/web") == [web.pk]  # the summary
    assert listed(approver, q="EUR") == [transfer.pk]
    assert listed(approver, q="transfer_funds") == [transfer.pk]  # the tool
    assert listed(approver, q="user:erin") == [api.pk]  # the principal
    assert set(listed(approver, q="repo")) == {web.pk, api.pk}  # the server
    assert listed(approver, q="repo erin") == [api.pk]  # every word
    assert listed(approver, q="nothing-like-this") == []


def test_the_queue_sorts_oldest_or_newest_first(approver: Client, repo: None) -> None:
    old, new = delete("acme/old"), delete("acme/new")
    models.Execution.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=1))

    assert listed(approver) == [old.pk, new.pk]
    assert listed(approver, sort="newest") == [new.pk, old.pk]


def test_route_chips_and_pages_link_to_the_filtered_queue(approver: Client, bank: None) -> None:
    review_data.held_transfer()

    html = approver.get("/executions/", {"q": "EUR"}).content.decode()

    chip = re.search(r'<a href="([^"]*)" class="route route-ask_user', html)
    assert chip and unescape(chip.group(1)) == "?q=EUR&route=ask_user"
    # Picking the chip that is picked already clears it.
    html = approver.get("/executions/", {"q": "EUR", "route": "ask_user"}).content.decode()
    chip = re.search(r'<a href="([^"]*)" class="route route-ask_user current', html)
    assert chip and unescape(chip.group(1)) == "?q=EUR"
    assert "??" not in html


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        (
            {"route": "teleport"},
            "route: Select a valid choice. teleport is not one of the available choices.",
        ),
        ({"server": "retail"}, "server: Select a valid choice. retail is not one of the available choices."),
        ({"sort": "sideways"}, "sort: Select a valid choice."),
        ({"page": "two"}, "page: Enter a whole number."),
    ],
)
def test_an_invalid_filter_is_a_400_that_says_why_and_lists_nothing(
    approver: Client, bank: None, params: dict[str, str], reason: str
) -> None:
    review_data.held_transfer()

    response = approver.get("/executions/", params)

    assert response.status_code == 400
    html = unescape(response.content.decode())
    assert "These filters are not valid, so nothing is listed" in html and reason in html
    assert response.context["page"].rows == []


# ---- claims ---------------------------------------------------------------------------------------------


def test_an_approver_claims_an_execution_and_the_others_see_who_has_it(
    approver: Client, carol: User, repo: None
) -> None:
    held = delete("acme/web")
    frank = signed_in(person("frank", "approver"))

    response = approver.post(f"/executions/{held.pk}/claim/", {"next": "/executions/?q=acme"})

    assert response.status_code == 302 and response["Location"] == "/executions/?q=acme"
    assert models.ReviewClaim.objects.get(execution=held).approver == carol
    html = frank.get("/executions/").content.decode()
    assert "claimed by carol" in html
    assert f'formaction="/executions/{held.pk}/claim/"' not in html  # nothing left for frank to claim

    refused = frank.post(f"/executions/{held.pk}/claim/", follow=True)
    assert "carol has claimed this execution since" in refused.content.decode()
    assert models.ReviewClaim.objects.get(execution=held).approver == carol


def test_assigned_to_me_lists_only_my_claims(approver: Client, carol: User, repo: None) -> None:
    mine, other = delete("acme/mine"), delete("acme/other")
    claim_take(execution_id=mine.pk, approver=carol)

    assert listed(approver, mine="on") == [mine.pk]
    assert set(listed(approver)) == {mine.pk, other.pk}


def test_only_the_holder_releases_a_claim(approver: Client, carol: User, repo: None) -> None:
    held = delete("acme/web")
    claim_take(execution_id=held.pk, approver=carol)
    frank = person("frank", "approver")

    with pytest.raises(Conflict, match="carol holds this claim"):
        claim_release(execution_id=held.pk, approver=frank)
    approver.post(f"/executions/{held.pk}/unclaim/")

    assert not models.ReviewClaim.objects.filter(execution=held).exists()


def test_a_claim_is_refused_for_a_decided_execution_and_for_its_requester(carol: User, repo: None) -> None:
    own = delete("acme/own", principal="user:carol")
    decided = delete("acme/done")
    execution_reject(execution_id=decided.pk, reason="no", reviewer=person("frank", "approver"))

    with pytest.raises(Conflict, match="you requested this execution"):
        claim_take(execution_id=own.pk, approver=carol)
    with pytest.raises(Conflict, match="no longer waits"):
        claim_take(execution_id=decided.pk, approver=carol)
    assert not models.ReviewClaim.objects.exists()


def test_an_auditor_sees_claims_but_may_not_claim(carol: User, repo: None) -> None:
    held = delete("acme/web")
    erin = signed_in(person("erin", "auditor"))

    assert "Claim</button>" not in erin.get("/executions/").content.decode()
    response = erin.post(f"/executions/{held.pk}/claim/")

    assert response.status_code == 403
    assert "Claiming an execution needs the approver role" in response.content.decode()


def test_a_claim_posts_from_outside_the_refreshed_list(approver: Client, repo: None) -> None:
    delete("acme/web")

    partial = approver.get("/executions/", **HTMX).content.decode()

    # The 5 s refresh swaps the list: its buttons submit the page's one claims form.
    assert "<form" not in partial and 'form="claims"' in partial


# ---- recently decided -------------------------------------------------------------------------------------


def test_decided_work_stays_findable_as_granted_rejected_or_expired(
    approver: Client, carol: User, repo: None
) -> None:
    rejected, expired, waiting = delete("acme/no"), delete("acme/late"), delete("acme/wait")
    execution_reject(execution_id=rejected.pk, reason="not this one", reviewer=carol)
    models.Execution.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    execution_expire(execution_id=expired.pk)

    response = approver.get("/executions/decided/")

    assert response.status_code == 200
    page = response.context["page"]
    assert {r["id"]: r["decision"] for r in page.rows} == {rejected.pk: "rejected", expired.pk: "expired"}
    assert page.counts == {"granted": 0, "rejected": 1, "expired": 1}
    assert "by carol: not this one" in response.content.decode()
    only = approver.get("/executions/decided/", {"decision": "expired"}).context["page"].rows
    assert [r["id"] for r in only] == [expired.pk]
    assert waiting.pk not in {r["id"] for r in page.rows}


def test_a_call_granted_after_waiting_is_listed_as_granted(approver: Client, bank: None) -> None:
    held = review_data.held_transfer(amount=20, memo=None)
    never_held = models.Execution.objects.create(principal="user:x", request={}, verdict="execute")
    models.Execution.objects.filter(pk=held.pk).update(verdict="execute")

    rows = approver.get("/executions/decided/").context["page"].rows

    assert [(r["id"], r["decision"]) for r in rows] == [(held.pk, "granted")]
    assert never_held.pk not in {r["id"] for r in rows}


def test_the_queue_and_the_decided_list_write_times_as_the_review_page_does(
    approver: Client, carol: User, repo: None
) -> None:
    waiting, rejected = delete("acme/wait"), delete("acme/no")
    execution_reject(execution_id=rejected.pk, reason="not this one", reviewer=carol)
    waiting.refresh_from_db()
    rejected.refresh_from_db()

    queue = approver.get("/executions/").content.decode()
    decided = approver.get("/executions/decided/").content.decode()

    # One format everywhere: `2026-12-02 10:21:43 UTC`, the zone named, beside how long ago.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", when_text(waiting.created_at))
    assert f"since {when_text(waiting.created_at)}</time>" in queue
    assert f">{when_text(rejected.rejected_at)}</time>" in decided
