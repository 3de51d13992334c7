"""The review page of issue 17: a refused edit says why on its field, every edit shows what it replaced (and
an edit back restores the user's own source), a final decision reads as final, words before keys, a hold on
a provider gap says what can be done, and the open page follows other approvers' actions."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from operator_support import delete_repo_request, import_catalog
from review_support import (
    field_error,
    latest,
    person,
    settle_all_but_the_call,
    signed_in,
    slot,
    slot_row,
    text_of,
    use_demo_bank,
    user_answers,
)

from console import models
from console.demo import review_data
from console.demo.review_data import BOB
from console.services.executions import execution_create
from console.services.gap_reports import gap_report_create
from console.services.review import execution_reject, execution_reviewer_answer
from console.services.tokens import agent_token_create
from console.web.review_rows import when_text

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def held(db: None, monkeypatch: pytest.MonkeyPatch) -> models.Execution:
    use_demo_bank(monkeypatch)
    return review_data.held_transfer()


@pytest.fixture
def carol(db: None) -> User:
    return person("carol", "approver")


@pytest.fixture
def approver(carol: User) -> Client:
    return signed_in(carol)


def url(execution: models.Execution, action: str = "") -> str:
    return f"/executions/{execution.pk}/" + (f"{action}/" if action else "")


def edit(client: Client, execution: models.Execution, key: str, value: str, **extra: Any) -> Any:
    return client.post(url(execution, "answer"), {"slot": key, "value": value}, **extra)


# ---- a value the engine refuses is refused up front, on its field, in words ---------------------------


@pytest.mark.parametrize(
    ("key", "typed", "reason", "accepts"),
    [
        (
            "fixed:timing",
            "next tuesday maybe",
            '"next tuesday maybe" is not a time the gate can read',
            'immediate (or "now"), or a date and time with its UTC offset, e.g. 2026-12-03T09:00:00+01:00',
        ),
        (
            "fixed:timing",
            "2026-12-03T10:00:00",  # a local time: which one?
            '"2026-12-03T10:00:00" is not a time the gate can read',
            'immediate (or "now")',
        ),
        ("arg:amount", "-5", "-5 is less than or equal to the minimum of 0", "a number greater than 0"),
        ("arg:amount", '"1500"', "'1500' is not of type 'number'", "(digits, no quotes), e.g. 120"),
    ],
    ids=["relative-words", "no-offset", "negative", "quoted-number"],
)
def test_a_value_the_engine_refuses_is_a_422_with_the_reason_and_the_accepted_form_on_its_field(
    approver: Client, held: models.Execution, key: str, typed: str, reason: str, accepts: str
) -> None:
    before = latest(held)["record_digest"]

    response = edit(approver, held, key, typed)

    assert response.status_code == 422
    html = response.content.decode()
    error = field_error(html, key)
    assert error.startswith(f"Not recorded: {reason}.") and accepts in error
    row = slot_row(html, key)
    assert "<details open>" in row and 'aria-invalid="true"' in row
    assert re.search(r'name="value" value="([^"]*)"', row).group(1).replace("&quot;", '"') == typed  # kept
    assert "recorded and the execution was preflighted again" not in html  # no green banner
    assert not models.Answer.objects.filter(execution=held).exists()
    assert latest(held)["record_digest"] == before


def test_with_htmx_a_refused_value_is_the_review_partial_with_status_422(
    approver: Client, held: models.Execution
) -> None:
    response = edit(approver, held, "arg:amount", "-5", **HTMX)

    assert response.status_code == 422
    html = response.content.decode()
    assert html.strip().startswith('<section id="review"')
    assert "a number greater than 0" in field_error(html, "arg:amount")


def test_now_for_the_timing_is_immediately_and_is_recorded(approver: Client, held: models.Execution) -> None:
    user_answers(held, {"fixed:timing": "2026-12-24T09:00:00+00:00"})  # the user changed their mind

    response = edit(approver, held, "fixed:timing", "Now")

    assert response.status_code == 302
    assert models.Answer.objects.filter(channel="reviewer").get().value == "immediate"
    timing = slot(latest(held), "fixed:timing")
    assert (timing["value"], timing["source"]) == ("immediate", "user_answer")  # the reviewer's, not the turn


def test_the_api_refusal_says_what_the_slot_takes(held: models.Execution) -> None:
    from rest_framework.test import APIClient

    row, token = agent_token_create(name="agent")
    models.Execution.objects.filter(pk=held.pk).update(token=row)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = agent.post(
        f"/api/v1/executions/{held.pk}/answers", {"answers": {"fixed:timing": "soon"}}, format="json"
    )

    assert response.status_code == 422
    assert response.json()["accepts"].startswith('immediate (or "now")')


# ---- every reviewer edit shows what it replaced; editing back restores the user's source --------------


def test_a_reviewers_edit_shows_the_value_it_replaced_and_where_that_came_from(
    approver: Client, held: models.Execution
) -> None:
    edit(approver, held, "arg:amount", "1200")  # nobody had approved 1500: still a diff

    row = slot_row(approver.get(url(held)).content.decode(), "arg:amount")

    assert 'data-testid="replaced"' in row
    assert (
        'replaces <del>1500</del> <span class="was-source">(instruction · turn 0)</span> → <ins>1200</ins>'
        in row
    )


def test_an_edit_of_an_unsettled_slot_says_it_replaced_nothing(
    approver: Client, held: models.Execution
) -> None:
    edit(approver, held, "arg:memo", "rent")

    row = slot_row(approver.get(url(held)).content.decode(), "arg:memo")

    assert "replaces nothing: it was not settled → <ins>rent</ins>" in row


def test_editing_back_to_the_users_words_restores_their_turn_as_the_source(
    approver: Client, held: models.Execution
) -> None:
    edit(approver, held, "arg:amount", "1200")
    edit(approver, held, "arg:amount", "1500")

    amount = slot(latest(held), "arg:amount")
    assert (amount["value"], amount["source"]) == (1500, "instruction")
    assert amount["approval"] is None  # the user's own words: no second approver needed for them
    row = slot_row(approver.get(url(held)).content.decode(), "arg:amount")
    assert "instruction · turn 0" in row and "reviewer" not in row and "replaced" not in row


def test_editing_back_to_the_users_own_answer_restores_their_answer_as_the_source(
    approver: Client, held: models.Execution
) -> None:
    user_answers(held, {"arg:memo": "rent"})
    users = slot(latest(held), "arg:memo")["pointer"]
    edit(approver, held, "arg:memo", "gas")
    assert slot(latest(held), "arg:memo")["pointer"]["by"] == "user:carol"

    edit(approver, held, "arg:memo", "rent")

    memo = slot(latest(held), "arg:memo")
    assert (memo["source"], memo["pointer"]) == ("user_answer", users)
    row = slot_row(approver.get(url(held)).content.decode(), "arg:memo")
    assert ">user answer<" in row and "reviewer" not in row


# ---- a final decision reads as final ------------------------------------------------------------------


def test_reject_asks_for_confirmation_first_and_nothing_is_rejected_until_then(
    approver: Client, held: models.Execution
) -> None:
    response = approver.post(url(held, "reject"), {"reason": "not on file"})

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="reject-confirm"' in html and "A rejection is final" in html
    assert 'name="confirmed" value="on"' in html and 'name="reason" value="not on file"' in html
    held.refresh_from_db()
    assert held.rejected_at is None and latest(held)["verdict"] == "ask"


def test_after_a_rejection_the_page_shows_the_decision_and_nothing_to_act_on(
    approver: Client, carol: User, held: models.Execution
) -> None:
    execution_reject(execution_id=held.pk, reason="the recipient is not on file", reviewer=carol)

    html = approver.get(url(held)).content.decode()

    decision = re.search(r'data-testid="final-decision">(.*?)</div>', html, re.S)
    assert decision, "no final decision"
    words = text_of(decision.group(1))
    rejected_at = when_text(models.Rejection.objects.get().created_at)
    assert f"Rejected by carol at {rejected_at}." in words and rejected_at.endswith(" UTC")
    assert "Reason: the recipient is not on file" in words
    for needless in ("needs an approver", "the user is asked", "<form", "hx-get", "Edit</summary>"):
        assert needless not in html.split('<table class="slots">')[1].split("</table>")[0], needless
    assert "unresolved" not in slot_row(html, "arg:from_account")


def test_after_a_grant_edit_and_reject_say_what_they_would_do(
    approver: Client,
    held: models.Execution,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)
    approver.post(url(held, "approve"), {"payload_digest": record["payload_digest"]})

    html = approver.get(url(held)).content.decode()

    assert 'data-testid="granted"' in html
    assert "Edit (voids the grant)</summary>" in slot_row(html, "arg:memo")
    assert "the grant is void, and another approver has to approve your value" in slot_row(html, "arg:memo")
    assert "Rejecting withdraws the grant: the agent's run is refused." in html


# ---- words first, keys on hover; values whole; one time format ----------------------------------------


def test_rows_say_in_words_what_each_key_route_and_approval_means(
    approver: Client, held: models.Execution
) -> None:
    html = approver.get(url(held)).content.decode()

    change = slot_row(html, "fixed:intended_change")
    assert '<abbr class="label" title="fixed:intended_change">the intended change</abbr>' in change
    assert "what the call changes, as the tool declares it" in change
    source = slot_row(html, "arg:from_account")
    assert '<abbr class="route route-ask_user" title="ask_user">the user is asked</abbr>' in source
    call = slot_row(html, "approval:large_transfer")
    assert '<abbr class="approval-required" title="required: ' in call and ">needs an approver</abbr>" in call


def test_an_iban_is_shown_in_groups_of_four(approver: Client, held: models.Execution) -> None:
    row = slot_row(approver.get(url(held)).content.decode(), "arg:to_account")

    assert f'<span class="v" title="{BOB}">DE02 1203 0000 0000 2020 51</span>' in row
    assert BOB == "DE02120300000000202051"  # the payload keeps it exactly as it is sent


def test_an_optional_value_left_out_says_so_with_null_on_hover() -> None:
    from console.web.review_rows import Context, slot_rows

    record = {"slots": [{"key": "arg:memo", "status": "null", "value": None, "source": "user_answer"}]}
    (row,) = slot_rows(record, Context(now=datetime(2026, 1, 1, tzinfo=UTC)))

    assert (row.value, row.value_title) == ("left out", "null")


def test_every_time_is_written_one_way_with_its_zone() -> None:
    at = datetime(2026, 12, 2, 10, 21, 43, tzinfo=UTC)
    assert when_text(at) == "2026-12-02 10:21:43 UTC"
    assert when_text("2026-12-02T11:21:43+01:00") == "2026-12-02 10:21:43 UTC"
    assert when_text(at, timezone(timedelta(hours=1), "CET")) == "2026-12-02 11:21:43 CET"
    assert when_text(None) == "—"


def test_the_page_lists_its_keyboard_shortcuts_and_links_the_next_held_execution(
    approver: Client, held: models.Execution
) -> None:
    other = review_data.held_transfer(principal="user:bob", amount=75)

    html = approver.get(url(held)).content.decode()

    shortcuts = text_of(html.split('data-testid="shortcuts"')[1].split("</details>")[0])
    for listed in (
        "j / k next / previous slot",
        "a approve the selected slot",
        "A (shift+a) approve the execution",
        "r reject",
        "n next held execution",
    ):
        assert listed in shortcuts
    assert f'<a href="/executions/{other.pk}/" rel="next"' in html
    assert (
        "<script>" not in html and "onclick" not in html
    )  # CSP: behaviour lives in static/console/review.js


def test_the_next_held_execution_is_the_one_the_queue_lists_next(
    approver: Client, held: models.Execution, carol: User
) -> None:
    # The queue lists a conversation's executions together, at the first of them, and orders two created in
    # the same instant by id: first, its sibling (created last), then the two tied ones, then round again.
    sibling, *tied = (review_data.held_transfer(amount=a) for a in (75, 80, 85))
    at = models.Execution.objects.get(pk=held.pk).created_at
    executions = models.Execution.objects.filter
    executions(pk=sibling.pk).update(conversation_key=held.conversation_key, created_at=at + timedelta(2))
    executions(pk__in=[t.pk for t in tied]).update(created_at=at + timedelta(1))
    queue = [held.pk, sibling.pk, *sorted(t.pk for t in tied)]
    assert [r["id"] for r in approver.get("/executions/").context["page"].rows] == queue

    def next_of(pk: Any) -> str | None:
        html = approver.get(f"/executions/{pk}/").content.decode()
        match = re.search(r'<a href="/executions/([^/]+)/" rel="next"', html)
        return match.group(1) if match else None

    assert [next_of(pk) for pk in queue] == [str(pk) for pk in [*queue[1:], queue[0]]]
    # Decided, an execution leaves the queue; its page still leads to the one listed after it.
    execution_reject(execution_id=held.pk, reason="no", reviewer=carol)
    assert next_of(held.pk) == str(sibling.pk)


# ---- a hold on a provider gap says what can be done ---------------------------------------------------


@pytest.fixture
def gap_held(db: None) -> models.Execution:
    import_catalog()
    execution = execution_create(body=delete_repo_request(), token=None, actor="test")
    assert execution.verdict == "hold"
    return execution


def test_a_hold_on_a_provider_gap_offers_rejecting_or_filing_the_gap_report(
    gap_held: models.Execution,
) -> None:
    olga = signed_in(person("olga", "approver", "operator"))

    html = olga.get(url(gap_held)).content.decode()

    assert 'data-testid="approve-execution"' not in html  # no disabled button left to wonder about
    hold = text_of(html.split('data-testid="gap-hold"')[1].split("</div>")[0])
    assert "Held by a gap in the tool's definition." in hold and "reject it" in hold
    assert re.search(r'href="/gap-reports/new/\?cls=provider_gap&amp;server=repo&amp;tool=delete_repo', html)
    assert "Reject…</button>" in html


def test_a_gap_already_reported_links_its_report(gap_held: models.Execution) -> None:
    record = latest(gap_held)
    gap = next(g for g in record["gaps"] if g["class"] == "provider_gap")
    report = gap_report_create(
        cls="provider_gap",
        server="repo",
        tool="delete_repo",
        slot=gap["slot"],
        contract_digest=record["contract_digest"],
        detail="no state change",
        title="declare it",
        notes="",
        user=person("olga", "operator"),
    )

    html = signed_in(person("dan", "approver")).get(url(gap_held)).content.decode()

    assert f'<a href="/gap-reports/{report.pk}/">see gap report #{report.pk}</a> (open)' in html


# ---- the open page follows what others do -------------------------------------------------------------


def test_the_live_poll_is_204_while_nothing_moved_and_the_page_once_another_approver_acted(
    approver: Client, held: models.Execution
) -> None:
    html = approver.get(url(held)).content.decode()
    poll = re.search(r'hx-get="(/executions/[^"]+/live/\?v=[^"]+)" hx-trigger="every 5s"', html)
    assert poll, "no live poll"

    assert approver.get(poll.group(1).replace("&amp;", "&"), **HTMX).status_code == 204
    execution_reviewer_answer(
        execution_id=held.pk, slot_key="arg:memo", value="rent", reviewer=person("dave", "approver")
    )
    moved = approver.get(poll.group(1), **HTMX)

    assert moved.status_code == 200 and moved.headers["HX-Retarget"] == "#review"
    assert "reviewer answer · user:dave" in slot_row(moved.content.decode(), "arg:memo")
    assert approver.get(poll.group(1)).status_code == 302  # without htmx: the page itself


def test_a_final_page_polls_no_more(approver: Client, carol: User, held: models.Execution) -> None:
    execution_reject(execution_id=held.pk, reason="no", reviewer=carol)

    assert "every 5s" not in approver.get(url(held)).content.decode()
