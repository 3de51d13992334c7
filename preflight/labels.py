"""Description labels: the one part of a tool's prose the engine reads.

Descriptions are advisory, so a label may only *add* an obligation (make an argument required, ask a person
to confirm something, show a notice); nothing here can relax the schema. A line that is meant as a label but
does not parse is returned as a problem, because silently dropping it would drop an obligation the provider
asked for.

Grammar, one label per line::

    [required:<argument>] optional reason
    [confirm:<argument>] optional text      [confirm] text
    [notice] text

``<argument>`` is a top-level property name or a dotted path of nested property names.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

__all__ = ["Label", "LabelProblem", "ParsedLabels", "parse_labels"]

type Tag = Literal["required", "confirm", "notice"]

_TAGS: dict[str, Tag] = {"required": "required", "confirm": "confirm", "notice": "notice"}

_LABEL = re.compile(r"^\s*\[([A-Za-z_][\w-]*)(?::([\w.]+))?\]\s*(.*)$")
# Case-insensitive on purpose: "[Required:memo reason" is as clearly a broken label as the lowercase form.
_LABEL_START = re.compile(r"^\s*\[(required|confirm|notice)\b", re.IGNORECASE)
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Label:
    tag: Tag
    target: str | None
    text: str
    line: int  # 1-based line in the description


@dataclass(frozen=True, slots=True)
class LabelProblem:
    line: int
    text: str  # the offending line, stripped
    reason: str


@dataclass(frozen=True, slots=True)
class ParsedLabels:
    labels: tuple[Label, ...]
    problems: tuple[LabelProblem, ...]


def parse_labels(description: str | None, argument_paths: Collection[str]) -> ParsedLabels:
    """Read the labels in `description`; `argument_paths` are the schema's (dotted) property paths."""
    labels: list[Label] = []
    problems: list[LabelProblem] = []
    if not description:
        return ParsedLabels((), ())
    for number, line in enumerate(_NEWLINE.split(description), start=1):
        match = _LABEL.match(line)
        if match is None:
            if _LABEL_START.match(line):
                problems.append(LabelProblem(number, line.strip(), _malformed_reason(line)))
            continue
        word, target, rest = match.group(1), match.group(2), match.group(3)
        if _is_markdown(line, word, target):
            continue
        result = _label(word, target, rest.strip(), number, argument_paths)
        if isinstance(result, Label):
            labels.append(result)
        else:
            problems.append(LabelProblem(number, line.strip(), result))
    return ParsedLabels(tuple(labels), tuple(problems))


def _is_markdown(line: str, word: str, target: str | None) -> bool:
    # The first "]" closes the bracket word, which cannot contain one. Only "(" or "[" right after it (no
    # space) make a markdown link; "[notice] (see the docs)" is still a label.
    closing = line.index("]")
    after = line[closing + 1 : closing + 2]
    if after in ("(", "["):
        return True
    # "[docs]: https://…" is a markdown link reference definition, common in tool descriptions. A known tag in
    # that shape is still read as a label: it is far likelier to be a label than a reference definition.
    return after == ":" and target is None and word.lower() not in _TAGS


def _label(word: str, target: str | None, text: str, line: int, paths: Collection[str]) -> Label | str:
    tag = _TAGS.get(word)
    if tag is None:
        if word.lower() in _TAGS:
            return f"unknown tag {word!r}: tags are lowercase, write [{word.lower()}]"
        return f"unknown tag {word!r}: the known tags are required, confirm and notice"
    if tag == "notice":
        if target is not None:
            return "notice takes no target argument: write [notice] text"
        if not text:
            return "notice needs text to show"
    elif tag == "required" and target is None:
        return "required needs a target argument: write [required:argument]"
    elif tag == "confirm" and target is None and not text:
        return "confirm without a target argument needs text saying what a person must confirm"
    if target is not None and target not in paths:
        return f"unknown target argument {target!r}: it is not a property in the input schema"
    return Label(tag, target, text, line)


def _malformed_reason(line: str) -> str:
    if "]" not in line:
        return "label is not closed: expected ']' after the tag or target"
    return (
        "malformed label: expected [tag] or [tag:argument] where argument is a property name or dotted path"
    )
