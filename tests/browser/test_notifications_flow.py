"""An operator says who is told when a call waits; the approver gets a mail (through a real SMTP server) and a
webhook, follows the link to the review page, and a hold left past its deadline expires."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect

from console import models, tasks
from console.services.catalog import catalog_import
from console.services.executions import execution_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAY: dict[str, Any] = {
    "name": "pay",
    "description": "Pay an invoice.",
    "inputSchema": {
        "type": "object",
        "properties": {"invoice": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["invoice", "amount"],
    },
    "x-preflight": {
        "state_change": "money leaves the company account",
        "conditions": [{"id": "within_limit", "check": "arg.amount <= 100", "on_false": "hold"}],
    },
}


def person(username: str, role: str) -> Any:
    user = get_user_model().objects.create_user(username)
    call_command("grant_role", username, role, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return user


def held_payment(amount: int = 900) -> models.Execution:
    text = f"Pay invoice INV-7 for {amount} EUR now."

    def span(part: str) -> dict[str, int]:
        return {"turn": 0, "start": text.index(part), "end": text.index(part) + len(part)}

    execution = execution_create(
        body={
            "server": "billing",
            "tool": "pay",
            "principal": "user:alice",
            "conversation": [{"role": "user", "content": text, "trusted": True}],
            "candidates": {
                "invoice": {"value": "INV-7", "pointer": span("INV-7")},
                "amount": {"value": amount, "pointer": span(str(amount))},
            },
            "action_name": span("Pay"),
            "timing": {"mode": "immediate", "pointer": span("now")},
        },
        token=None,
        actor="test",
    )
    execution.refresh_from_db()
    assert execution.verdict == "hold", execution.verdict
    return execution


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp(settings: Any) -> Iterator[Inbox]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.PREFLIGHT_EMAIL_HOST = "127.0.0.1"
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5},
        }
    }
    yield inbox
    controller.stop()


@pytest.fixture
def hooks() -> Iterator[list[Any]]:
    bodies: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bodies.append(f"http://127.0.0.1:{server.server_address[1]}/slack")  # the URL, first
    yield bodies
    server.shutdown()


def wait_for(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    end = time.monotonic() + timeout
    while not (found := check()) and time.monotonic() < end:
        time.sleep(0.05)
    return found


def test_an_approver_is_mailed_and_webhooked_and_the_link_opens_the_review(
    browser_page: Callable[..., Any],
    screenshot: Callable[[Any, str], Path],
    smtp: Inbox,
    hooks: list[Any],
    live_server: Any,
    settings: Any,
) -> None:
    settings.PREFLIGHT_PUBLIC_URL = live_server.url
    catalog_import(server="billing", tools=[PAY], annotations_trusted=True, actor="test")
    server = models.Server.objects.get(name="billing")
    hook_url = hooks.pop(0)

    page = browser_page(person("olga", "operator"))
    page.goto(f"/catalog/servers/{server.pk}/")
    form = page.get_by_test_id("review-policy-form")
    form.get_by_label("Emails").fill("ann@example.com")
    form.get_by_label("Webhook url").fill(hook_url)
    form.get_by_label("Deadline minutes").fill("30")
    form.get_by_role("button", name="Save policy").click()
    expect(page.get_by_test_id("review-policy")).to_contain_text("ann@example.com")
    expect(page.get_by_test_id("review-policy")).to_contain_text("30 min")
    screenshot(page, "review-policy")

    execution = held_payment()

    [mail] = wait_for(lambda: smtp.messages)
    link = f"{live_server.url}/executions/{execution.pk}/"
    execution.refresh_from_db()
    assert execution.summary.startswith("pay: ")  # the call in words, from its first settled arguments
    assert mail["To"] == "ann@example.com" and execution.summary in mail["Subject"]
    assert link in mail.get_payload(decode=True).decode()
    [hook] = wait_for(lambda: hooks)
    assert hook["url"] == link and link in hook["text"] and hook["summary"] == execution.summary

    approver = browser_page(person("carol", "approver"))
    approver.goto(re.search(r"http\S+/executions/\S+/", hook["text"])[0])  # type: ignore[index]
    expect(approver.get_by_test_id("verdict")).to_have_text("hold")
    screenshot(approver, "review-from-notification")


def test_a_policy_the_console_refuses_says_why_on_the_field(
    browser_page: Callable[..., Any], settings: Any
) -> None:
    catalog_import(server="billing", tools=[PAY], annotations_trusted=True, actor="test")
    server = models.Server.objects.get(name="billing")
    page = browser_page(person("olga", "operator"))
    page.goto(f"/catalog/servers/{server.pk}/")
    form = page.get_by_test_id("review-policy-form")
    form.get_by_label("Webhook url").fill("https://hooks.example.net/x")
    form.get_by_role("button", name="Save policy").click()

    expect(page.get_by_role("alert")).to_contain_text("PREFLIGHT_HTTP_ALLOW")
    assert not models.ReviewPolicy.objects.exists()


def test_a_hold_past_its_deadline_shows_as_expired_and_cannot_be_approved(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], settings: Any
) -> None:
    catalog_import(server="billing", tools=[PAY], annotations_trusted=True, actor="test")
    olga = person("olga", "operator")
    from console import notifications

    notifications.review_policy_set(
        server_id=models.Server.objects.get(name="billing").pk,
        tool="",
        emails=[],
        webhook_url="",
        deadline_s=60,
        user=olga,
    )
    execution = held_payment()
    execution.refresh_from_db()
    assert execution.expires_at is not None
    tasks.sweep(execution.expires_at + timedelta(seconds=1))

    page = browser_page(person("carol", "approver"))
    page.goto(f"/executions/{execution.pk}/")
    expect(page.get_by_test_id("verdict")).to_have_text("block")
    expect(page.locator("body")).to_contain_text("expired")
    expect(page.get_by_role("button", name=re.compile("^Approve"))).to_have_count(0)
    screenshot(page, "review-expired")
