"""One line that says what a call would do, for a person scanning a queue: the contract's
`x-preflight.summary` template ("send {arg.amount} EUR to {arg.to_account}") filled from the record's
settled values, or, without a template, the tool's name and its first settled arguments.

Placeholders name arguments only (`{arg.<path>}`) or `{principal}`; an unknown one is refused when the
contract is built, so a typo never ships a summary that silently says less. A value that is not settled
shows as `?`: the line never presents an unverified candidate as what will happen.
"""

from __future__ import annotations

import json
import string
import unicodedata
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SummaryTemplate", "compile_summary", "summarize"]

UNSETTLED = "?"
MAX_VALUE = 60  # characters of one value
MAX_LINE = 200  # characters of the whole line
FIRST_SLOTS = 3  # arguments shown without a template

# Characters that do not show themselves (controls, bidi overrides, zero-width joiners, odd separators):
# spelled as escapes, so the line reads as what it holds.
_UNSEEN = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp", "Zs"})


@dataclass(frozen=True, slots=True)
class SummaryTemplate:
    source: str
    # Literal text and, between, the placeholder read after it ("arg:<path>", "principal" or None at the end).
    parts: tuple[tuple[str, str | None], ...]


def compile_summary(source: str, paths: Container[str]) -> SummaryTemplate:
    """Parse a template; `paths` are the contract's argument paths (with no schema, every name is one).
    Raises ValueError with the reason for a malformed template or a placeholder that names nothing."""
    parts: list[tuple[str, str | None]] = []
    try:
        parsed = list(string.Formatter().parse(source))
    except ValueError as exc:
        raise ValueError(f"malformed template: {exc}") from None
    for literal, field, spec, conversion in parsed:
        if field is None:
            parts.append((literal, None))
            continue
        if spec or conversion:
            raise ValueError(f"placeholder {{{field}}} may not carry a format or a conversion")
        if field == "principal":
            parts.append((literal, "principal"))
            continue
        kind, dot, path = field.partition(".")
        if kind != "arg" or not dot or not path:
            raise ValueError(f"unknown placeholder {{{field}}}: use {{arg.<argument>}} or {{principal}}")
        if path not in paths:
            raise ValueError(f"unknown placeholder {{{field}}}: {path!r} is not an argument")
        parts.append((literal, f"arg:{path}"))
    return SummaryTemplate(source, tuple(parts))


def summarize(
    template: SummaryTemplate | None,
    tool: str,
    principal: str,
    slots: Iterable[Mapping[str, Any]],
) -> str:
    """The line for one record: `slots` as in the record's JSON (key, status, value)."""
    settled = {
        s["key"]: s.get("value")
        for s in slots
        if s.get("status") in ("known", "null") and str(s.get("key", "")).startswith("arg:")
    }
    if template is None:
        shown = [f"{key[4:]}={_value(value)}" for key, value in list(settled.items())[:FIRST_SLOTS]]
        more = len(settled) - len(shown)
        line = tool + (": " + ", ".join(shown) if shown else "") + (f" (+{more} more)" if more > 0 else "")
        return _cut(line)
    out = []
    for literal, read in template.parts:
        out.append(literal)
        if read == "principal":
            out.append(_value(principal))
        elif read is not None:
            out.append(_value(settled[read]) if read in settled else UNSETTLED)
    return _cut("".join(out))


def spell_unseen(text: str) -> str:
    """`text` with every character that does not show itself (see _UNSEEN) spelled as its escape."""
    return "".join(f"\\u{ord(c):04x}" if c != " " and unicodedata.category(c) in _UNSEEN else c for c in text)


def _value(value: Any) -> str:
    text = spell_unseen(
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    )
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _cut(line: str) -> str:
    line = " ".join(line.split())  # one line, whatever the template's literal text held
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"
