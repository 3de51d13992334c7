"""Telling approvers that a decision waits: per server or tool, an operator's ReviewPolicy names mail
addresses, a webhook (Slack-compatible JSON) and a deadline. A hold writes one Notification per target (once);
a Celery task sends each, retrying, and every attempt is recorded on its row, so a failure is visible."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import httpx2 as httpx
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from console import egress, models, storage
from console.audit import audit_append
from console.errors import BadInput, NotFound
from console.services.common import identity, lock_execution
from console.web.review_rows import when_text


class DeliveryFailed(Exception):
    """One attempt failed; `final` when trying again cannot help (a refused host, no mail server)."""

    def __init__(self, reason: str, *, final: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.final = final


def review_policy_for(server: str, tool: str) -> models.ReviewPolicy | None:
    """The tool's own policy, else its server's."""
    rows = models.ReviewPolicy.objects.filter(Q(tool=tool) | Q(tool=""), server__name=server)
    return min(rows, key=lambda row: row.tool == "", default=None)


@transaction.atomic
def review_policy_set(
    *,
    server_id: Any,
    tool: str,
    emails: Sequence[str],
    webhook_url: str,
    deadline_s: int | None,
    user: AbstractBaseUser,
) -> models.ReviewPolicy | None:
    """Set (or, with nothing in it, remove) the policy of a server (tool "") or of one of its tools."""
    try:
        server = models.Server.objects.get(pk=server_id)
    except (models.Server.DoesNotExist, ValueError, TypeError):
        raise NotFound("unknown_server", f"no server {server_id}") from None
    tool = tool.strip()
    if tool and not models.ToolContract.objects.filter(server=server, name=tool).exists():
        raise BadInput("invalid", f"tool: {server.name} has no tool {tool!r}")
    addresses = [e.strip() for e in emails if e.strip()]
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise BadInput("invalid", f"emails: {address!r} is not an email address") from None
    webhook_url = webhook_url.strip()
    if webhook_url:
        try:
            egress.check_url(webhook_url, what="webhook_url")
        except egress.EgressRefused as exc:
            raise BadInput("invalid", exc.detail) from None
    if deadline_s is not None and deadline_s < 1:
        raise BadInput("invalid", "deadline: a number of minutes above 0, or empty for no deadline")
    models.ReviewPolicy.objects.filter(server=server, tool=tool).delete()
    row = None
    if addresses or webhook_url or deadline_s is not None:
        row = models.ReviewPolicy.objects.create(
            server=server, tool=tool, emails=addresses, webhook_url=webhook_url, deadline_s=deadline_s
        )
    audit_append(
        kind="review_policy",
        execution_id=None,
        body={
            "server": server.name,
            "tool": tool,
            "emails": addresses,
            "webhook_url": webhook_url,
            "deadline_s": deadline_s,
            "actor": identity(user),
        },
    )
    return row


def hold_message(execution: models.Execution, record: models.PreflightRecord) -> dict[str, Any]:
    """What a notification says: the call in its one line (the queue's summary), which tool, why it waits,
    and where to decide (absolute URL)."""
    data = record.record
    call = f"{data.get('tool') or 'a tool'} on {data.get('server') or 'an unknown server'}"
    summary = execution.summary or call
    why = "; ".join(data.get("reasons") or ()) or "it waits for an approver"
    url = settings.PREFLIGHT_PUBLIC_URL + reverse("review-execution", args=[execution.pk])
    deadline = f" Decide before {when_text(execution.expires_at)}." if execution.expires_at else ""
    return {
        "text": f"Preflight: {summary} ({call}) waits for a decision ({why}).{deadline} {url}",
        "execution": str(execution.pk),
        "server": data.get("server") or "",
        "tool": data.get("tool") or "",
        "summary": summary,
        "call": call,
        "why": why,
        "url": url,
        "deadline": execution.expires_at.isoformat() if execution.expires_at else None,
    }


@transaction.atomic
def hold_notify(*, execution_id: Any) -> list[models.Notification]:
    """For an execution that now holds: start its deadline and write its notifications (once per target);
    each is sent after commit. Nothing for one that no longer holds or has no policy."""
    execution = lock_execution(execution_id)
    if execution.verdict != "hold" or execution.final_at is not None:
        return []
    latest = storage.latest_record(execution)
    policy = review_policy_for(latest.record.get("server") or "", latest.record.get("tool") or "")
    if policy is None:
        return []
    if policy.deadline_s is not None and execution.expires_at is None:
        execution.expires_at = timezone.now() + timedelta(seconds=policy.deadline_s)
        execution.save(update_fields=["expires_at", "updated_at"])
        audit_append(
            kind="hold_deadline",
            execution_id=execution.pk,
            body={"expires_at": execution.expires_at.isoformat(), "deadline_s": policy.deadline_s},
        )
    body = hold_message(execution, latest)
    targets = [("email", e) for e in policy.emails] + (
        [("webhook", policy.webhook_url)] * bool(policy.webhook_url)
    )
    from console import tasks

    made = []
    for channel, target in targets:
        row, created = models.Notification.objects.get_or_create(
            execution=execution, channel=channel, target=target, defaults={"body": body}
        )
        if created:
            made.append(row)
            # Robust: a broker that is away fails no decision; the sweep sends what stayed pending.
            transaction.on_commit(partial(tasks.notification_send.delay, row.pk), robust=True)
    return made


def notifications_resend(now: datetime | None = None) -> int:
    """The sweep's part: send again the notifications never tried (their task was lost or never queued)."""
    from console import tasks

    before = (now or timezone.now()) - timedelta(seconds=60)
    rows = list(
        models.Notification.objects.filter(status="pending", attempts=0, created_at__lt=before)
        .order_by("pk")
        .values_list("pk", flat=True)[:200]
    )
    for pk in rows:
        tasks.notification_send.delay(pk)
    return len(rows)


def notification_send(*, notification_id: int, final_attempt: bool) -> models.Notification:
    """One attempt, recorded on the row whatever happens. Raises DeliveryFailed for the caller to retry
    unless it was the final attempt (then the row says `failed`, with the reason)."""
    row = models.Notification.objects.get(pk=notification_id)
    if row.status != "pending":
        return row
    try:
        (_send_email if row.channel == "email" else _post_webhook)(row)
    except DeliveryFailed as exc:
        final = final_attempt or exc.final
        _record_attempt(row, status="failed" if final else "pending", error=exc.reason)
        if not final:
            raise
        return row
    _record_attempt(row, status="sent", error="")
    return row


def _record_attempt(row: models.Notification, *, status: str, error: str) -> None:
    row.attempts += 1
    row.status = status
    row.last_error = error
    row.sent_at = timezone.now() if status == "sent" else None
    row.save(update_fields=["attempts", "status", "last_error", "sent_at"])


def _send_email(row: models.Notification) -> None:
    if not settings.PREFLIGHT_EMAIL_HOST and str(settings.MAILERS["default"]["BACKEND"]).endswith(
        ".smtp.EmailBackend"
    ):
        raise DeliveryFailed("no mail server is configured (PREFLIGHT_EMAIL_HOST)", final=True)
    body = row.body
    try:
        send_mail(
            subject=f"Preflight: {body['summary']} waits for a decision",
            message=f"{body['text']}\n\nWhy it waits: {body['why']}\nReview it: {body['url']}\n",
            from_email=None,
            recipient_list=[row.target],
        )
    except OSError as exc:  # smtplib's errors are OSErrors
        raise DeliveryFailed(f"mail to {row.target}: {exc}") from exc


def _post_webhook(row: models.Notification) -> None:
    try:
        host, port = egress.check_url(row.target, what="webhook")
        egress.resolve_checked(host, port)
    except egress.EgressRefused as exc:
        raise DeliveryFailed(exc.detail, final=True) from exc
    try:
        response = httpx.post(
            row.target,
            json=row.body,
            timeout=settings.PREFLIGHT_NOTIFY_TIMEOUT_S,
            follow_redirects=False,
            trust_env=False,  # a proxy from the environment would bypass the egress check
        )
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"webhook: {exc.__class__.__name__}: {exc}") from exc
    if not response.is_success:
        raise DeliveryFailed(f"webhook answered HTTP {response.status_code}")
