"""The state one preflight's stages share: the slots so far, what they settled, and what is still open."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .contract import SOURCES
from .plan import Plan
from .pointers import Span
from .record import Finding, Gap, MeasureRequest, Question, SlotState, Unmet
from .request import Evidence, ExecutionRequest
from .schema import Property, Unsupported

DefinedBy = Literal["provider", "policy", "user"]


@dataclass(slots=True)
class Resolution:
    """What the source walk (or a judged expression) found for one slot: mutable while the stages work."""

    status: Literal["known", "null", "unknown"] = "unknown"
    value: Any = None
    source: str | None = None
    pointer: Mapping[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    error: bool = False
    measure: MeasureRequest | None = None  # a lookup that would settle it
    waits_for: tuple[str, ...] = ()
    candidate: Any = None
    unverified: bool = False
    reason: str | None = None  # why an expression has no value
    refused: str | None = None  # why the tool's schema refuses the value found (it does not settle then)


class RunState:
    """State of one evaluation, shared by its stages. Not shared across threads or calls."""

    def __init__(self, plan: Plan, request: ExecutionRequest, evidence: Evidence, tool_source: str) -> None:
        self.plan = plan
        self.contract = plan.contract
        self.request = request
        self.evidence = evidence
        self.tool_source = tool_source
        self.now = evidence.now
        self.slots: list[SlotState] = []
        # kept by add() as slots come in, so the verdict need not scan every slot again
        self.unknown: list[SlotState] = []
        # constructs only the whole-payload validation can decide: settled or held once it has run
        self.value_only: list[tuple[Unsupported, tuple[str, ...]]] = []  # with its object's argument path
        self.confirms: list[SlotState] = []  # settled values still awaiting an approver's approval
        self.fresh_until: datetime | None = None  # when the first observation read goes stale
        self.gaps: list[Gap] = []
        self.unmet: list[Unmet] = []
        self.questions: list[Question] = []
        self.frontier: dict[str, MeasureRequest] = {}
        self.reasons: list[str] = []
        self.values: dict[str, Any] = {}  # settled argument path -> value (null included as None)
        self.arg_slots: dict[str, SlotState] = {}
        self.arg_props: dict[str, tuple[Property, bool]] = {}  # argument path -> (property, required)
        self.undeclared_at: dict[str, str] = {}  # undeclared argument path -> the object path it sits in
        self.extra_paths: list[str] | None = None  # evidence for paths the schema does not declare
        self.resolved: dict[str, Resolution] = {}
        self.objects: list[str] = []  # nested objects that are present, even with no settled member
        self.deferred = False
        self.timing_at: datetime | None = None
        self.rules = [
            (c, r)
            for c in plan.rules
            for r in c.rules
            if r.applies(
                principal=request.principal,
                environment=request.environment,
                tool=plan.contract.identity,
                arguments=plan.arguments,
            )
        ]
        # argument paths the applicable rules make obligatory, beside the schema and the labels
        self.rule_required = frozenset(r.arg for _, r in self.rules if r.kind == "require" and r.arg)

    def add(self, slot: SlotState) -> None:
        self.slots.append(slot)
        if slot.status == "unknown":
            self.unknown.append(slot)
        elif slot.approval is not None and slot.approval != "approved":
            self.confirms.append(slot)
        if slot.gap is not None:
            self.gaps.append(Gap(slot.gap, slot.key, slot.detail or slot.label))

    def sanitize(self, text: str) -> str:
        # A question never names a tool: the user chooses outcomes, not implementations.
        for name in (self.contract.name, self.contract.identity):
            if name and name in text:
                text = text.replace(name, "this action")
        return text

    @staticmethod
    def _found(res: Resolution, source: str, value: Any, pointer: Mapping[str, Any] | None) -> Resolution:
        res.findings.append(Finding(source, "found", pointer))
        res.status = "null" if value is None else "known"
        res.value, res.source, res.pointer = value, source, pointer
        res.unverified = False
        return res


# Findings are immutable, so the plain "nothing here" finding of each source is shared, not rebuilt.
NO_RESULT = {source: Finding(source, "no_result") for source in (*SOURCES, "contract")}


def pointer_json(pointer: Span | tuple[Span, ...] | None) -> dict[str, Any] | None:
    if pointer is None:
        return None
    if isinstance(pointer, Span):
        return {"turn": pointer.turn, "start": pointer.start, "end": pointer.end}
    return {"spans": [{"turn": p.turn, "start": p.start, "end": p.end} for p in pointer]}


def set_path(target: dict[str, Any], path: str, value: Any, *, keep: bool = False) -> None:
    if "." not in path and not keep:
        target[path] = value  # the common case, a top-level argument
        return
    parts = path.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    if keep:
        target.setdefault(parts[-1], value)
    else:
        target[parts[-1]] = value
