"""The review page of issue 17 in a real browser: a refused edit says why on its field, an edit shows what it
replaced, reject is confirmed (a dialog with JavaScript, a page without), a grant's Edit says it voids it,
the keyboard approves a whole execution, and an open page follows another approver. Screenshots go to
artifacts/."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from approver_pages import edit, person, settle_all_but_the_call, slot, user_answers
from playwright.sync_api import expect

from console import models
from console.demo import review_data
from console.demo.review_data import ALICE_MAIN
from console.services.review import execution_reviewer_answer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def held() -> models.Execution:
    review_data.register_bank()
    return review_data.held_transfer()


def review(browser_page: Callable[..., Any], execution: models.Execution, user: Any, **kw: Any) -> Any:
    page = browser_page(user, **kw)
    page.goto(f"/executions/{execution.pk}/")
    return page


def try_edit(page: Any, key: str, value: str) -> Any:
    """Type `value` into the slot's edit form and save it; the row as it is then."""
    row = slot(page, key)
    if not row.locator("details").evaluate("d => d.open"):
        row.locator("summary").click()
    row.locator("input[name=value]").fill(value)
    row.get_by_role("button", name="Save as my answer").click()
    return row


def test_a_value_the_engine_refuses_shows_the_reason_on_its_field_and_keeps_nothing_and_now_is_immediate(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], held: models.Execution
) -> None:
    user_answers(held, {"fixed:timing": "2026-12-24T09:00:00+00:00"})  # the user changed their mind
    held.refresh_from_db()
    records = held.records
    page = review(browser_page, held, person("dave", "approver"))

    amount = try_edit(page, "arg:amount", "-5")
    error = amount.get_by_test_id("edit-error")
    expect(error).to_contain_text("Not recorded: -5 is less than or equal to the minimum of 0.")
    expect(error).to_contain_text("It takes a number greater than 0")
    expect(amount.locator("input[name=value]")).to_have_value("-5")  # what was typed, to correct
    expect(amount.locator("input[name=value]")).to_have_attribute("aria-invalid", "true")
    expect(amount.locator(".v")).to_have_text("1500")
    screenshot(page, "review-edit-refused")

    timing = try_edit(page, "fixed:timing", "next tuesday maybe")
    error = timing.get_by_test_id("edit-error")
    expect(error).to_contain_text('Not recorded: "next tuesday maybe" is not a time the gate can read.')
    expect(error).to_contain_text('immediate (or "now")')
    expect(page.get_by_test_id("edit-error")).to_have_count(1)  # the amount's error went with its value
    held.refresh_from_db()
    assert held.records == records and not models.Answer.objects.filter(channel="reviewer").exists()

    try_edit(page, "fixed:timing", "now")
    expect(slot(page, "fixed:timing").locator(".v")).to_have_text("immediately")
    expect(page.get_by_test_id("edit-error")).to_have_count(0)
    expect(page.locator(".messages")).to_contain_text("your value is recorded")
    assert models.Answer.objects.get(channel="reviewer").value == "immediate"


def test_a_reviewers_edit_shows_the_old_value_and_its_source_and_editing_back_restores_the_users_source(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], held: models.Execution
) -> None:
    page = review(browser_page, held, person("dave", "approver"))
    amount = slot(page, "arg:amount")
    expect(amount.locator("td.source")).to_have_text("instruction · turn 0")

    edit(page, "arg:amount", "1200")
    expect(amount.get_by_test_id("replaced")).to_have_text(
        "your edit · replaces 1500 (instruction · turn 0) → 1200"
    )
    expect(amount.locator("td.source")).to_contain_text("reviewer answer · user:dave")
    screenshot(page, "review-edit-diff")

    edit(page, "arg:amount", "1500")
    expect(amount.get_by_test_id("replaced")).to_have_count(0)
    expect(amount.locator("td.source")).to_have_text("instruction · turn 0")


def test_reject_is_confirmed_in_a_dialog_or_on_a_page_and_then_nothing_is_left_to_act_on(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], held: models.Execution
) -> None:
    dave = person("dave", "approver")
    page = review(browser_page, held, dave)
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.get_by_label("Reason for rejecting").fill("the recipient is not on file")
    page.get_by_role("button", name="Reject…").click()

    decision = page.get_by_test_id("final-decision")
    expect(decision).to_contain_text("Rejected by dave at")
    expect(decision).to_contain_text("Reason: the recipient is not on file")
    assert asked and asked[0].startswith("Reject this execution? It is final")
    expect(page.get_by_test_id("verdict")).to_have_text("block")
    review_region = page.locator("#review")
    for actionable in ("button.approve", "table.slots summary", "form.edit", "form.reject", "#live"):
        expect(review_region.locator(actionable)).to_have_count(0)
    expect(page.get_by_test_id("approve-execution")).to_have_count(0)
    screenshot(page, "review-rejected")

    # Without JavaScript the same button asks on a page of its own, and nothing is rejected until then.
    other = review_data.held_transfer(principal="user:bob", amount=75)
    plain = review(browser_page, other, dave, javascript=False)
    plain.get_by_label("Reason for rejecting").fill("Bob has no such account")
    plain.get_by_role("button", name="Reject…").click()
    expect(plain.get_by_test_id("reject-confirm")).to_contain_text("Your reason: Bob has no such account")
    assert not models.Rejection.objects.filter(execution=other).exists()
    plain.get_by_role("button", name="Reject, final").click()
    expect(plain.get_by_test_id("final-decision")).to_contain_text("Reason: Bob has no such account")
    expect(plain.locator("#review form")).to_have_count(0)


def test_after_a_grant_the_edit_says_it_voids_the_grant_and_saving_one_does(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], held: models.Execution
) -> None:
    settle_all_but_the_call(held)
    page = review(browser_page, held, person("dave", "approver"))
    page.get_by_test_id("approve-execution").click()
    expect(page.get_by_test_id("granted")).to_be_visible()

    memo = slot(page, "arg:memo")
    expect(memo.locator("summary")).to_have_text("Edit (voids the grant)")
    expect(page.locator("form.reject .hint")).to_contain_text(
        "Rejecting withdraws the grant: the agent's run is refused."
    )
    memo.locator("summary").click()
    expect(memo.locator("form.edit .hint")).to_contain_text("the grant is void")
    screenshot(page, "review-granted-edit")

    memo.locator("input[name=value]").fill("gas")
    memo.get_by_role("button", name="Save as my answer").click()
    # The user consented to the call as it was: the changed one goes back to them.
    expect(page.get_by_test_id("verdict")).to_have_text("ask")
    expect(page.get_by_test_id("granted")).to_have_count(0)
    expect(slot(page, "arg:memo").locator("summary")).to_have_text("Edit")


def test_an_approver_approves_an_execution_by_keyboard_alone(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], held: models.Execution
) -> None:
    # Another approver's memo waits for a second approver; the user then consents to the call with it.
    user_answers(held, {"arg:memo": "rent", "arg:from_account": ALICE_MAIN})
    execution_reviewer_answer(
        execution_id=held.pk,
        slot_key="arg:memo",
        value="rent for December",
        reviewer=person("frank", "approver"),
    )
    user_answers(held, {"confirm:arg:to_account": True, "consent:call": True})
    following = review_data.held_transfer(principal="user:bob", amount=75)
    page = review(browser_page, held, person("dave", "approver"))
    keys = page.locator("tr.slot[data-key]").evaluate_all("rows => rows.map(r => r.dataset.key)")
    focused = "document.activeElement.dataset.key"

    page.keyboard.press("j")
    assert page.evaluate(focused) == keys[0]
    page.keyboard.press("j")
    page.keyboard.press("k")
    assert page.evaluate(focused) == keys[0]
    expect(page.get_by_test_id("approve-execution")).to_be_disabled()  # the memo's approval comes first
    for _ in range(keys.index("arg:memo")):
        page.keyboard.press("j")
    assert page.evaluate(focused) == "arg:memo"
    page.keyboard.press("a")
    memo = slot(page, "arg:memo")
    expect(memo.locator(".approval-approved")).to_have_text("approved")
    expect(memo).to_be_focused()  # the swapped row keeps the keyboard's place

    page.keyboard.press("A")
    expect(page.get_by_test_id("verdict")).to_have_text("execute")
    expect(page.get_by_test_id("granted")).to_be_visible()
    screenshot(page, "review-keyboard-granted")
    assert models.Grant.objects.filter(execution=held, used_at__isnull=True).count() == 1

    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(rf"/executions/{following.pk}/$"))
    page.keyboard.press("r")
    expect(page.get_by_label("Reason for rejecting")).to_be_focused()


def test_an_open_review_page_shows_another_approvers_decision_without_a_reload(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], held: models.Execution
) -> None:
    settle_all_but_the_call(held)
    watching = review(browser_page, held, person("dave", "approver"))
    acting = review(browser_page, held, person("frank", "approver"))
    expect(watching.get_by_test_id("verdict")).to_have_text("hold")
    watching.evaluate("window.stayed = true")  # gone if the page were loaded again

    acting.get_by_test_id("approve-execution").click()
    expect(acting.get_by_test_id("granted")).to_be_visible()

    # The page polls every 5 s; the swap lands within one round.
    expect(watching.get_by_test_id("verdict")).to_have_text("execute", timeout=12_000)
    expect(watching.get_by_test_id("granted")).to_be_visible()
    assert watching.evaluate("window.stayed") is True
    screenshot(watching, "review-live-update")
