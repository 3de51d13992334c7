"""Approvers are told that a decision waits (mail, webhook), and a hold past its deadline expires."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from console_helpers import Agent, Downstream, transfer_request
from django.contrib.auth import get_user_model
from django.core import mail
from django.utils import timezone

from console import models, notifications, tasks
from console.errors import BadInput, Conflict
from console.services.review import EXPIRED_SLOT, execution_approve, holds_expire

pytestmark = pytest.mark.django_db(transaction=True)

# The held transfer's one line, as the queue shows it (the bank's tool has no summary template).
SUMMARY = "transfer: from_account=DE89370400440532013000, to_account=DE02120300000000202051, amount=3000"


class Receiver:
    """A webhook receiver on a loopback port: records each JSON body, answers `status`."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def olga() -> Any:
    return get_user_model().objects.create_user("olga")


def policy(olga: Any, *, tool: str = "", **kwargs: Any) -> models.ReviewPolicy | None:
    fields: dict[str, Any] = {"emails": [], "webhook_url": "", "deadline_s": None, **kwargs}
    server = models.Server.objects.get(name="bank")
    return notifications.review_policy_set(server_id=server.pk, tool=tool, user=olga, **fields)


def hold(agent: Agent) -> dict[str, Any]:
    # More than the balance covers: the balance condition holds the call for an approver.
    record: dict[str, Any] = agent.post("/api/v1/executions", transfer_request(amount=3000)).json()
    record = agent.get(f"/api/v1/executions/{record['id']}").json()
    assert record["verdict"] == "hold", record["reasons"]
    return record


def test_a_hold_mails_each_approver_of_its_server_once_with_the_review_link(
    bank: Downstream, agent: Agent, olga: Any, settings: Any
) -> None:
    settings.PREFLIGHT_PUBLIC_URL = "https://preflight.example"
    policy(olga, emails=["ann@example.com", "ben@example.com"])

    record = hold(agent)
    tasks.hold_notify(record["id"])  # a second notice of the same hold sends nothing more

    assert sorted(m.to[0] for m in mail.outbox) == ["ann@example.com", "ben@example.com"]
    link = f"https://preflight.example/executions/{record['id']}/"
    assert all(SUMMARY in m.subject and SUMMARY in m.body and link in m.body for m in mail.outbox)
    rows = models.Notification.objects.filter(execution_id=record["id"])
    assert {(r.status, r.attempts) for r in rows} == {("sent", 1)}


def test_a_tools_own_policy_replaces_its_servers(bank: Downstream, agent: Agent, olga: Any) -> None:
    policy(olga, emails=["server@example.com"])
    policy(olga, tool="transfer", emails=["tool@example.com"])

    hold(agent)

    assert [m.to for m in mail.outbox] == [["tool@example.com"]]


def test_a_webhook_gets_slack_compatible_json_with_the_summary_and_the_absolute_link(
    bank: Downstream, agent: Agent, olga: Any, receiver: Receiver, settings: Any
) -> None:
    settings.PREFLIGHT_PUBLIC_URL = "https://preflight.example"
    policy(olga, webhook_url=receiver.url)

    record = hold(agent)

    [body] = receiver.bodies
    link = f"https://preflight.example/executions/{record['id']}/"
    assert body["url"] == link and link in body["text"]
    assert body["summary"] == SUMMARY and SUMMARY in body["text"]
    assert body["call"] == "transfer on bank" and body["execution"] == record["id"]


def test_a_failed_delivery_is_recorded_and_tried_again_until_the_last_attempt(
    bank: Downstream, agent: Agent, olga: Any, receiver: Receiver
) -> None:
    receiver.status = 503
    policy(olga, webhook_url=receiver.url)
    hold(agent)  # eager mode: one attempt, recorded as failed
    row = models.Notification.objects.get()
    assert (row.status, row.attempts) == ("failed", 1) and "503" in row.last_error

    row.status = "pending"
    row.save()
    with pytest.raises(notifications.DeliveryFailed):
        notifications.notification_send(notification_id=row.pk, final_attempt=False)
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("pending", 2)

    receiver.status = 200
    notifications.notification_send(notification_id=row.pk, final_attempt=False)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == ("sent", 3, "")


def test_a_webhook_outside_the_allow_list_is_refused_when_the_policy_is_set(
    bank: Downstream, olga: Any
) -> None:
    with pytest.raises(BadInput, match="PREFLIGHT_HTTP_ALLOW"):
        policy(olga, webhook_url="https://hooks.slack.com/services/T0/B0/x")
    with pytest.raises(BadInput, match="not an email address"):
        policy(olga, emails=["ann at example"])
    assert not models.ReviewPolicy.objects.exists()


def test_a_hold_past_its_deadline_expires_as_a_final_block_the_agent_reads(
    bank: Downstream, agent: Agent, olga: Any
) -> None:
    policy(olga, deadline_s=600)
    record = hold(agent)
    execution = models.Execution.objects.get(pk=record["id"])
    assert execution.expires_at is not None
    assert timedelta(seconds=590) < execution.expires_at - timezone.now() <= timedelta(seconds=600)

    assert holds_expire(timezone.now()) == 0  # not due yet
    assert tasks.sweep(execution.expires_at + timedelta(seconds=1))["expired"] == 1

    after = agent.get(f"/api/v1/executions/{record['id']}").json()
    assert after["verdict"] == "block"
    assert any("deadline" in reason for reason in after["reasons"])
    assert models.AuditEvent.objects.filter(kind="expiry", execution_id=record["id"]).count() == 1
    carol = get_user_model().objects.create_user("carol")
    with pytest.raises(Conflict) as refused:
        execution_approve(
            execution_id=record["id"], payload_digest_seen=after["payload_digest"], approver=carol
        )
    assert refused.value.code == "expired"


def test_an_approval_after_the_deadline_expires_the_hold_and_is_refused(
    bank: Downstream, agent: Agent, olga: Any
) -> None:
    policy(olga, deadline_s=60)
    record = hold(agent)
    models.Execution.objects.filter(pk=record["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    carol = get_user_model().objects.create_user("carol")

    with pytest.raises(Conflict) as refused:
        execution_approve(
            execution_id=record["id"], payload_digest_seen=record["payload_digest"], approver=carol
        )

    assert refused.value.code == "expired"
    assert models.Execution.objects.get(pk=record["id"]).verdict == "block"  # the expiry stays recorded
    assert bank.calls == []


def test_a_hold_without_a_policy_has_no_deadline_and_tells_nobody(bank: Downstream, agent: Agent) -> None:
    record = hold(agent)

    assert models.Execution.objects.get(pk=record["id"]).expires_at is None
    assert not models.Notification.objects.exists() and mail.outbox == []


def test_the_agent_reading_a_hold_past_its_deadline_gets_the_expiry_without_a_sweep(
    bank: Downstream, agent: Agent, olga: Any
) -> None:
    policy(olga, deadline_s=60)
    record = hold(agent)
    models.Execution.objects.filter(pk=record["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))

    after = agent.get(f"/api/v1/executions/{record['id']}").json()

    assert after["verdict"] == "block"
    assert any(u["id"] == EXPIRED_SLOT for u in after["unmet"])
    refused = agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": {"arg:memo": "x"}})
    assert refused.status_code == 409 and refused.json()["error"] == "expired"
