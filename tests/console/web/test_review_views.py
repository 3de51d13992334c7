"""The queue and the review form, per role: who may see and do what, what each page shows, and that every
action works as a plain form POST (redirect) and as an htmx request (the named partial only)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from review_support import (
    edited_by,
    field_error,
    latest,
    person,
    settle_all_but_the_call,
    signed_in,
    slot,
    slot_row,
    use_demo_bank,
)

from console import models
from console.demo import review_data
from console.demo.review_data import ALICE_MAIN, ALICE_SAVINGS, BOB
from console.services.executions import execution_create, execution_repreflight
from console.services.review import approval_create, execution_reject, execution_reviewer_answer
from console.web import review_queue
from preflight.approvals import value_digest

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def bank(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    use_demo_bank(monkeypatch)


@pytest.fixture
def held(bank: None) -> models.Execution:
    return review_data.held_transfer()


@pytest.fixture
def carol(db: None) -> User:
    return person("carol", "approver")


@pytest.fixture
def approver(carol: User) -> Client:
    return signed_in(carol)


def url(execution: models.Execution, action: str = "") -> str:
    return f"/executions/{execution.pk}/" + (f"{action}/" if action else "")


# ---- who may see what ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/executions/", "/executions/{id}/", "/executions/{id}/progress/"])
def test_every_page_needs_a_login(client: Client, held: models.Execution, path: str) -> None:
    response = client.get(path.format(id=held.pk))

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/executions/")


def test_a_polled_partial_sends_a_signed_out_browser_to_the_login_page(client: Client) -> None:
    response = client.get("/executions/", **HTMX)

    # Not a login form swapped into the queue: the whole window goes to the sign-in page.
    assert response.headers["HX-Redirect"] == "/accounts/login/?next=/executions/"


@pytest.mark.parametrize("role", [None, "operator"])
def test_people_without_the_role_get_a_403_that_says_why(held: models.Execution, role: str | None) -> None:
    user = person("olga", *([role] if role else []))

    for path in ("/executions/", url(held)):
        response = signed_in(user).get(path)

        assert response.status_code == 403
        text = response.content.decode()
        assert "needs the approver or auditor role" in text
        assert "manage.py grant_role olga approver" in text


def test_an_auditor_reads_the_review_page_without_any_form(held: models.Execution) -> None:
    response = signed_in(person("erin", "auditor")).get(url(held))

    assert response.status_code == 200
    html = response.content.decode()
    assert "arg:from_account" in html
    assert (
        "Approve</button>" not in html and "Save as my answer" not in html and "Reject</button>" not in html
    )


@pytest.mark.parametrize("action", ["approve-slot", "answer", "approve", "reject"])
def test_only_approvers_act_and_auditors_are_told_why(held: models.Execution, action: str) -> None:
    response = signed_in(person("erin", "auditor")).post(url(held, action), {"slot": "arg:to_account"})

    assert response.status_code == 403
    assert "Approving, editing or rejecting an execution needs the approver role" in response.content.decode()
    assert models.PreflightRecord.objects.filter(execution=held).count() == 1


@pytest.mark.parametrize("action", ["approve-slot", "answer", "approve", "reject"])
def test_actions_are_posts(approver: Client, held: models.Execution, action: str) -> None:
    assert approver.get(url(held, action)).status_code == 405


def test_forms_need_the_csrf_token(carol: User, held: models.Execution) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(carol)

    response = client.post(
        url(held, "approve-slot"), {"slot": "arg:to_account", "value_digest": value_digest(BOB)}
    )

    assert response.status_code == 403
    assert "security token" in response.content.decode()
    assert not models.Approval.objects.exists()


def test_the_review_page_carries_the_token_in_every_form(approver: Client, held: models.Execution) -> None:
    html = approver.get(url(held)).content.decode()

    forms = html.count('<form method="post"')
    assert forms > 5
    # base.html's sign-out form is outside <main>; every form has one hidden csrf field.
    assert html.count('name="csrfmiddlewaretoken"') == forms


# ---- the queue -------------------------------------------------------------------------------------------


def test_the_queue_lists_held_executions_with_counts_per_route(
    approver: Client, held: models.Execution
) -> None:
    other = review_data.held_transfer(principal="user:bob", amount=20, memo=None)

    response = approver.get("/executions/")

    assert response.status_code == 200
    html = response.content.decode()
    assert f"/executions/{held.pk}/" in html and f"/executions/{other.pk}/" in html
    assert re.search(r'data-route="ask_user">ask_user <strong>2</strong>', html)
    assert re.search(r'data-route="measure">measure <strong>0</strong>', html)
    assert "2 matching" in html


def test_the_queue_filters_by_route_gap_server_tool_and_age(approver: Client, held: models.Execution) -> None:
    assert approver.get("/executions/", {"route": "ask_user"}).context["page"].total == 1
    assert approver.get("/executions/", {"route": "measure"}).context["page"].total == 0
    assert approver.get("/executions/", {"gap": "user_gap"}).context["page"].total == 1
    assert approver.get("/executions/", {"gap": "provider_gap"}).context["page"].total == 0
    assert (
        approver.get("/executions/", {"server": "bank", "tool": "transfer_funds"}).context["page"].total == 1
    )
    assert approver.get("/executions/", {"tool": "get_balance"}).context["page"].total == 0
    assert approver.get("/executions/", {"age": "1h"}).context["page"].total == 0
    models.Execution.objects.filter(pk=held.pk).update(created_at=timezone.now() - timedelta(hours=2))
    assert approver.get("/executions/", {"age": "1h"}).context["page"].total == 1


def test_executions_that_are_not_held_leave_the_queue(
    approver: Client, carol: User, held: models.Execution
) -> None:
    execution_reject(execution_id=held.pk, reason="not today", reviewer=carol)

    assert approver.get("/executions/").context["page"].total == 0


def test_parallel_executions_of_one_conversation_are_listed_together(approver: Client, bank: None) -> None:
    first = review_data.held_transfer(amount=10)
    review_data.held_transfer(principal="user:bob", amount=11)  # another conversation, in between
    twin = review_data.held_transfer(amount=10)  # same turns, same person: the same conversation

    rows = approver.get("/executions/").context["page"].rows

    assert [r["id"] for r in rows][:2] == [first.pk, twin.pk]
    assert rows[0]["group_size"] == 2
    assert "One conversation, 2 parallel executions" in approver.get("/executions/").content.decode()
    together = approver.get("/executions/", {"conversation": first.conversation_key}).context["page"]
    assert [r["id"] for r in together.rows] == [first.pk, twin.pk]


def test_the_queue_is_paginated(approver: Client, bank: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(review_queue, "PAGE_SIZE", 2)
    made = [review_data.held_transfer(amount=10 + i) for i in range(5)]

    page = approver.get("/executions/", {"page": 3}).context["page"]

    assert (page.number, page.pages, page.total) == (3, 3, 5)
    assert [r["id"] for r in page.rows] == [made[4].pk]


def test_an_htmx_refresh_of_the_queue_is_only_the_partial(approver: Client, held: models.Execution) -> None:
    full = approver.get("/executions/").content.decode()
    partial = approver.get("/executions/", {"route": "ask_user"}, **HTMX).content.decode()

    assert "<html" in full and '<div id="queue"' in full and 'hx-trigger="every 5s"' in full
    assert "<html" not in partial and "<form" not in partial
    assert partial.strip().startswith('<div id="queue" hx-get="/executions/?route=ask_user"')


# ---- the review form -------------------------------------------------------------------------------------


def test_the_review_page_shows_every_slot_with_its_source_and_highlights(
    approver: Client, held: models.Execution
) -> None:
    html = approver.get(url(held)).content.decode()

    missing = slot_row(html, "arg:from_account")
    assert "unresolved" in missing.split('"')[1] and "ask_user" in missing
    proposed = slot_row(html, "arg:memo")
    assert "unverified" in proposed.split('"')[1]
    assert "proposed, no source" in proposed and "model proposed <code>rent</code>" in proposed
    recipient = slot_row(html, "arg:to_account")
    assert "instruction · turn 0" in recipient and "tag-confirm" in recipient
    # The recipient is the user's to confirm: shown as evidence, never as an approver's button.
    assert "Approve</button>" not in recipient
    confirmation = slot_row(html, "confirm:arg:to_account")
    assert "the user&#x27;s to answer, not an approver&#x27;s" in confirmation and "ask_user" in confirmation
    assert "Approve</button>" not in confirmation and "Save as my answer" not in confirmation
    assert "declared by the tool" in slot_row(html, "fixed:intended_change")
    assert "waits for arg:from_account" in slot_row(html, "cond:not_to_self")


def test_the_conversation_marks_pointed_spans_and_untrusted_turns(
    approver: Client, held: models.Execution
) -> None:
    html = approver.get(url(held)).content.decode()
    text = held.request["conversation"][0]["content"]
    start = text.index(BOB)

    # Without JS the span is already marked; the row carries the same pointer for the hover highlight.
    assert (
        f'<mark class="found" data-spans="0:{start}:{start + len(BOB)}" title="arg:to_account">{BOB}</mark>'
        in html
    )
    assert f'data-pointer="0:{start}:{start + len(BOB)}" data-turn="0" data-start="{start}"' in slot_row(
        html, "arg:to_account"
    )
    assert 'class="turn untrusted"' in html and "untrusted: not a source" in html
    assert f"pay the rent to {ALICE_SAVINGS}" in html  # shown, never marked as a source
    assert "console/review.js" in html


def test_the_payload_is_shown_exactly_as_it_would_be_sent(approver: Client, held: models.Execution) -> None:
    html = unescape(approver.get(url(held)).content.decode())

    assert f'"to_account": "{BOB}"' in html and '"amount": 1500' in html
    assert "not checked yet" in html  # schema validation waits until every slot is settled
    assert "Transfers cannot be recalled." in html
    assert latest(held)["contract_digest"][7:19] in html


def test_an_htmx_request_of_the_review_page_is_only_the_partial(
    approver: Client, held: models.Execution
) -> None:
    partial = approver.get(url(held), **HTMX).content.decode()

    assert partial.strip().startswith('<section id="review"')
    assert "<html" not in partial and '<header class="site"' not in partial


@pytest.fixture
def edited(held: models.Execution) -> models.Execution:
    """Another approver (dave) set the memo: it awaits a second approver's approval (four eyes)."""
    edited_by(held, person("dave", "approver"))
    return held


def test_approving_a_slot_without_js_redirects_back_to_the_page(
    approver: Client, edited: models.Execution
) -> None:
    page = approver.get(url(edited)).content.decode()
    assert f'value="{value_digest("rent")}"' in slot_row(page, "arg:memo")  # bound to the value shown

    response = approver.post(
        url(edited, "approve-slot"), {"slot": "arg:memo", "value_digest": value_digest("rent")}
    )

    assert response.status_code == 302
    assert response["Location"] == url(edited) + "#review"
    assert slot(latest(edited), "arg:memo")["approval"] == "approved"
    page = approver.get(url(edited)).content.decode()
    assert "memo: approved" in page
    assert models.Approval.objects.get().approver.username == "carol"  # the login, never a form field


def test_approving_a_slot_with_htmx_answers_with_the_partial(
    approver: Client, edited: models.Execution
) -> None:
    response = approver.post(
        url(edited, "approve-slot"), {"slot": "arg:memo", "value_digest": value_digest("rent")}, **HTMX
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert html.strip().startswith('<section id="review"')
    assert "approval-approved" in slot_row(html, "arg:memo")


def test_an_approver_cannot_approve_their_own_edit(edited: models.Execution) -> None:
    dave = signed_in(User.objects.get(username="dave"))

    response = dave.post(
        url(edited, "approve-slot"), {"slot": "arg:memo", "value_digest": value_digest("rent")}, follow=True
    )

    assert "you edited this value; another approver has to approve it" in response.content.decode()
    assert not models.Approval.objects.exists()


def test_an_approval_of_a_value_that_changed_is_refused_with_the_reason(
    approver: Client, edited: models.Execution
) -> None:
    response = approver.post(
        url(edited, "approve-slot"),
        {"slot": "arg:memo", "value_digest": value_digest("DE00")},
        follow=True,
    )

    assert "the value changed since it was shown; review it again" in response.content.decode()
    assert not models.Approval.objects.exists()


def test_an_approver_cannot_approve_what_they_requested(held: models.Execution) -> None:
    alice = signed_in(person("alice", "approver"))  # held.principal is user:alice

    page = alice.get(url(held)).content.decode()
    response = alice.post(
        url(held, "approve-slot"), {"slot": "arg:to_account", "value_digest": value_digest(BOB)}
    )

    assert "you cannot approve it" in page and "Approve</button>" not in page
    assert response.status_code == 403
    assert "You requested this execution" in response.content.decode()
    assert not models.Approval.objects.exists()


def test_editing_a_value_records_the_reviewers_answer_and_voids_its_approval(
    approver: Client, edited: models.Execution
) -> None:
    approval_create(
        execution_id=edited.pk,
        slot_key="arg:memo",
        value_digest_seen=value_digest("rent"),
        approver=person("frank", "approver"),
    )

    response = approver.post(url(edited, "answer"), {"slot": "arg:memo", "value": "gas"}, **HTMX)

    answer = models.Answer.objects.filter(execution=edited).latest("pk")
    assert (answer.value, answer.channel, answer.answered_by) == ("gas", "reviewer", "user:carol")
    assert slot(latest(edited), "arg:memo")["approval"] == "void"
    row = slot_row(response.content.decode(), "arg:memo")
    assert "<del>rent</del> → <ins>gas</ins>" in row
    assert "reviewer answer · user:carol" in row and "approval-void" in row


def test_an_edit_is_read_by_the_arguments_type(approver: Client, held: models.Execution) -> None:
    approver.post(url(held, "answer"), {"slot": "arg:amount", "value": "250.5"})
    approver.post(url(held, "answer"), {"slot": "arg:memo", "value": "00123"})
    refused = approver.post(url(held, "answer"), {"slot": "arg:amount", "value": "a lot"})

    record = latest(held)
    assert slot(record, "arg:amount")["value"] == 250.5
    assert slot(record, "arg:memo")["value"] == "00123"  # a string argument keeps the text as typed
    assert refused.status_code == 422
    assert "Not recorded: 'a lot' is not of type 'number'" in unescape(refused.content.decode())
    assert models.Answer.objects.filter(slot_key="arg:amount").count() == 1


def test_a_reviewers_value_the_question_refuses_is_a_form_error_on_that_field_and_settles_nothing(
    approver: Client, held: models.Execution
) -> None:
    before = latest(held)["record_digest"]
    refused = approver.post(url(held, "answer"), {"slot": "arg:amount", "value": "-5"})

    assert refused.status_code == 422
    error = field_error(refused.content.decode(), "arg:amount")
    assert error == (
        "Not recorded: -5 is less than or equal to the minimum of 0."
        " It takes a number greater than 0 (digits, no quotes), e.g. 120."
    )
    assert not models.Answer.objects.filter(execution=held).exists()
    assert latest(held)["record_digest"] == before
    assert models.AuditEvent.objects.filter(execution_id=held.pk, kind="answer_refused").count() == 1


def test_a_slot_that_no_answer_settles_cannot_be_edited(approver: Client, held: models.Execution) -> None:
    response = approver.post(url(held, "answer"), {"slot": "cond:not_to_self", "value": "true"}, follow=True)

    assert "this slot is not settled by an answer" in response.content.decode()
    assert not models.Answer.objects.exists()


def test_approve_execution_is_disabled_until_only_the_call_awaits_approval(
    approver: Client, held: models.Execution
) -> None:
    html = approver.get(url(held)).content.decode()
    response = approver.post(
        url(held, "approve"), {"payload_digest": latest(held)["payload_digest"]}, follow=True
    )

    assert re.search(r'data-testid="approve-execution" disabled>', html)
    assert "the verdict is ask: settle the open slots first" in html
    assert "the verdict is ask" in response.content.decode()
    assert latest(held)["verdict"] == "ask"


def test_approving_the_execution_issues_the_grant(
    approver: Client,
    carol: User,
    held: models.Execution,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)
    page = approver.get(url(held)).content.decode()
    assert re.search(r'data-testid="approve-execution">', page)  # enabled

    response = approver.post(url(held, "approve"), {"payload_digest": record["payload_digest"]}, **HTMX)

    assert latest(held)["verdict"] == "execute"
    assert models.Grant.objects.filter(execution=held, used_at__isnull=True).count() == 1
    html = response.content.decode()
    assert 'data-testid="granted"' in html
    assert {a.slot_key for a in models.Approval.objects.filter(execution=held)} == {"approval:large_transfer"}


def test_approving_an_execution_whose_payload_changed_is_refused(
    approver: Client,
    carol: User,
    held: models.Execution,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    settle_all_but_the_call(held, django_capture_on_commit_callbacks)

    response = approver.post(url(held, "approve"), {"payload_digest": "sha256:" + "0" * 64}, follow=True)

    assert "the payload changed since it was shown" in response.content.decode()
    assert latest(held)["verdict"] == "hold"


def test_rejecting_needs_a_reason_and_blocks_the_execution(approver: Client, held: models.Execution) -> None:
    empty = approver.post(url(held, "reject"), {"reason": "  "}, follow=True)
    assert "reason: This field is required." in empty.content.decode()

    response = approver.post(
        url(held, "reject"), {"reason": "the recipient is not on file", "confirmed": "on"}, follow=True
    )

    html = response.content.decode()
    assert latest(held)["verdict"] == "block"
    assert "Rejected by carol" in html and "the recipient is not on file" in html
    assert "Save as my answer" not in html and "Reject…</button>" not in html


def test_progress_is_polled_while_lookups_run_and_swaps_the_page_when_the_verdict_changes(
    approver: Client, carol: User, held: models.Execution
) -> None:
    # Answered, but the lookup's task has not run yet (no commit in this test): the record says measure.
    execution_reviewer_answer(execution_id=held.pk, slot_key="arg:memo", value="x", reviewer=carol)
    execution_reviewer_answer(
        execution_id=held.pk, slot_key="arg:from_account", value=ALICE_MAIN, reviewer=carol
    )
    held.refresh_from_db()
    assert held.verdict == "measure"
    page = approver.get(url(held)).content.decode()
    assert f'hx-get="/executions/{held.pk}/progress/?seq={held.records}" hx-trigger="every 2s"' in page

    same = approver.get(url(held, "progress"), {"seq": held.records}, **HTMX)
    assert same.content.decode().strip().startswith('<div id="progress"')
    assert "running" in same.content.decode()

    from console import tasks

    observation = models.Observation.objects.get(execution=held)
    tasks.measure_run(str(held.pk), observation.key)
    execution_repreflight(execution_id=held.pk, trigger="lookups")
    moved = approver.get(url(held, "progress"), {"seq": held.records}, **HTMX)

    assert moved.headers["HX-Retarget"] == "#review" and moved.headers["HX-Reswap"] == "outerHTML"
    html = moved.content.decode()
    assert html.strip().startswith('<section id="review"')
    assert 'hx-trigger="every 2s"' not in html  # the verdict is no longer measure: polling stops


def test_an_execution_whose_action_is_not_chosen_yet_still_has_a_review_page(
    approver: Client, quick_bank: Any
) -> None:
    from console_helpers import transfer_request

    body = transfer_request()
    del body["server"], body["tool"]
    body["tool_candidates"] = [{"server": "bank", "tool": "transfer"}, {"server": "wires", "tool": "wire"}]
    body["intended_change"] = {"effect": "money_moves"}
    execution = execution_create(body=body, token=None, actor="test")

    response = approver.get(url(execution))

    assert response.status_code == 200
    row = slot_row(response.content.decode(), "fixed:tool")
    assert "unresolved" in row and "ask_user" in row
    assert "Save as my answer" not in row  # choosing among tools is the user's, and tools are never named
    assert approver.get("/executions/").context["page"].total == 1


@pytest.mark.parametrize(
    "text",
    ["[" * 5000 + "]" * 5000, '"\\u0000"', '"\\ud800"', "NaN", "1" + "0" * 30],
    ids=["deep", "nul", "surrogate", "nan", "huge-int"],
)
@pytest.mark.parametrize("slot_key", ["fixed:tool", "fixed:timing", "arg:amount", "arg:memo"])
def test_a_reviewer_value_the_api_would_refuse_is_told_back_and_nothing_is_recorded(
    approver: Client, held: models.Execution, slot_key: str, text: str
) -> None:
    records = held.preflight_records.count()

    response = approver.post(url(held, "answer"), {"slot": slot_key, "value": text}, follow=True)

    # A timing or an amount refuses the text (422, the reason on the field); elsewhere it is the text itself.
    assert response.status_code == (422 if slot_key in ("fixed:timing", "arg:amount") else 200)
    held.refresh_from_db()
    if slot_key == "arg:amount":  # a number: the text is refused; elsewhere it is taken as the text itself
        assert held.preflight_records.count() == records
    for record in held.preflight_records.all():
        assert "\x00" not in json.dumps(record.record)
