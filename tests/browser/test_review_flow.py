"""The approver's and the auditor's work in a real browser: sign in, review a held transfer slot by slot until
the count says `execute`, and verify the audit chain. Screenshots go to artifacts/."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from approver_pages import edit, person, slot, user_answers
from playwright.sync_api import expect

from console import models
from console.demo import review_data
from console.demo.review_data import ALICE_MAIN, ALICE_SAVINGS, BOB
from console.services.executions import execution_answer, execution_create
from console.services.review import approval_create
from preflight.approvals import value_digest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RED = "rgb(253, 236, 234)"  # --red-bg: an unresolved slot
AMBER = "rgb(255, 244, 214)"  # --amber-bg: a model proposal with no source


def test_an_approver_reviews_a_held_transfer_until_it_may_execute(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    review_data.register_bank()
    execution = review_data.held_transfer()
    # Two calls made from one conversation state, and one more: the queue lists the pair together.
    twins = review_data.transfer_request(amount=40, to_account=ALICE_SAVINGS, memo=None)
    execution_create(body=twins, token=None, actor="test")
    execution_create(body=twins, token=None, actor="test")
    review_data.held_transfer(principal="user:bob", amount=75, memo=None)
    person("carol", "approver", password="carol-pass-Preflight1")

    page = browser_page()  # signed out: the console sends an approver to sign in first
    page.goto("/executions/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/executions/"))
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Password").fill("carol-pass-Preflight1")
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("heading", name="Held executions")).to_be_visible()
    expect(page.locator("tr.group")).to_contain_text("2 parallel executions")
    expect(page.locator(".route-counts [data-route=ask_user] strong")).to_have_text("4")
    screenshot(page, "review-queue")

    page.locator(f"a[href='/executions/{execution.pk}/']").click()
    expect(page.get_by_test_id("verdict")).to_have_text("ask")

    # Red: nobody said which account the money comes from; its route says who can settle it.
    source = slot(page, "arg:from_account")
    expect(source).to_have_class(re.compile(r"\bunresolved\b"))
    expect(source.locator(".route")).to_have_text("the user is asked")
    expect(source).to_have_css("background-color", RED)
    # Amber: the model proposed a memo without pointing at the user's words. Shown, never counted.
    memo = slot(page, "arg:memo")
    expect(memo).to_have_class(re.compile(r"\bunverified\b"))
    expect(memo).to_contain_text("proposed, no source")
    expect(memo).to_have_css("background-color", AMBER)
    # Hovering a slot lights up the words its value was found in.
    slot(page, "arg:to_account").hover()
    expect(page.locator("mark.lit")).to_have_text(BOB)
    screenshot(page, "review-form")

    # The recipient is the user's to confirm: the approver sees that as evidence, with no button of theirs.
    expect(slot(page, "arg:to_account").get_by_role("button", name="Approve to account")).to_have_count(0)
    expect(slot(page, "confirm:arg:to_account")).to_contain_text("the user's to answer, not an approver's")

    # The user answers through the agent; the balance lookup runs; the user confirms and consents.
    user_answers(execution, {"arg:memo": "rent", "arg:from_account": ALICE_MAIN})
    user_answers(execution, {"confirm:arg:to_account": True, "consent:call": True})
    page.reload()
    expect(page.get_by_test_id("verdict")).to_have_text("hold")
    expect(slot(page, "cond:balance_covers_amount").locator(".v")).to_have_text("met")
    expect(slot(page, "confirm:arg:to_account").locator(".v")).to_contain_text("the user said yes")

    approve = page.get_by_test_id("approve-execution")
    expect(approve).to_be_enabled()
    approve.click()
    expect(page.get_by_test_id("verdict")).to_have_text("execute")
    expect(page.get_by_test_id("granted")).to_be_visible()
    screenshot(page, "review-executed")

    execution.refresh_from_db()
    assert execution.verdict == "execute"
    assert not models.Answer.objects.filter(execution=execution, channel="reviewer").exists()
    assert models.Grant.objects.filter(execution=execution, used_at__isnull=True).count() == 1


def test_an_approvers_edit_waits_for_another_approver_and_shows_what_changed(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    review_data.register_bank()
    execution = review_data.held_transfer()
    frank = person("frank", "approver")
    execution_answer(
        execution_id=execution.pk,
        answers={"arg:memo": "rent"},
        answered_by="user:frank",
        channel="reviewer",
        actor="t",
    )
    approval_create(
        execution_id=execution.pk,
        slot_key="arg:memo",
        value_digest_seen=value_digest("rent"),
        approver=person("gina", "approver"),
    )
    page = browser_page(person("dave", "approver"))
    page.goto(f"/executions/{execution.pk}/")
    expect(slot(page, "arg:memo").locator(".approval-approved")).to_have_text("approved")

    # Dave changes the value: gina's approval was for the old one, and dave cannot approve his own edit.
    edit(page, "arg:memo", "gas")
    memo = slot(page, "arg:memo")
    expect(memo.locator(".approval-void")).to_have_text("approval void")
    expect(memo.get_by_test_id("change").locator("del")).to_have_text("rent")
    expect(memo.get_by_test_id("change").locator("ins")).to_have_text("gas")
    expect(memo.locator(".badge")).to_contain_text("reviewer answer · user:dave")
    screenshot(page, "review-void-diff")
    memo.get_by_role("button", name="Approve memo").click()
    expect(page.locator(".messages")).to_contain_text("another approver has to approve it")
    assert (
        frank.username == "frank" and not models.Approval.objects.filter(approver__username="dave").exists()
    )


def test_every_review_form_works_without_javascript(browser_page: Callable[..., Any]) -> None:
    review_data.register_bank()
    execution = review_data.held_transfer()
    person("frank", "approver")
    execution_answer(
        execution_id=execution.pk,
        answers={"arg:memo": "rent"},
        answered_by="user:frank",
        channel="reviewer",
        actor="t",
    )
    page = browser_page(person("dave", "approver"), javascript=False)

    page.goto(f"/executions/{execution.pk}/")
    slot(page, "arg:memo").get_by_role("button", name="Approve memo").click()

    expect(page).to_have_url(re.compile(rf"/executions/{execution.pk}/"))
    expect(slot(page, "arg:memo").locator(".approval-approved")).to_have_text("approved")
    expect(page.locator(".messages")).to_contain_text("memo: approved")


def test_an_auditor_verifies_the_chain(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    review_data.register_bank()
    review_data.held_transfer()
    page = browser_page(person("erin", "auditor"))

    page.goto("/audit/")
    expect(page.locator("table.records tbody tr")).to_have_count(1)
    page.get_by_role("link", name="Verify the chain").click()
    page.get_by_role("button", name="Verify chain").click()

    result = page.get_by_test_id("verify-result")
    expect(result).to_contain_text("OK")
    head = models.AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    expect(result).to_contain_text(f"head seq {head}")
    screenshot(page, "audit-verify")
