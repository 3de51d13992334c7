"""What the models derive: conversation keys, the routes, gaps and unknown count of a record."""

from __future__ import annotations

import pytest
from review_support import person, use_demo_bank

from console import models
from console.demo import review_data
from console.services.review import (
    execution_reject,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(db: None, monkeypatch: pytest.MonkeyPatch) -> models.Execution:
    use_demo_bank(monkeypatch)
    return review_data.held_transfer()


# ---- what the models derive ---------------------------------------------------------------------------


def test_executions_of_one_conversation_share_a_key(held: models.Execution) -> None:
    twin = review_data.held_transfer()
    other_person = review_data.held_transfer(principal="user:bob")
    other_words = review_data.held_transfer(amount=99)

    assert twin.conversation_key == held.conversation_key
    assert other_person.conversation_key != held.conversation_key
    assert other_words.conversation_key != held.conversation_key


def test_records_carry_their_routes_gaps_and_unknown_count(held: models.Execution) -> None:
    stored = models.PreflightRecord.objects.get(execution=held)

    assert stored.routes == " ask_user hold "
    assert stored.gap_classes == " user_gap "
    assert stored.unknown_count == stored.record["unknown_count"] == 7
    held.refresh_from_db()  # the execution carries its latest record's summary, as it carries its verdict
    assert (held.routes, held.gap_classes, held.unknown_count) == (" ask_user hold ", " user_gap ", 7)
    execution_reject(execution_id=held.pk, reason="no", reviewer=person("carol", "approver"))
    held.refresh_from_db()
    assert (held.verdict, held.routes) == ("block", " ask_user hold ")
