"""Pointer verification: code reads the location an agent names and confirms the value is there.

The agent points; it does not assert. A pointer only settles a slot when the words it covers hold the
claimed value and those words come from someone entitled to give instructions. Everything here fails
closed: a doubtful match is a mismatch, never a guess.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from preflight.errors import RequestError
from preflight.frozen import fast_init

__all__ = [
    "REASONS",
    "Span",
    "SpanCheck",
    "Turn",
    "check_pointer",
    "is_instruction_turn",
    "values_match",
]


@dataclass(frozen=True, slots=True)
class Turn:
    """One conversation turn. `trusted` defaults to False: a channel nobody vouched for is no source."""

    role: str
    content: str
    trusted: bool = False


@dataclass(frozen=True, slots=True)
class Span:
    """Python str indices (code points) into `content` of turn `turn`; `end` is exclusive."""

    turn: int
    start: int
    end: int


@fast_init
@dataclass(frozen=True, slots=True)
class SpanCheck:
    """The outcome of reading a pointer. `text` is what the pointer covers, whether or not it verified."""

    ok: bool
    reason: str | None
    text: str | None


REASONS: Final = (
    "turn_out_of_range",
    "span_out_of_range",
    "untrusted_turn",
    "not_an_instruction_turn",
    "value_mismatch",
    "unverifiable_value",
    "element_count_mismatch",
)

_INSTRUCTION_ROLES: Final = frozenset({"user", "system", "developer"})

_OPENERS: Final = "\"'`\u201c\u201d\u201e\u2018\u2019\u201a\u00ab\u00bb\u2039\u203a([{<"
_CLOSERS: Final = "\"'`\u201c\u201d\u201e\u2018\u2019\u201a\u00ab\u00bb\u2039\u203a)]}>"
_TRAILING: Final = ".,;:!?"

# Hyphen-like marks people type inside IBANs, phone and card numbers. NFKC already folds U+2011 to U+2010.
_HYPHENS: Final = "-\u2010\u2012\u2013"
# Only between two characters: a leading hyphen is a minus sign, and dropping it would turn -500 into 500.
_INNER_SEPARATORS: Final = re.compile(rf"(?<=\S)[\s{re.escape(_HYPHENS)}]+(?=\S)")

_TRUE_WORDS: Final = frozenset({"yes", "y", "true", "on", "1"})
_FALSE_WORDS: Final = frozenset({"no", "n", "false", "off", "0"})

_CURRENCY_SYMBOLS: Final = "€$£¥"
_CURRENCY_CODES: Final = ("EUR", "USD", "GBP", "CHF", "JPY")
_MINUS_SIGNS: Final = "-\u2212"
# Group separators that cannot be a decimal mark in any locale we read. NFKC would fold the spaces into an
# ordinary space, which is deliberately NOT a separator ("3 400" may be two numbers), so these are mapped
# before normalising.
_SPACE_SEPARATORS: Final = "\u00a0\u2007\u2009\u202f"
_GROUP_SPLIT: Final = re.compile(r"[,._']")
_NUMBER_BODY: Final = re.compile(r"[0-9][0-9,._']*|[0-9]*[.,][0-9]+")
_PLAIN_DECIMAL: Final = re.compile(r"-?[0-9]+\.[0-9]+")


def is_instruction_turn(turn: Turn) -> bool:
    """True only for trusted user, system or developer turns.

    Assistant turns are the model's own words and tool turns carry third-party text (tool results,
    forwarded mail, retrieved pages); letting either settle a slot would let the model or an injected
    page vouch for itself, so trust does not rescue them.
    """
    return turn.trusted is True and turn.role in _INSTRUCTION_ROLES


def check_pointer(
    conversation: Sequence[Turn],
    pointer: Span | Sequence[Span],
    value: object,
    schema: Mapping[str, Any] | None = None,
) -> SpanCheck:
    """Confirm that `pointer` covers words from an instruction turn that hold `value`.

    A scalar value takes one Span; a list value takes one Span per element, each element checked against
    `schema["items"]`.
    """
    if isinstance(pointer, Span):
        if isinstance(value, list | tuple):
            text = _locate(conversation, pointer)[1]
            return SpanCheck(ok=False, reason="element_count_mismatch", text=text)
        return _check_scalar(conversation, pointer, value, schema)

    spans = _as_spans(pointer)
    if not isinstance(value, list | tuple) or len(spans) != len(value):
        return SpanCheck(ok=False, reason="element_count_mismatch", text=_joined(conversation, spans))
    if not value:
        # An empty list has nothing to point at, so no pointer can show the user asked for "none".
        return SpanCheck(ok=False, reason="unverifiable_value", text=None)

    item_schema = _items_schema(schema)
    checks = [_check_scalar(conversation, s, v, item_schema) for s, v in zip(spans, value, strict=True)]
    texts = [c.text for c in checks]
    text = None if any(t is None for t in texts) else " | ".join(t for t in texts if t is not None)
    failed = next((c for c in checks if not c.ok), None)
    if failed is not None:
        return SpanCheck(ok=False, reason=failed.reason, text=text)
    return SpanCheck(ok=True, reason=None, text=text)


def values_match(text: str, value: object, schema: Mapping[str, Any] | None = None) -> bool:
    """Whether `text` (the words a pointer covers) states `value`, under fixed, locale-free rules."""
    # Fast path for the common case, the exact spelling: every rule below accepts it too.
    if text == value and type(value) is str and value[:1].isalnum() and value[-1:].isalnum():
        return True
    if type(value) is int and text == str(value):
        return True
    if type(value) is float and text == repr(value) and _PLAIN_DECIMAL.fullmatch(text):
        return True  # Python's own spelling of it, digits and one point: what _parse_number reads back
    if isinstance(value, bool):
        # The listed words are already in normal form (lowercase ASCII letters and digits).
        return text in (_TRUE_WORDS if value else _FALSE_WORDS) or _bool_matches(text, value)
    if isinstance(value, int | float):
        return _number_matches(text, value)
    if isinstance(value, str):
        return _str_matches(text, value, schema)
    return False


# --- locating -------------------------------------------------------------------------------------------


def _locate(conversation: Sequence[Turn], span: Span) -> tuple[str | None, str | None]:
    """(first failing location reason or None, covered text or None). Trust is judged after range."""
    turn_index = span.turn
    # `type(...) is int`: bool is an int subclass, and a JSON `true` slipping through as turn 1 must not
    # point anywhere. The instruction-turn test is is_instruction_turn, inlined: this runs for every pointer.
    if type(turn_index) is not int or not 0 <= turn_index < len(conversation):
        return "turn_out_of_range", None
    turn = conversation[turn_index]
    start, end = span.start, span.end
    content = turn.content
    if type(start) is not int or type(end) is not int or start < 0 or end > len(content) or start >= end:
        return "span_out_of_range", None
    text = content[start:end]
    if turn.trusted is not True:
        return "untrusted_turn", text
    if turn.role not in _INSTRUCTION_ROLES:
        return "not_an_instruction_turn", text
    return None, text


def _check_scalar(
    conversation: Sequence[Turn], span: Span, value: object, schema: Mapping[str, Any] | None
) -> SpanCheck:
    reason, text = _locate(conversation, span)
    if reason is not None or text is None:
        return SpanCheck(ok=False, reason=reason or "span_out_of_range", text=text)
    if not _is_verifiable_scalar(value):
        return SpanCheck(ok=False, reason="unverifiable_value", text=text)
    if not values_match(text, value, schema):
        return SpanCheck(ok=False, reason="value_mismatch", text=text)
    return SpanCheck(ok=True, reason=None, text=text)


def _as_spans(pointer: Sequence[Span]) -> tuple[Span, ...]:
    if not isinstance(pointer, Sequence):
        raise RequestError("pointer", "expected a span or a list of spans")
    spans = tuple(pointer)
    # Checked per item because a str is a Sequence too, of characters rather than spans.
    if not all(isinstance(s, Span) for s in spans):
        raise RequestError("pointer", "expected a span or a list of spans")
    return spans


def _joined(conversation: Sequence[Turn], spans: Sequence[Span]) -> str | None:
    texts = [_locate(conversation, s)[1] for s in spans]
    if not texts or any(t is None for t in texts):
        return None
    return " | ".join(t for t in texts if t is not None)


def _items_schema(schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if schema is None:
        return None
    items = schema.get("items")
    return items if isinstance(items, Mapping) else None


def _is_verifiable_scalar(value: object) -> bool:
    if type(value) is str or type(value) is int:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str | int)


# --- matching -------------------------------------------------------------------------------------------


def _strip_wrapping(s: str) -> str:
    """Drop surrounding whitespace, quotes, brackets and sentence punctuation until nothing changes."""
    while True:
        stripped = s.strip().rstrip(_TRAILING + _CLOSERS).lstrip(_OPENERS).strip()
        if stripped == s:
            return s
        s = stripped


def _normal_text(s: str) -> str:
    s = unicodedata.normalize("NFKC", s).casefold()
    return " ".join(_strip_wrapping(s).split())


def _str_matches(text: str, value: str, schema: Mapping[str, Any] | None) -> bool:
    fmt = schema.get("format") if schema is not None else None
    if fmt == "email":
        # Whitespace inside an address changes the address, so only the edges are forgiven.
        want = _strip_wrapping(unicodedata.normalize("NFKC", value).casefold())
        got = _strip_wrapping(unicodedata.normalize("NFKC", text).casefold())
        return bool(want) and got == want

    want = _normal_text(value)
    if not want:
        # Nothing left to compare: any stray punctuation would "hold" it.
        return False
    got = want if text == value else _normal_text(text)  # the same words need normalising only once
    if got == want:
        return True
    if any(c.isdigit() for c in want) and _compact(got) == _compact(want):
        return True
    if fmt == "date":
        want_date, got_date = _parse_date(value), _parse_date(text)
        return want_date is not None and want_date == got_date
    return False


def _compact(s: str) -> str:
    return _INNER_SEPARATORS.sub("", s)


def _parse_date(s: str) -> date | None:
    try:
        return date.fromisoformat(_strip_wrapping(unicodedata.normalize("NFKC", s)))
    except ValueError:
        return None


def _bool_matches(text: str, value: bool) -> bool:
    word = _normal_text(text)
    return word in (_TRUE_WORDS if value else _FALSE_WORDS)


def _number_matches(text: str, value: int | float) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    got = _parse_number(text)
    if got is None:
        return False
    # repr gives the shortest string that round-trips, so 12.49 compares as 12.49, not its binary expansion.
    want = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    return got == want


def _strip_currency(s: str) -> str:
    while True:
        before = s
        # "_" here is an nbsp or thin space mapped above, i.e. edge whitespace.
        s = s.strip().strip(_CURRENCY_SYMBOLS + "_").strip()
        upper = s.upper()
        for code in _CURRENCY_CODES:
            if upper.startswith(code):
                s = s[len(code) :]
                upper = s.upper()
            if upper.endswith(code):
                s = s[: -len(code)]
                upper = s.upper()
        if s == before:
            return s


def _parse_number(text: str) -> Decimal | None:
    """Read a number written with digits; None when the text is anything else or ambiguous."""
    s = text.translate({ord(c): "_" for c in _SPACE_SEPARATORS})
    s = unicodedata.normalize("NFKC", s)
    edges = s.strip().rstrip(_TRAILING).strip()
    if edges.startswith("(") and edges.endswith(")"):
        # Accounting notation: "(1,200)" is minus 1200. Stripping the brackets would flip the sign.
        return None
    s = _strip_currency(_strip_wrapping(s))
    negative = False
    if s[:1] in ("+", *_MINUS_SIGNS):
        negative = s[0] != "+"
        s = _strip_currency(s[1:])
    if not _NUMBER_BODY.fullmatch(s):
        return None

    has_dot, has_comma = "." in s, "," in s
    decimal_mark: str | None
    if has_dot and has_comma:
        decimal_mark = "." if s.rfind(".") > s.rfind(",") else ","
    elif has_comma:
        after_first = s.split(",")[1:]
        decimal_mark = None if all(len(g) == 3 and g.isdigit() for g in after_first) else ","
    elif has_dot:
        decimal_mark = "."
    else:
        decimal_mark = None

    integer, fraction = s, ""
    if decimal_mark is not None:
        if s.count(decimal_mark) != 1:
            return None
        integer, fraction = s.split(decimal_mark)
        if not fraction.isdigit() or not fraction.isascii():
            return None
        integer = integer or "0"

    groups = _GROUP_SPLIT.split(integer)
    if not all(g.isdigit() and g.isascii() for g in groups):
        return None
    # Grouping must look like thousands: "1,2.5" is not 12.5, it is a typo or two numbers.
    if len(groups) > 1 and (not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:])):
        return None

    digits = "".join(groups) + ("." + fraction if fraction else "")
    try:
        number = Decimal(digits)
    except InvalidOperation:
        return None
    return -number if negative else number
