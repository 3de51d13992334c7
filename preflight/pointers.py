"""Pointer verification: code reads the location an agent names and confirms the value is there.

The agent points; it does not assert. A pointer only settles a slot when the words it covers *are* the
claimed value (after a few format-aware normalisations: IBAN spaces, thousands separators in a locale the
conversation makes unambiguous, ISO date spellings), the words start and end on token boundaries, and they
come from someone entitled to give instructions. There is no compatibility folding: superscripts, fullwidth
forms, other scripts' digits and confusables never stand for an ASCII value. Everything here fails closed: a
doubtful match is a mismatch, never a guess.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from itertools import pairwise
from typing import Any, Final, Literal

import attrs
from stdnum import iban

from preflight.errors import RequestError

__all__ = [
    "REASONS",
    "Span",
    "SpanCheck",
    "Turn",
    "check_pointer",
    "check_words",
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


@attrs.frozen  # built for every pointer read: attrs builds a frozen value faster (see record.py)
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
    "not_a_whole_token",  # the span cuts a token: 500 in "1500", BOB in "BOB7", 5 in "-5"
    "ambiguous_number",  # "1.500" where the conversation does not say which mark is the decimal one
    "bidi_control",  # the turn reorders its text on screen: what was shown may not be what is stored
    "spans_overlap",  # two list elements from one word: "Bob" once is not two tickets for Bob
    "elements_out_of_order",  # a list in another order than the user wrote it
)

DecimalMark = Literal[".", ","]

_INSTRUCTION_ROLES: Final = frozenset({"user", "system", "developer"})

_OPENERS: Final = "\"'`\u201c\u201d\u201e\u2018\u2019\u201a\u00ab\u00bb\u2039\u203a([{<"
_CLOSERS: Final = "\"'`\u201c\u201d\u201e\u2018\u2019\u201a\u00ab\u00bb\u2039\u203a)]}>"
_TRAILING: Final = ".,;:!?"
_ASCII_DIGITS: Final = "0123456789"

# Booleans verify only from an explicit word for them: not "y", not "1", not a letter inside "Pay".
_TRUE_WORDS: Final = frozenset({"yes", "true", "on"})
_FALSE_WORDS: Final = frozenset({"no", "false", "off"})

_CURRENCY_SYMBOLS: Final = "€$£¥"
_CURRENCY_CODES: Final = ("EUR", "USD", "GBP", "CHF", "JPY")
_MINUS_SIGNS: Final = "-\u2212"
# Group separators that cannot be a decimal mark in any locale: typographic spaces (an ordinary space is
# deliberately NOT one: "3 400" may be two numbers), underscores and apostrophes.
_SPACE_SEPARATORS: Final = "\u00a0\u2007\u2009\u202f"
_GROUP_SPLIT: Final = re.compile(r"[,._']")
_NUMBER_BODY: Final = re.compile(r"[0-9][0-9,._']*|[0-9]*[.,][0-9]+", re.ASCII)
# A number token in an instruction turn, read for which decimal mark the conversation uses.
_NUMBER_TOKEN: Final = re.compile(r"(?<![0-9.,])[0-9]+(?:[.,][0-9]+)+(?![0-9.,])", re.ASCII)

# Identifiers people group with spaces or hyphens (IBANs, card and phone numbers): ASCII letters and digits
# in groups of two or more (the last may be shorter), compared with the separators removed.
_GROUPED_ID: Final = re.compile(r"\+?[A-Za-z0-9]{2,}(?:[ \-\u2010\u2012\u2013][A-Za-z0-9]+)+", re.ASCII)
_PLAIN_ID: Final = re.compile(r"\+?[A-Za-z0-9]+", re.ASCII)
_ID_SEPARATORS: Final = re.compile(r"[ \-\u2010\u2012\u2013]")

# Characters that join two parts of one token ("1.500", "BOB-7", "bob.smith@x", "a/b"): a span that stops at
# one of them, with a letter or digit beyond it, has cut a token in two.
_JOINERS: Final = ".,'\u2019_-\u2010\u2011\u2012\u2013\u2014/@:\\&#+~=\u00b7\u2027\u066b\u066c"
# Before a number these change it: "-5" is not 5, ".5" is not 5, "±5" is not 5.
_NUMBER_PREFIXES: Final = "+-\u2212\u00b1.,\u2010\u2011\u2012\u2013\u2014\ufe63\uff0d<>\u2264\u2265~\u2248"
# After a number these change what it counts: "50%" is not 50.
_NUMBER_SUFFIXES: Final = "%\u2030\u2031+"
# Digits on both sides of one of these are one number to a reader: "1 500" may be fifteen hundred, so neither
# "1" nor "500" is a whole token there; and "DE02 1203" is one IBAN, so "DE02" is not.
_DIGIT_GROUP_SPACES: Final = frozenset(" \u00a0\u2007\u2009\u202f")
# Explicit embeddings, overrides and isolates reorder what the user saw on screen.
_BIDI_CONTROLS: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

# str.splitlines' separators: a span across one of them covers two lines, so two values.
_LINE_BREAKS: Final = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")

# Words that scale or re-count the number before them ("5 million" is not 5, "5 percent" is not 5) and
# words that flip the one after them ("minus 5" is not 5). Compared in lower case.
_SCALE_WORDS: Final = frozenset(
    [
        "hundred",
        "hundreds",
        "thousand",
        "thousands",
        "million",
        "millions",
        "billion",
        "billions",
        "trillion",
        "trillions",
        "grand",
        "dozen",
        "dozens",
        "k",
        "m",
        "mm",
        "mn",
        "b",
        "bn",
        "mil",
        "mio",
        "mrd",
        "lakh",
        "lakhs",
        "crore",
        "crores",
        "tausend",
        "millionen",
        "milliarde",
        "milliarden",
        "mille",
        "milliard",
        "milliards",
        "millón",
        "millones",
        "miljoen",
        "miljard",
        "percent",
        "per",
        "pct",
        "bps",
        "basis",
        "half",
        "halves",
        "quarter",
        "quarters",
        "tenth",
        "tenths",
        "hundredth",
        "hundredths",
        "thousandth",
        "thousandths",
        "squared",
        "cubed",
    ]
)
_NEGATING_WORDS: Final = frozenset({"minus", "negative", "neg", "moins", "menos"})
_WORD_AFTER: Final = re.compile(r"[ \t\u00a0\u2007\u2009\u202f]+([^\W\d_]+)")
_WORD_BEFORE: Final = re.compile(r"([^\W\d_]+)[ \t\u00a0\u2007\u2009\u202f]+$")

_PLAIN_DECIMAL: Final = re.compile(r"-?[0-9]+\.[0-9]+", re.ASCII)

_AMBIGUOUS: Final = object()


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
    """Confirm that `pointer` covers whole words from an instruction turn that are `value`.

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

    items = schema.get("items") if schema is not None else None
    item_schema = items if isinstance(items, Mapping) else None
    checks = [_check_scalar(conversation, s, v, item_schema) for s, v in zip(spans, value, strict=True)]
    text = _joined(conversation, spans)
    failed = next((c for c in checks if not c.ok), None)
    if failed is not None:
        return SpanCheck(ok=False, reason=failed.reason, text=text)
    ordered = sorted(spans, key=lambda s: (s.turn, s.start))
    if any(a.turn == b.turn and b.start < a.end for a, b in pairwise(ordered)):
        return SpanCheck(ok=False, reason="spans_overlap", text=text)
    if ordered != list(spans):
        # A list's order is part of its value (a route, a ranking): the user's order or none.
        return SpanCheck(ok=False, reason="elements_out_of_order", text=text)
    return SpanCheck(ok=True, reason=None, text=text)


def check_words(conversation: Sequence[Turn], span: Span) -> SpanCheck:
    """Confirm that `span` covers whole words from an instruction turn, whatever they say: free-form words
    (an action's name, "now", "on Friday at 9") are no value to match, but they must be the user's own."""
    return check_pointer(conversation, span, _locate(conversation, span)[1] or "\x00")


def values_match(
    text: str, value: object, schema: Mapping[str, Any] | None = None, *, mark: DecimalMark | None = None
) -> bool:
    """Whether `text` (the words a pointer covers) is `value`, under fixed rules.

    `mark` is the decimal mark the conversation makes unambiguous (see `decimal_mark`); without it, a
    number that reads two ways ("1.500", "1,500") matches neither reading.
    """
    return _match(text, value, schema, mark) is True


def decimal_mark(conversation: Sequence[Turn]) -> DecimalMark | None:
    """The decimal mark the user's own turns use, when they show one and only one: "1.200,50" and "12,5"
    show a decimal comma, "1,234,567" and "12.5" a decimal point. Untrusted turns do not count: a page
    must not decide how the user's "1.500" is read."""
    seen: set[str] = set()
    for turn in conversation:
        if not is_instruction_turn(turn):
            continue
        for token in _NUMBER_TOKEN.findall(turn.content):
            mark = _mark_of(token)
            if mark is not None:
                seen.add(mark)
    if len(seen) == 1:
        return "." if "." in seen else ","
    return None


def _mark_of(token: str) -> str | None:
    if "." in token and "," in token:
        return "." if token.rfind(".") > token.rfind(",") else ","
    sep = "." if "." in token else ","
    groups = token.split(sep)
    if len(groups) > 2:
        # several separators of one kind are thousands groups (if they look like them): the other is decimal
        if all(len(g) == 3 for g in groups[1:]) and 1 <= len(groups[0]) <= 3:
            return "," if sep == "." else "."
        return None
    if len(groups[1]) != 3 or groups[0] == "0" or len(groups[0]) > 3:
        return sep  # cannot be a thousands separator
    return None


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
    content = conversation[span.turn].content
    if _has_bidi_controls(content):
        return SpanCheck(ok=False, reason="bidi_control", text=text)
    if not _on_token_boundary(content, span.start, span.end, text):
        return SpanCheck(ok=False, reason="not_a_whole_token", text=text)
    matched = _match(text, value, schema, None)
    if matched is _AMBIGUOUS:
        matched = _match(text, value, schema, decimal_mark(conversation))
        if matched is _AMBIGUOUS:
            return SpanCheck(ok=False, reason="ambiguous_number", text=text)
    if matched is not True:
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


def _is_verifiable_scalar(value: object) -> bool:
    if type(value) is str or type(value) is int or type(value) is bool:
        return True
    if type(value) is float:
        return math.isfinite(value)
    return False


# --- token boundaries -----------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _has_bidi_controls(content: str) -> bool:
    # Cached: every pointer into a turn asks about the same turn; a str caches its own hash.
    return not _BIDI_CONTROLS.isdisjoint(content)


_PLAIN_EDGES: Final = frozenset(" \t\n\r")


def _is_word_char(c: str) -> bool:
    """Letters, digits of any script (superscripts too) and combining marks: all continue a token."""
    return unicodedata.category(c)[0] in "LNM"


def _neighbour(content: str, i: int, step: int) -> int | None:
    """The index of the nearest visible character from `i` on in direction `step`; format characters
    (zero-width spaces and joiners, direction marks, soft hyphens) are skipped, as a reader skips them."""
    while 0 <= i < len(content):
        if unicodedata.category(content[i]) != "Cf":
            return i
        i += step
    return None


def _on_token_boundary(content: str, start: int, end: int, text: str) -> bool:
    """Whether `text`, content[start:end], starts and ends on token boundaries: no letter, digit or mark
    touches either side (directly, through invisible characters, or through a joiner such as the "." of
    "1.500")."""
    first, last = text[0], text[-1]
    if first >= "\x80" and unicodedata.category(first)[0] == "M":
        return False  # starts inside a grapheme (ASCII has no marks)
    if (first.isdigit() and _digit_grouped(content, start - 1, -1)) or (
        last.isdigit() and _digit_grouped(content, end, 1)
    ):
        return False
    if _reworded_number(content, start, end, text):
        return False
    if _joins_emoji(content, start) or _joins_emoji(content, end):
        return False
    if (start == 0 or content[start - 1] in _PLAIN_EDGES) and (
        end == len(content)
        or content[end] in _PLAIN_EDGES
        or (content[end] in ",.;:!?" and (end + 1 == len(content) or content[end + 1] in _PLAIN_EDGES))
    ):
        return True  # the common case: whitespace (or the turn's edge, or a sentence mark) on both sides
    core = _strip_wrapping(text)
    starts_with_number = core[:1] in _ASCII_DIGITS
    ends_with_number = core[-1:] in _ASCII_DIGITS
    left = _neighbour(content, start - 1, -1)
    if left is not None:
        c = content[left]
        if _is_word_char(c):
            return False
        if c in _JOINERS:
            beyond = _neighbour(content, left - 1, -1)
            if beyond is not None and _is_word_char(content[beyond]):
                return False
        if starts_with_number and c in _NUMBER_PREFIXES:
            return False
    right = _neighbour(content, end, 1)
    if right is not None:
        c = content[right]
        if _is_word_char(c):
            return False
        if c in _JOINERS:
            beyond = _neighbour(content, right + 1, 1)
            if beyond is not None and _is_word_char(content[beyond]) and not _possessive(content, right):
                return False
        if ends_with_number and c in _NUMBER_SUFFIXES:
            return False
    return True


def _joins_emoji(content: str, i: int) -> bool:
    """Whether the boundary before content[i] sits inside one emoji: a skin-tone modifier or a zero-width
    joiner on it ("👍🏽" and a ZWJ family are one picture each: "👍" or "👨" is not what was written)."""
    if not 0 < i < len(content):
        return False
    after, before = content[i], content[i - 1]
    return after == "\u200d" or before == "\u200d" or "\U0001f3fb" <= after <= "\U0001f3ff"


def _digit_grouped(content: str, i: int, step: int) -> bool:
    """Whether a span's edge digit continues, across one group space at `i`, into another digit."""
    if not (0 <= i < len(content)) or content[i] not in _DIGIT_GROUP_SPACES:
        return False
    beyond = i + step
    # isnumeric, not isdigit: "5 ½" is five and a half, so "5" alone is not what the user wrote.
    return 0 <= beyond < len(content) and content[beyond].isnumeric()


def _reworded_number(content: str, start: int, end: int, text: str) -> bool:
    """Whether words beside a number change it: "5 million", "5 percent", "minus 5"."""
    core = _strip_wrapping(text)
    if not any(c in _ASCII_DIGITS for c in core):
        return False
    if core[-1:] not in _CLOSERS:
        after = _WORD_AFTER.match(content, end)
        if after is not None and after.group(1).lower() in _SCALE_WORDS:
            return True
    if core[:1] not in _OPENERS:
        before = _WORD_BEFORE.search(content, max(0, start - 24), start)
        if before is not None and before.group(1).lower() in _NEGATING_WORDS:
            return True
    return False


def _possessive(content: str, i: int) -> bool:
    """ "Bob's": an apostrophe, an s, then the end of the word. Bob is still the name the user wrote."""
    if content[i] not in "'\u2019" or content[i + 1 : i + 2] != "s":
        return False
    after = _neighbour(content, i + 2, 1)
    return after is None or not _is_word_char(content[after])


# --- matching -------------------------------------------------------------------------------------------


def _strip_wrapping(s: str) -> str:
    """Drop surrounding whitespace, quotes, brackets and sentence punctuation until nothing changes."""
    while True:
        stripped = s.strip().rstrip(_TRAILING + _CLOSERS).lstrip(_OPENERS).strip()
        if stripped == s:
            return s
        s = stripped


def _clean(s: str) -> str:
    """The words as written, tidied: canonical composition (NFC: "é" typed as e + accent is "é", never a
    compatibility fold), no wrapping punctuation, single spaces. A line break is not a space: "Bob" at the end
    of one line and "Smith" at the start of the next are two values, never "Bob Smith"."""
    composed = unicodedata.normalize("NFC", s)
    if composed != s and _ascii_word_chars(composed) > _ascii_word_chars(s):
        # A few characters compose *into* ASCII (the Kelvin sign is K): that is a look-alike, not a spelling.
        return ""
    tidy = _strip_wrapping(composed)
    if any(c in _LINE_BREAKS for c in tidy):
        return tidy
    return " ".join(tidy.split())


def _ascii_word_chars(s: str) -> int:
    return sum(1 for c in s if c < "\x80" and c.isalnum())


def _match(text: str, value: object, schema: Mapping[str, Any] | None, mark: DecimalMark | None) -> object:
    """True, False, or _AMBIGUOUS (a number that reads two ways without a decimal mark)."""
    if type(value) is bool:
        word = _clean(text)
        # ASCII only: a fullwidth yes is a different word, and lower() must not fold it.
        return word.isascii() and word.lower() in (_TRUE_WORDS if value else _FALSE_WORDS)
    if type(value) is int:
        if text == str(value):
            return True  # the exact spelling: digits and a leading minus read one way only
        return _number_matches(text, value, mark)
    if type(value) is float:
        if text == repr(value) and _PLAIN_DECIMAL.fullmatch(text) and len(text) - text.index(".") != 4:
            return True  # Python's own spelling, whose fraction is not three digits: it reads one way only
        return _number_matches(text, value, mark)
    if type(value) is str:
        return _str_matches(text, value, schema)
    return False


def _str_matches(text: str, value: str, schema: Mapping[str, Any] | None) -> bool:
    if text == value and any(c.isalnum() for c in value):
        return True
    got = _clean(text)
    if not got or not any(c.isalnum() for c in got):
        return False  # nothing left to compare: any stray punctuation would "hold" it
    fmt = schema.get("format") if schema is not None else None
    if fmt == "email":
        # The local part is case-sensitive; only the domain is compared ignoring (ASCII) case.
        local, at, domain = got.rpartition("@")
        want_local, want_at, want_domain = value.rpartition("@")
        return bool(at and want_at) and local == want_local and domain.lower() == want_domain.lower()
    if got == value:
        return True
    if fmt == "date":
        want_date, got_date = _parse_date(value), _parse_date(got)
        return want_date is not None and want_date.isoformat() == value and want_date == got_date
    enum = schema.get("enum") if schema is not None else None
    if isinstance(enum, list) and value in enum and got.isascii() and value.isascii():
        # The enum's own word in other ASCII case ("Express" for "express"), when no other member is that
        # word too.
        folded = [m for m in enum if isinstance(m, str) and m.lower() == got.lower()]
        return folded == [value]
    return _grouped_id_matches(got, value)


def _grouped_id_matches(got: str, value: str) -> bool:
    """An IBAN, card or phone number written in groups: the same letters and digits, case-sensitive."""
    if not any(c in _ASCII_DIGITS for c in value):
        return False
    # Separators the user wrote may be dropped, never added: "20260105" is not "2026-01-05", and "123-456"
    # may be another identifier than "123456" to the tool.
    if not _PLAIN_ID.fullmatch(value) or not _GROUPED_ID.fullmatch(got):
        return False
    compact_got, compact_value = _ID_SEPARATORS.sub("", got), _ID_SEPARATORS.sub("", value)
    # Short ones are not identifiers but ranges and scores: "12-15" is not "1215".
    if len(compact_value) < 6 or compact_got != compact_value:
        return False
    # Digits (a card, a phone, an account number) group freely; with letters, only an IBAN's checksum tells
    # one identifier from several words: "Alice 120" is not the user name "Alice120".
    return compact_value.lstrip("+").isdigit() or iban.is_valid(compact_value)


def _parse_date(s: str) -> date | None:
    # Only the extended forms ("2025-03-04", "2025-W10-2"): fromisoformat also reads the basic "20250304",
    # which is an order or reference number as often as a day.
    if not s.isascii() or "-" not in s:
        return None
    try:
        return date.fromisoformat(s)
    except ValueError:
        return None


def _number_matches(text: str, value: int | float, mark: DecimalMark | None) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    got = _parse_number(text, mark)
    if got is _AMBIGUOUS:
        return _AMBIGUOUS
    if not isinstance(got, Decimal):
        return False
    # repr gives the shortest string that round-trips, so 12.49 compares as 12.49, not its binary expansion.
    want = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    # The sign too: "0" is not -0.0 and "-0" is not 0, though they compare equal as numbers.
    return got == want and got.is_signed() == want.is_signed()


def _strip_currency(s: str) -> str:
    while True:
        before = s
        # "_" here is an nbsp or thin space mapped above, i.e. edge whitespace.
        s = s.strip().strip(_CURRENCY_SYMBOLS + "_").strip()
        for code in _CURRENCY_CODES:
            if s.startswith(code):
                s = s[len(code) :]
            if s.endswith(code):
                s = s[: -len(code)]
        if s == before:
            return s


def _parse_number(text: str, mark: DecimalMark | None) -> Decimal | object | None:
    """Read a number written with ASCII digits: a Decimal, None for anything else, _AMBIGUOUS when it reads
    two ways ("1.500" is 1500 in Berlin and 1.5 in London) and `mark` does not settle which."""
    s = text.translate({ord(c): "_" for c in _SPACE_SEPARATORS})
    edges = s.strip().rstrip(_TRAILING).strip()
    if edges.startswith("(") and edges.endswith(")"):
        # Accounting notation: "(1,200)" is minus 1200. Stripping the brackets would flip the sign.
        return None
    s = _strip_currency(_strip_wrapping(s))
    negative = False
    if s[:1] in ("+", *_MINUS_SIGNS):
        negative = s[0] != "+"
        s = _strip_currency(s[1:])
    if not s.isascii() or not _NUMBER_BODY.fullmatch(s):
        return None

    has_dot, has_comma = "." in s, "," in s
    decimal: str | None
    if has_dot and has_comma:
        decimal = "." if s.rfind(".") > s.rfind(",") else ","
    elif has_dot or has_comma:
        sep = "." if has_dot else ","
        head, *tail = s.split(sep)
        bare_head = head.replace("_", "").replace("'", "")
        if len(tail) > 1:
            decimal = None  # "1.200.000": several of one mark are thousands groups (checked below)
        elif len(tail[0]) == 3 and 1 <= len(bare_head) <= 3 and bare_head != "0" and head == bare_head:
            if mark is None:
                return _AMBIGUOUS
            decimal = sep if mark == sep else None
        else:
            decimal = sep
    else:
        decimal = None

    integer, fraction = s, ""
    if decimal is not None:
        if s.count(decimal) != 1:
            return None
        integer, fraction = s.split(decimal)
        if not fraction.isdigit():
            return None
        integer = integer or "0"

    groups = _GROUP_SPLIT.split(integer)
    if not all(g.isdigit() for g in groups):
        return None
    # Grouping must look like thousands: "1,2.5" is not 12.5, it is a typo or two numbers.
    if len(groups) > 1 and (not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:])):
        return None

    digits = "".join(groups) + ("." + fraction if fraction else "")
    try:
        number = Decimal(digits)
    except InvalidOperation:
        return None
    # copy_negate keeps the sign of zero (unary minus rounds -0 to 0): "-0" is not 0.
    return number.copy_negate() if negative else number
