"""Agent tokens: printed once, stored only as a digest, revocable."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from console import models

pytestmark = pytest.mark.django_db


def test_create_agent_token_prints_a_token_that_authenticates() -> None:
    out = StringIO()
    call_command("create_agent_token", "shop-bot", "--principal", "user:alice", stdout=out)
    token = out.getvalue().strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = client.get("/api/v1/presets", {"principal": "user:alice"})

    assert response.status_code == 200
    assert response.json() == []


def test_only_the_digest_of_a_token_is_stored() -> None:
    out = StringIO()
    call_command("create_agent_token", "shop-bot", stdout=out)
    token = out.getvalue().strip()

    row = models.AgentToken.objects.get()
    assert row.name == "shop-bot"
    assert row.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert token.startswith(row.prefix)
    assert token not in str(list(models.AgentToken.objects.values()))
    audited = models.AuditEvent.objects.get().body
    assert audited == {"name": "shop-bot", "prefix": row.prefix, "principals": []}


def test_the_signing_key_is_generated_once_with_owner_only_permissions(
    settings: object, tmp_path: object
) -> None:
    from pathlib import Path

    from console import signing

    path = Path(str(tmp_path)) / "fresh" / "key.pem"
    settings.PREFLIGHT_SIGNING_KEY_PATH = path  # type: ignore[attr-defined]
    first = signing.signer()
    signing._signers.clear()
    second = signing.signer()

    assert path.stat().st_mode & 0o777 == 0o600
    assert first.key_id == second.key_id
