"""In a real browser, the console's Content-Security-Policy holds: no page breaks it, and no page (the API
docs included) fetches anything from another origin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from console.demo import review_data


def watch(page: Any, origin: str) -> tuple[list[str], list[str]]:
    """(CSP violations the page reported, requests that left `origin`), filled as the page runs."""
    violations: list[str] = []
    foreign: list[str] = []

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", on_console)
    page.on(
        "request",
        lambda request: (
            None if request.url.startswith((origin, "data:", "blob:")) else foreign.append(request.url)
        ),
    )
    return violations, foreign


def test_console_pages_run_under_the_policy_without_a_violation(
    browser_page: Callable[..., Any], live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    review_data.register_bank()
    execution = review_data.held_transfer()
    root = get_user_model().objects.create_superuser("root")
    page = browser_page(root)
    violations, foreign = watch(page, live_server.url)

    for path in ("/executions/", f"/executions/{execution.pk}/", "/catalog/", "/audit/", "/dashboards/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")

    assert violations == []
    assert foreign == []


def test_the_api_docs_render_with_a_way_back_and_nothing_from_a_cdn(
    browser_page: Callable[..., Any], live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    page = browser_page()
    violations, foreign = watch(page, live_server.url)

    page.goto("/api/docs/")
    expect(page.get_by_role("heading", name="Preflight agent API")).to_be_visible()
    page.wait_for_load_state("networkidle")
    screenshot(page, "api-docs")

    assert violations == []
    assert foreign == []
    page.get_by_role("link", name="Back to the Preflight console").click()
    expect(page).to_have_url(f"{live_server.url}/")


def test_signing_out_lands_on_the_consoles_own_sign_in_page(
    browser_page: Callable[..., Any], live_server: Any, screenshot: Callable[[Any, str], Path]
) -> None:
    approver = get_user_model().objects.create_superuser("approver")
    page = browser_page(approver)
    page.goto("/executions/")

    page.get_by_role("button", name="Sign out").click()

    expect(page).to_have_url(f"{live_server.url}/accounts/login/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    assert "Django administration" not in page.content()
    screenshot(page, "signed-out")
    page.goto("/executions/")  # the session is gone: the queue asks to sign in again
    expect(page).to_have_url(f"{live_server.url}/accounts/login/?next=/executions/")
