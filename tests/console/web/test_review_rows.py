"""The pure pieces the review page is computed from: rows, conversation marks, typed edits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from console.web.review_rows import Context, SlotRow, conversation, parse_edit, slot_rows

pytestmark = pytest.mark.django_db


# ---- the rows and the conversation marks --------------------------------------------------------------


def test_rows_name_each_source_in_words() -> None:
    observed_at = "2026-01-01T12:00:00+00:00"
    record = {
        "slots": [
            {
                "key": "arg:a",
                "status": "known",
                "value": 1,
                "source": "user_answer",
                "pointer": {"answer": "answer-7"},
            },
            {
                "key": "arg:b",
                "status": "known",
                "value": "x",
                "source": "preset",
                "pointer": {"preset": "preset-3"},
            },
            {
                "key": "arg:c",
                "status": "known",
                "value": 5,
                "source": "observed",
                "pointer": {"observation": "observation-1", "measure": "m", "observed_at": observed_at},
            },
            {
                "key": "arg:d",
                "status": "known",
                "value": "y",
                "source": "prior_state",
                "pointer": {"record": "1234abcd-0000#4", "slot": "arg:d"},
            },
            {
                "key": "arg:e",
                "status": "unknown",
                "route": "measure",
                "findings": [
                    {
                        "source": "observed",
                        "outcome": "no_result",
                        "detail": "stale: observed 90s ago, max age 60s",
                    }
                ],
            },
        ]
    }
    ctx = Context(
        now=datetime(2026, 1, 1, 12, 0, 40, tzinfo=UTC), answers={"answer-7": ("reviewer", "user:carol")}
    )

    rows = {r.key: r for r in slot_rows(record, ctx)}

    assert rows["arg:a"].source == "reviewer answer · user:carol"
    assert rows["arg:b"].source == "preset #3"
    assert rows["arg:c"].source == "observed 2026-01-01 12:00:00 UTC · 40 s ago"
    assert (
        rows["arg:d"].source == "prior record 1234abcd#4"
        and rows["arg:d"].source_href == "/executions/1234abcd-0000/"
    )
    assert "stale" in rows["arg:e"].css and rows["arg:e"].flags[0].text.startswith("stale: observed 90s ago")


def test_a_refused_value_shows_beside_its_slot_with_the_reason() -> None:
    reason = "-5 is less than or equal to the minimum of 0"
    record = {
        "slots": [
            {
                "key": "arg:amount",
                "status": "unknown",
                "route": "ask_user",
                "refused": {"value": -5, "reason": reason},
            }
        ]
    }
    (row,) = slot_rows(record, Context(now=datetime(2026, 1, 1, tzinfo=UTC)))
    assert row.candidate == "-5"
    assert ("refused", f"the tool refuses it: {reason}") in [(f.css, f.text) for f in row.flags]


def test_overlapping_pointers_cut_the_turn_into_marked_segments() -> None:
    request = {"conversation": [{"role": "user", "content": "pay 120 to Bob now", "trusted": True}]}
    rows = [
        SlotRow("arg:amount", "amount", "value", "known", "120", spans="0:4:7"),
        SlotRow("arg:what", "what", "value", "known", "", spans="0:0:10"),
        SlotRow("arg:memo", "memo", "value", "unknown", "", spans="0:11:14"),  # a pointer that did not hold
    ]

    [turn] = conversation(request, rows)

    assert [(s.text, s.spans, s.css) for s in turn.segments] == [
        ("pay ", "0:0:10", "found"),
        ("120", "0:0:10 0:4:7", "found"),
        (" to", "0:0:10", "found"),
        (" ", "", ""),
        ("Bob", "0:11:14", "claimed"),
        (" now", "", ""),
    ]


@pytest.mark.parametrize(
    ("text", "schema", "value"),
    [
        ("00123", {"type": "string"}, "00123"),
        ("120", {"type": "number"}, 120),
        ("true", {"type": "boolean"}, True),
        ('{"a": 1}', {"type": "object"}, {"a": 1}),
        ("plain words", {}, "plain words"),
        ("42", {}, 42),
        ("n/a", {"type": ["number", "string"]}, "n/a"),
    ],
)
def test_an_edit_is_read_by_the_declared_type(text: str, schema: dict[str, Any], value: Any) -> None:
    assert parse_edit(text, schema) == value


def test_an_edit_that_does_not_read_as_json_is_the_text_and_the_engine_decides() -> None:
    # No second copy of the slot's validation here: the engine's answer check refuses it, in its words.
    assert parse_edit("a lot", {"type": "number"}) == "a lot"
