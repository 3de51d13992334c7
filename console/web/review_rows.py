"""What the review page shows, computed from a stored record: one row per slot, the conversation cut into
marked spans. Plain data, so the template stays a loop and every decision about what is highlighted lives
here, where it can be tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from itertools import pairwise
from typing import Any, NamedTuple

from stdnum import iban

from console.api import parsers as json_text
from preflight.approvals import value_digest
from preflight.confirmations import is_user_yes_key
from preflight.record import AWAITING_APPROVAL

# Slots a reviewer may give a value for (the same set the answer service accepts, less fixed:tool, whose
# answer is a choice among tools the console never names).
ANSWERABLE_FIXED = ("fixed:timing", "fixed:action_name")

# The words a reviewer reads; the record's own key stays on hover (title) for whoever needs it.
ROUTES = {
    "ask_user": ("the user is asked", "only the requesting user can settle it: the agent asks them"),
    "measure": ("being looked up", "a system lookup settles it; this page updates when it returns"),
    "hold": ("held", "nobody may settle it now: a lookup failed, or it waits for a decision"),
    "provider_gap": (
        "missing from the tool's definition",
        "the tool's definition does not declare what is needed; asking the user cannot fix it",
    ),
    "unsupported": ("not understood here", "this gate cannot read the schema construct, so it holds"),
}
APPROVALS = {
    "required": ("needs an approver", "an approver's yes to this exact value is required"),
    "void": ("approval void", "the value changed after it was approved: it needs approving again"),
    "approved": ("approved", "an approver approved this exact value"),
}
HELP = {
    "fixed:tool": "which tool the call goes to",
    "fixed:action_name": "the user's own words for what should be done",
    "fixed:intended_change": "what the call changes, as the tool declares it",
    "fixed:timing": "when the call should run",
}
HELP_BY_PREFIX = (
    ("arg:", "an argument the tool receives"),
    ("cond:", "a condition checked before the call may run"),
    ("confirm:", "the requesting user's yes to this value"),
    ("consent:", "the requesting user's yes to the whole call, as shown"),
    ("approval:", "an approver's yes to the whole call, bound to its payload"),
    ("user:", "a rule set for this user"),
    ("branch:", "which form of the arguments applies"),
    ("review:", "the final decision on this call"),
)


class Flag(NamedTuple):
    css: str
    text: str


@dataclass(slots=True)
class SlotRow:
    key: str
    label: str
    kind: str
    status: str
    value: str
    value_title: str = ""  # the value as the record has it, where the shown words differ (null, grouped)
    help: str = ""
    route_text: str = ""
    route_help: str = ""
    approval_text: str = ""
    approval_help: str = ""
    source: str | None = None  # the badge text
    source_css: str = ""
    source_href: str | None = None
    route: str | None = None
    labels: list[str] = field(default_factory=list)
    approval: str | None = None
    css: list[str] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    candidate: str | None = None
    detail: str | None = None
    spans: str = ""  # "turn:start:end ..." of the pointer, for the conversation highlight
    first_span: tuple[int, int, int] | None = None
    approvable: bool = False
    value_digest: str = ""
    editable: bool = False
    edit_value: str = ""
    edit_hint: str = ""
    # (argument, old, new) since the last approval; the argument is named only for a whole-call approval
    change: list[tuple[str, str, str]] = field(default_factory=list)
    # A reviewer's edit: (the value it replaced, where that value came from); "" when nothing was settled
    replaced: tuple[str, str] | None = None
    replaced_new: str = ""  # the new value as the diff shows it (raw, where grouping would hide the change)

    def as_dict(self) -> dict[str, Any]:
        """For the template: a dict resolves each `row.x` on the first try, where an object costs Django's
        template engine a failed `row["x"]` first, for every lookup of every row."""
        out = {name: getattr(self, name) for name in self.__slots__}
        out["row_class"] = " ".join(self.css)
        turn, start, end = self.first_span or ("", "", "")
        out.update(first_turn=turn, first_start=start, first_end=end)
        return out


@dataclass(slots=True)
class Segment:
    text: str
    spans: str = ""  # ids of the pointers covering it; empty: plain text
    css: str = ""  # "found" (a pointer that holds its value) or "claimed" (one that does not)
    title: str = ""


@dataclass(slots=True)
class Turn:
    index: int
    role: str
    trusted: bool
    segments: list[Segment]


def show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def grouped(value: Any) -> str:
    """A value as a person reads it: an IBAN (checksum-valid) in groups of four, anything else as `show`."""
    text = show(value)
    compact = text.replace(" ", "")
    if isinstance(value, str) and 15 <= len(compact) <= 34 and compact.isalnum() and iban.is_valid(compact):
        return str(iban.format(compact))
    return text


def when_text(value: datetime | str | None, zone: tzinfo = UTC) -> str:
    """One way to write a time everywhere: `2026-12-02 10:21:43 UTC`, in `zone`, its name always shown.
    An ISO string is read first; what does not read is shown as it is."""
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return text
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def short(digest: str | None) -> str:
    return digest[7:19] if digest and digest.startswith("sha256:") else (digest or "")


def age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def span_ids(pointer: Any) -> list[tuple[int, int, int]]:
    if not isinstance(pointer, Mapping):
        return []
    if "spans" in pointer:
        return [s for p in pointer["spans"] for s in span_ids(p)]
    if {"turn", "start", "end"} <= pointer.keys():
        return [(int(pointer["turn"]), int(pointer["start"]), int(pointer["end"]))]
    return []


def arg_schema(definition: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """The inputSchema of the argument slot `key` (`arg:a.b` walks properties), {} if not one declared."""
    if not key.startswith("arg:"):
        return {}
    node: Any = (definition or {}).get("inputSchema") or {}
    for part in key[4:].split("."):
        props = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(props, Mapping) or part not in props:
            return {}
        node = props[part]
    return node if isinstance(node, Mapping) else {}


def schema_types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    return []


def parse_edit(text: str, schema: Mapping[str, Any]) -> Any:
    """A reviewer's typed value, read by the argument's declared type: a string argument takes the text as
    written ("00123" stays a string); anything else is JSON, and text that is not JSON is the text itself.
    Whether the slot takes it is the engine's to say (its answer check), never a second copy here."""
    if schema_types(schema) == ["string"]:
        return text
    try:
        return json_text.loads(text)
    except ValueError:
        return text


@dataclass(slots=True)
class Context:
    """What the rows need besides the record."""

    now: datetime
    answers: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # "answer-<pk>" -> (channel, by)
    approved: Mapping[str, Any] = field(default_factory=dict)  # void slot key -> value when it was approved
    definition: Mapping[str, Any] | None = None  # the contract's tool definition (argument schemas)
    can_edit: bool = False
    can_approve: bool = False
    # Rejected, expired or ran: nothing is required of anyone any more, so nothing reads as waiting.
    final: bool = False
    before: Mapping[str, tuple[Any, str]] = field(default_factory=dict)  # see values_before_edits


def slot_rows(record: Mapping[str, Any], ctx: Context) -> list[SlotRow]:
    return [slot_row(s, record, ctx) for s in record.get("slots") or []]


def slot_row(s: Mapping[str, Any], record: Mapping[str, Any], ctx: Context) -> SlotRow:
    key, status = s["key"], s["status"]
    row = SlotRow(
        key=key,
        label=s.get("label") or key,
        kind=s.get("kind") or "",
        status=status,
        value=_value_text(s),
        help=HELP.get(key) or next((text for prefix, text in HELP_BY_PREFIX if key.startswith(prefix)), ""),
        route=s.get("route") if status == "unknown" and not ctx.final else None,
        labels=list(s.get("labels") or ()),
        approval=s.get("approval") if not ctx.final or s.get("approval") == "approved" else None,
        detail=s.get("detail") or (f"waits for {', '.join(s['waits_for'])}" if s.get("waits_for") else None),
    )
    if row.value != show(s.get("value")) and status != "unknown":
        row.value_title = show(s.get("value"))
    row.route_text, row.route_help = ROUTES.get(row.route or "", (row.route or "", ""))
    row.approval_text, row.approval_help = APPROVALS.get(row.approval or "", (row.approval or "", ""))
    row.source, row.source_css, row.source_href = _source(s, ctx)
    findings = s.get("findings") or []

    if status == "unknown":
        row.css.append("closed" if ctx.final else "unresolved")
    if "candidate" in s:
        # A model proposal whose pointer did not hold (or that had none): shown, never counted.
        row.css.append("unverified")
        row.candidate = show(s["candidate"].get("value"))
        row.flags.append(Flag("unverified", "proposed, no source"))
    if "refused" in s:
        # A value that was found but that the tool's schema refuses: it settles nothing; the reason shows.
        row.css.append("unverified")
        row.candidate = show(s["refused"].get("value"))
        row.flags.append(Flag("refused", f"the tool refuses it: {s['refused'].get('reason')}"))
    for f in findings:
        detail = f.get("detail") or ""
        if f.get("outcome") == "no_result" and detail.startswith("stale"):
            row.css.append("stale")
            row.flags.append(Flag("stale", detail))
        elif f.get("outcome") == "error":
            row.flags.append(
                Flag("error", f"{f.get('source')} failed: {detail}" if detail else "lookup failed")
            )
    if is_user_yes_key(key):
        # The requesting user's own yes or no: evidence for the approver, never theirs to give.
        row.flags.append(Flag("user-yes", "the user's to answer, not an approver's"))
    if s.get("met") is False:
        row.css.append("unmet")
        on_false = next(
            (u["on_false"] for u in record.get("unmet") or [] if key in (u["id"], f"cond:{u['id']}")), None
        )
        row.flags.append(Flag("unmet", f"unmet: {on_false or 'hold'}"))
    if s.get("gap") == "provider_gap" or s.get("route") == "provider_gap":
        row.css.append("gap")
        row.flags.append(Flag("gap", "provider gap"))
    elif s.get("route") == "unsupported":
        row.css.append("gap")
        row.flags.append(Flag("gap", "not supported"))

    spans = span_ids(s.get("pointer")) if status != "unknown" else []
    if not spans:
        # The span the model pointed at, even though it does not hold the value: the reviewer sees why.
        spans = [
            sp for f in findings if f.get("source") == "instruction" for sp in span_ids(f.get("pointer"))
        ]
    if spans:
        row.spans = " ".join(f"{t}:{a}:{b}" for t, a, b in spans)
        row.first_span = spans[0]

    if row.approval in AWAITING_APPROVAL and status != "unknown" and not key.startswith("approval:"):
        row.approvable = ctx.can_approve
        row.value_digest = value_digest(s.get("value"))
    if row.approval == "approved":
        row.css.append("approved")
    if row.approval == "void":
        row.css.append("void")
        if key in ctx.approved:
            row.change = _changes(key, ctx.approved[key], s, record)
    if row.source_css == "reviewer" and key in ctx.before:
        old, old_source = ctx.before[key]
        old_text, row.replaced_new = (grouped(old) if old is not None else ""), row.value
        if old_text == row.value:
            old_text, row.replaced_new = show(old), show(s.get("value"))  # differs in spacing only: say so
        row.replaced = (old_text, old_source)
        if row.change and row.change[0][1] == row.replaced[0]:
            row.change = []  # the same old value: one line says it

    row.editable = ctx.can_edit and (key.startswith(("arg:", "branch:")) or key in ANSWERABLE_FIXED)
    if row.editable:
        schema = arg_schema(ctx.definition, key)
        row.edit_hint = " or ".join(schema_types(schema)) or (
            "JSON"
            if key.startswith("arg:")
            else "immediate, or a date-time with offset"
            if key == "fixed:timing"
            else "text"
        )
        if status == "known":
            value = s.get("value")
            if key == "fixed:timing" and isinstance(value, Mapping):
                value = value.get("at") or value.get("mode")
            row.edit_value = show(value)
    return row


def _value_text(s: Mapping[str, Any]) -> str:
    key, status, value = s["key"], s["status"], s.get("value")
    if status == "unknown":
        return "—"
    if s.get("kind") == "condition" and "met" in s:
        return "met" if s["met"] else "not met"
    if key.startswith("approval:") and status == "known":
        return f"payload {short(value)}"
    if is_user_yes_key(key) and status == "known":
        return "the user said no" if value is False else f"the user said yes (to {short(value)})"
    if status == "null":
        return "left out" if value is None else show(value)
    if key == "fixed:timing":
        if value == "immediate" or (isinstance(value, Mapping) and value.get("mode") == "immediate"):
            return "immediately"
        at = value.get("at") if isinstance(value, Mapping) else value
        return f"at {when_text(at)}" if isinstance(at, str) else show(value)
    return grouped(value)


def _source(s: Mapping[str, Any], ctx: Context) -> tuple[str | None, str, str | None]:
    """The badge of a slot's source: its words, its css class and where it links (None, "", None: none)."""
    source, pointer = s.get("source"), s.get("pointer") or {}
    if not source or s["status"] == "unknown":
        return None, "", None
    if source == "user_answer":
        channel, by = ctx.answers.get(str(pointer.get("answer")), ("agent", str(pointer.get("by") or "")))
        if channel == "reviewer":
            return f"reviewer answer · {by}", "reviewer", None
        return "user answer", source, None
    if source == "instruction":
        turns = ", ".join(str(t) for t in sorted({t for t, _, _ in span_ids(pointer)}))
        return (f"instruction · turn {turns}" if turns else "instruction"), source, None
    if source == "preset":
        return f"preset #{str(pointer.get('preset', '')).removeprefix('preset-')}", source, None
    if source == "observed":
        try:
            when = datetime.fromisoformat(pointer["observed_at"])
        except (KeyError, TypeError, ValueError):  # no time, or not an ISO string
            return "observed", source, None
        return f"observed {when_text(when)} · {age((ctx.now - when).total_seconds())} ago", source, None
    if source == "prior_state":
        execution, _, seq = str(pointer.get("record") or "").partition("#")
        href = f"/executions/{execution}/" if execution else None
        return f"prior record {execution[:8]}#{seq}", source, href
    if source == "reviewer":
        return f"reviewer · {pointer.get('by', '')}", source, None
    return _SOURCE_WORDS.get(source, source), source, None


_SOURCE_WORDS = {"contract": "declared by the tool", "condition": "evaluated", "approval": "approved"}


def _changes(
    key: str, old: Any, s: Mapping[str, Any], record: Mapping[str, Any]
) -> list[tuple[str, str, str]]:
    if key.startswith("approval:"):
        # An approval of the whole call was for an older payload: show which arguments moved.
        new = record.get("payload") or {}
        old = old or {}
        return [
            (name, show(old.get(name)), show(new.get(name)))
            for name in sorted(set(old) | set(new))
            if old.get(name) != new.get(name)
        ]
    return [("", show(old), show(s.get("value")))]


def values_before_edits(
    history: Iterable[Mapping[str, Any]], keys: Sequence[str], ctx: Context
) -> dict[str, tuple[Any, str]]:
    """For each slot a reviewer's answer settles now, the value it had before any reviewer's edit and where
    that came from (newest record first): what the edit replaced. (None, "") when nothing had settled it."""
    wanted = set(keys)
    found: dict[str, tuple[Any, str]] = {}
    for record in history:
        for s in record.get("slots") or []:
            if s["key"] not in wanted or s["key"] in found:
                continue
            source, css, _ = _source(s, ctx)
            if css == "reviewer":
                continue  # an earlier edit: look further back
            found[s["key"]] = (s.get("value"), source or "") if s["status"] != "unknown" else (None, "")
        if len(found) == len(wanted):
            break
    return {key: found.get(key, (None, "")) for key in wanted}


def approved_values(history: Iterable[Mapping[str, Any]], void_keys: Sequence[str]) -> dict[str, Any]:
    """For each voided slot, the value it had when last approved (newest record first). For an approval of
    the whole call that is the payload then."""
    wanted = set(void_keys)
    found: dict[str, Any] = {}
    for record in history:
        for s in record.get("slots") or []:
            if s["key"] in wanted and s["key"] not in found and s.get("approval") == "approved":
                found[s["key"]] = (
                    record.get("payload") if s["key"].startswith("approval:") else s.get("value")
                )
        if len(found) == len(wanted):
            break
    return found


def conversation(request: Mapping[str, Any], rows: Sequence[SlotRow]) -> list[Turn]:
    """The turns, each cut where a pointer starts or ends, so every pointed-at span is its own <mark>."""
    marks: dict[int, list[tuple[int, int, str, str, str]]] = {}
    for row in rows:
        css = "claimed" if row.status == "unknown" or "unverified" in row.css else "found"
        for token in row.spans.split():
            t, a, b = (int(x) for x in token.split(":"))
            marks.setdefault(t, []).append((a, b, token, css, row.key))
    return [
        Turn(
            index,
            str(turn.get("role") or ""),
            bool(turn.get("trusted")),
            _segments(str(turn.get("content") or ""), marks.get(index, [])),
        )
        for index, turn in enumerate(request.get("conversation") or [])
    ]


def _segments(content: str, marks: list[tuple[int, int, str, str, str]]) -> list[Segment]:
    if not marks:
        return [Segment(content)]
    # Where each mark starts and ends, clamped into the text, and the text's own two ends.
    ends = {min(max(x, 0), len(content)) for m in marks for x in (m[0], m[1])}
    cuts = sorted({0, len(content), *ends})
    out = []
    for a, b in pairwise(cuts):
        over = [m for m in marks if m[0] <= a and m[1] >= b]
        if not over:
            out.append(Segment(content[a:b]))
            continue
        css = "found" if any(m[3] == "found" for m in over) else "claimed"
        out.append(
            Segment(
                content[a:b],
                " ".join(sorted({m[2] for m in over})),
                css,
                ", ".join(sorted({m[4] for m in over})),
            )
        )
    return out
