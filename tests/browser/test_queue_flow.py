"""The approver's queue and the auditor's records in a real browser: route chips and pages, search, claims,
"assigned to me", invalid filters, and the filtered export. Screenshots go to artifacts/."""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from approver_pages import held_deletion, person, register_repo, user_answers
from playwright.sync_api import expect

from console import models
from console.demo import review_data
from console.web import audit as audit_views
from console.web import review_queue

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def hrefs(page: Any, selector: str) -> list[str]:
    return page.locator(selector).evaluate_all("links => links.map(a => a.getAttribute('href'))")


def listed(page: Any) -> list[str]:
    """The executions on the queue's page, in order."""
    return page.locator("#queue tr.item").evaluate_all("rows => rows.map(r => r.dataset.execution)")


def test_the_queues_route_chips_narrow_the_list_and_its_pages_keep_the_filters(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(review_queue, "PAGE_SIZE", 2)  # the live server runs in this process
    review_data.register_bank()
    register_repo()
    first, second, third = (review_data.held_transfer(amount=a) for a in (1500, 1600, 1700))
    deletion = held_deletion("acme/web")
    page = browser_page(person("carol", "approver"))

    page.goto("/executions/?sort=newest")
    expect(page.locator(".route-counts .total")).to_have_text("4 matching")
    assert listed(page) == [str(deletion.pk), str(third.pk)]
    assert not [h for h in hrefs(page, "#queue a") if "??" in h]

    # The chip narrows the list to its route and keeps the sort; the count says how many it gives.
    page.locator(".route-counts a[data-route=ask_user]").click()
    expect(page).to_have_url(re.compile(r"/executions/\?sort=newest&route=ask_user$"))
    expect(page.locator(".route-counts .total")).to_have_text("3 matching")
    assert listed(page) == [str(third.pk), str(second.pk)]
    expect(page.locator(".pager")).to_contain_text("page 1 of 2")

    page.get_by_role("link", name="next →").click()
    expect(page.locator(".pager")).to_contain_text("page 2 of 2")
    assert listed(page) == [str(first.pk)]
    assert not [h for h in hrefs(page, "#queue a") if "??" in h]
    screenshot(page, "queue-route-page-2")
    page.get_by_role("link", name="← previous").click()
    expect(page.locator(".pager")).to_contain_text("page 1 of 2")
    assert listed(page) == [str(third.pk), str(second.pk)]

    # The chip already picked clears the route again, and the page with it.
    page.locator(".route-counts a.current[data-route=ask_user]").click()
    expect(page).to_have_url(re.compile(r"/executions/\?sort=newest$"))
    expect(page.locator(".route-counts .total")).to_have_text("4 matching")
    assert listed(page) == [str(deletion.pk), str(third.pk)]


def test_the_audit_pages_csv_export_after_filtering_holds_exactly_the_rows_shown(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    review_data.register_bank()
    register_repo()
    alices = review_data.held_transfer()
    user_answers(alices, {"arg:memo": "rent"})  # a second record, still `ask`
    review_data.held_transfer(principal="user:bob", amount=75)  # `ask` too, but Bob's
    held_deletion("acme/web", principal="user:alice")  # Alice's, but `hold`
    page = browser_page(person("erin", "auditor"))

    page.goto("/audit/")
    expect(page.locator("table.records tbody tr")).to_have_count(4)
    page.get_by_label("verdict", exact=True).select_option("ask")
    page.get_by_label("principal").fill("user:alice")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#records .exports")).to_contain_text("2 records")
    shown = page.locator("table.records tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[1].innerText.trim(), r.cells[2].innerText.trim(),"
        " r.cells[4].innerText.trim(), r.cells[6].innerText.trim()])"
    )
    screenshot(page, "audit-filtered")

    with page.expect_download() as download:
        page.get_by_role("link", name="CSV").click()
    with open(download.value.path(), newline="", encoding="utf-8") as exported:
        rows = list(csv.DictReader(exported))

    exported_rows = [[r["execution_id"][:8], r["seq"], r["verdict"], r["principal"]] for r in rows]
    assert exported_rows == shown
    assert shown == [[str(alices.pk)[:8], s, "ask", "user:alice"] for s in ("2", "1")]


def test_the_audit_pages_pages_keep_its_filter_and_list_each_record_once(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_views, "PAGE_SIZE", 2)  # the live server runs in this process
    review_data.register_bank()
    register_repo()
    alices = review_data.held_transfer()
    user_answers(alices, {"arg:memo": "rent"})
    user_answers(alices, {"arg:memo": "rent, March"})
    held_deletion("acme/web", principal="user:bob")  # filtered out
    page = browser_page(person("erin", "auditor"))

    page.goto("/audit/")
    page.get_by_label("principal").fill("user:alice")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#records .exports")).to_contain_text("3 records")

    def seqs() -> list[str]:
        return page.locator("table.records tbody tr").evaluate_all(
            "rows => rows.map(r => r.cells[2].innerText.trim())"
        )

    first = seqs()
    assert not [h for h in hrefs(page, ".pager a") if "??" in h]
    page.get_by_role("link", name="older →").click()
    expect(page.locator(".pager")).to_contain_text("page 2 of 2")
    expect(page).to_have_url(re.compile(r"principal=user%3Aalice.*page=2|page=2.*principal=user%3Aalice"))
    second = seqs()
    screenshot(page, "audit-page-2")
    assert len(first) == 2 and len(second) == 1
    assert sorted(first + second) == ["1", "2", "3"]  # every record of Alice's, once, none of Bob's
    page.get_by_role("link", name="← newer").click()
    expect(page.locator(".pager")).to_contain_text("page 1 of 2")
    assert seqs() == first


def test_an_invalid_filter_value_is_a_400_page_that_names_the_field(browser_page: Callable[..., Any]) -> None:
    review_data.register_bank()
    review_data.held_transfer()
    page = browser_page(person("erin", "auditor"))  # an auditor reads the queue and the records

    response = page.goto("/executions/?route=teleport")
    assert response.status == 400
    expect(page.get_by_role("alert")).to_contain_text(
        "route: Select a valid choice. teleport is not one of the available choices."
    )
    expect(page.locator("#queue")).to_contain_text("Nothing is listed until the filters are valid.")
    expect(page.locator("#queue tr.item")).to_have_count(0)

    response = page.goto("/audit/?date_from=yesterday")
    assert response.status == 400
    expect(page.get_by_role("alert")).to_contain_text("date_from: Enter a valid date.")
    expect(page.locator("#records")).to_contain_text("Nothing is listed until the filters are valid.")
    # The page's own export link carries the same filter, and is refused the same way.
    export = page.request.get(page.get_by_role("link", name="CSV").get_attribute("href"))
    assert export.status == 400 and "date_from: Enter a valid date." in export.text()


def test_an_approver_triages_the_queue_by_search_and_claims_and_releases_an_execution(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    review_data.register_bank()
    register_repo()
    transfer = review_data.held_transfer()
    web = held_deletion("acme/web")
    held_deletion("acme/api", principal="user:erin")
    page = browser_page(person("carol", "approver"))
    page.goto("/executions/")
    expect(page.locator("#queue tr.item")).to_have_count(3)
    search = page.get_by_role("searchbox", name="search")

    # Words of the summary, typed into the search box: the list narrows in place, the address follows.
    search.fill("repository acme/web")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"q=repository(\+|%20)acme%2Fweb"))
    expect(page.locator("#queue tr.item")).to_have_count(1)
    expect(page.locator("#queue tr.item a.summary")).to_have_text("delete the repository acme/web")
    search.fill("EUR")
    search.press("Enter")
    # One row before the swap and after it: wait for the row itself.
    expect(page.locator("#queue tr.item")).to_have_attribute("data-execution", str(transfer.pk))
    search.fill("acme")
    search.press("Enter")
    expect(page.locator("#queue tr.item")).to_have_count(2)

    # A claim comes back to the queue as it was filtered, and says whose the execution is.
    page.get_by_role("button", name="Claim delete the repository acme/web").click()
    expect(page.locator(".messages")).to_contain_text("Claimed: the others see it is yours.")
    expect(page).to_have_url(re.compile(r"q=acme"))
    claimed = page.locator(f"#queue tr.item[data-execution='{web.pk}']")
    expect(claimed.locator(".claimed-by")).to_have_text("claimed by carol")
    assert models.ReviewClaim.objects.get().execution_id == web.pk

    page.get_by_role("link", name="clear").click()
    expect(page.locator("#queue tr.item")).to_have_count(3)
    page.get_by_label("assigned to me").check()
    expect(page.locator("#queue tr.item")).to_have_count(1)
    assert listed(page) == [str(web.pk)]
    screenshot(page, "queue-assigned-to-me")

    page.get_by_role("button", name="release").click()
    expect(page.locator(".messages")).to_contain_text("Released.")
    expect(page.locator("#queue")).to_contain_text("Nothing is waiting.")
    assert not models.ReviewClaim.objects.exists()
