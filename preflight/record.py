"""The immutable outcome of one preflight, and its JSON form (the record of the Agent API).

Its values are attrs frozen classes, not frozen dataclasses: a preflight builds dozens of them, and attrs'
__init__ does not look up object.__setattr__ per field. Copy one with attrs.evolve.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

import attrs

from .canonical import digest, digest_written_as_is, written_as_is

__all__ = [
    "Finding",
    "Gap",
    "MeasureRequest",
    "Question",
    "Record",
    "SlotState",
    "Unmet",
]

Verdict = Literal["execute", "ask", "measure", "hold", "block", "deferred"]
# Where an open slot goes: one vocabulary of routes (the engine, the record's JSON, the console's filters).
Route = Literal["ask_user", "measure", "hold", "provider_gap", "unsupported"]
ROUTES: Final[tuple[Route, ...]] = get_args(Route)
# A settled slot's need of an approver's approval: `required` until one holds, `void` once the value changed
# after it was approved (approvals.approval_state says `none` where no approval of the slot is held at all).
SlotApproval = Literal["approved", "void", "required"]
SLOT_APPROVALS: Final[tuple[SlotApproval, ...]] = get_args(SlotApproval)
AWAITING_APPROVAL: Final[frozenset[SlotApproval]] = frozenset({"required", "void"})
GapClass = Literal["user_gap", "provider_gap", "source_gap", "implementation_gap"]
Status = Literal["known", "null", "unknown"]
SlotKind = Literal["value", "condition", "intent"]
Owner = Literal["fixed", "provider", "policy", "user"]


@attrs.frozen
class Finding:
    source: str
    outcome: Literal["found", "no_result", "error"]
    pointer: Mapping[str, Any] | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "outcome": self.outcome}
        if self.pointer is not None:
            out["pointer"] = dict(self.pointer)
        if self.detail is not None:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        return cls(data["source"], data["outcome"], data.get("pointer"), data.get("detail"))


@attrs.frozen(kw_only=True)
class SlotState:
    key: str
    kind: SlotKind
    defined_by: Owner
    label: str
    status: Status
    value: Any = None
    source: str | None = None
    pointer: Mapping[str, Any] | None = None
    route: Route | None = None
    gap: GapClass | None = None
    labels: tuple[str, ...] = ()
    approval: SlotApproval | None = None
    findings: tuple[Finding, ...] = ()
    candidate: Any = None  # an unverified model proposal: shown, never counted
    unverified: bool = False
    detail: str | None = None
    met: bool | None = None  # conditions: True/False once evaluated
    waits_for: tuple[str, ...] = ()
    # Why the tool's schema refuses the value in `candidate` (a user-answerable one is asked again).
    refused: str | None = None

    @property
    def settled(self) -> bool:
        return self.status != "unknown"

    @classmethod
    def tool_held(cls, detail: str) -> SlotState:
        """The action itself held for review: no catalog tool can do it (now or any longer)."""
        return cls.held("fixed:tool", "the action", detail, kind="intent", defined_by="fixed")

    @classmethod
    def held(
        cls,
        key: str,
        label: str,
        detail: str,
        *,
        kind: SlotKind = "condition",
        defined_by: Owner = "provider",
        findings: tuple[Finding, ...] = (),
        approval: SlotApproval | None = None,
    ) -> SlotState:
        """Open and held for a person: no answer or lookup can settle it now."""
        return cls(
            key=key,
            kind=kind,
            defined_by=defined_by,
            label=label,
            status="unknown",
            route="hold",
            approval=approval,
            findings=findings,
            detail=detail,
        )

    @classmethod
    def provider_gap(
        cls,
        key: str,
        label: str,
        detail: str,
        *,
        kind: SlotKind = "condition",
        defined_by: Owner = "provider",
        findings: tuple[Finding, ...] = (),
    ) -> SlotState:
        """Open until the tool's provider declares what is missing: nobody else can settle it."""
        return cls(
            key=key,
            kind=kind,
            defined_by=defined_by,
            label=label,
            status="unknown",
            route="provider_gap",
            gap="provider_gap",
            findings=findings,
            detail=detail,
        )

    @classmethod
    def unsupported(cls, key: str, label: str, detail: str) -> SlotState:
        """A schema construct the engine cannot check: held as an implementation gap."""
        return cls(
            key=key,
            kind="condition",
            defined_by="provider",
            label=label,
            status="unknown",
            route="unsupported",
            gap="implementation_gap",
            detail=detail,
        )

    @classmethod
    def ask_user(
        cls,
        key: str,
        label: str,
        detail: str,
        *,
        kind: SlotKind = "value",
        defined_by: Owner = "provider",
        findings: tuple[Finding, ...] = (),
        candidate: Any = None,
        unverified: bool = False,
    ) -> SlotState:
        """Open until the requesting user answers the question asked beside it."""
        return cls(
            key=key,
            kind=kind,
            defined_by=defined_by,
            label=label,
            status="unknown",
            route="ask_user",
            gap="user_gap",
            findings=findings,
            candidate=candidate,
            unverified=unverified,
            detail=detail,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "kind": self.kind,
            "defined_by": self.defined_by,
            "label": self.label,
            "status": self.status,
            "value": self.value,
            "source": self.source,
            "pointer": dict(self.pointer) if self.pointer is not None else None,
            "route": self.route,
            "labels": list(self.labels),
            "approval": self.approval,
            "findings": [f.to_json() for f in self.findings],
        }
        if self.gap is not None:
            out["gap"] = self.gap
        if self.refused is not None:
            out["refused"] = {"value": self.candidate, "reason": self.refused}
        elif self.unverified:
            out["candidate"] = {"value": self.candidate, "verified": False}
        if self.detail is not None:
            out["detail"] = self.detail
        if self.met is not None:
            out["met"] = self.met
        if self.waits_for:
            out["waits_for"] = list(self.waits_for)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SlotState:
        """The slot `to_json` wrote. A refused value comes back as the candidate it is, with its reason; a
        candidate that was neither refused nor unverified was never written, so it comes back as None."""
        refused, candidate = data.get("refused"), data.get("candidate")
        return cls(
            key=data["key"],
            kind=data["kind"],
            defined_by=data["defined_by"],
            label=data["label"],
            status=data["status"],
            value=data.get("value"),
            source=data.get("source"),
            pointer=data.get("pointer"),
            route=data.get("route"),
            gap=data.get("gap"),
            labels=tuple(data.get("labels") or ()),
            approval=data.get("approval"),
            findings=tuple(Finding.from_json(f) for f in data.get("findings") or ()),
            candidate=(refused or candidate or {}).get("value"),
            unverified=refused is None and candidate is not None,
            detail=data.get("detail"),
            met=data.get("met"),
            waits_for=tuple(data.get("waits_for") or ()),
            refused=refused["reason"] if refused is not None else None,
        )


QuestionKind = Literal["value", "choice", "without", "confirmation", "consent"]


@attrs.frozen
class Question:
    """What the user is asked. `schema` is what an answer must satisfy before it counts (otherwise 422
    `invalid_answer`). `kind`: "value" (say the value), "choice" (pick one of `options`, by label or
    index), "without" (the tool has no such setting: answer null to go ahead without it),
    "confirmation" (the user's yes/no to one value, shown in `shows`) or "consent" (the user's yes/no to
    the whole call, the payload shown in words and in `shows`). A confirmation or consent is bound to
    `shows["digest"]`. `reason`: why the value stated before cannot be used. `proposed`: a value the
    conversation proposed that did not settle the slot, shown beside the question, one element or none."""

    slot: str
    text: str
    schema: Mapping[str, Any]
    options: tuple[str, ...] = ()
    kind: QuestionKind = "value"
    shows: Mapping[str, Any] | None = None
    reason: str | None = None
    proposed: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        kind = "choice" if self.kind == "value" and self.options else self.kind
        out: dict[str, Any] = {
            "slot": self.slot,
            "kind": kind,
            "text": self.text,
            "schema": dict(self.schema),
        }
        if self.options:
            out["options"] = list(self.options)
        if self.shows is not None:
            out["shows"] = dict(self.shows)
        if self.reason is not None:
            out["reason"] = self.reason
        if self.proposed:
            out["proposed"] = {"value": self.proposed[0], "verified": False}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Question:
        proposed = data.get("proposed")
        return cls(
            data["slot"],
            data["text"],
            data["schema"],
            tuple(data.get("options") or ()),
            data["kind"],
            data.get("shows"),
            data.get("reason"),
            (proposed["value"],) if proposed is not None else (),
        )


@attrs.frozen
class Gap:
    cls: GapClass
    slot: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"class": self.cls, "slot": self.slot, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Gap:
        return cls(data["class"], data["slot"], data["detail"])


@attrs.frozen
class Unmet:
    id: str
    on_false: Literal["hold", "block"]
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "on_false": self.on_false, "text": self.text}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Unmet:
        return cls(data["id"], data["on_false"], data.get("text") or "")


@attrs.frozen
class MeasureRequest:
    """One lookup whose inputs are settled: the caller runs a frontier of these in parallel."""

    measure: str
    lookup: str
    args: Mapping[str, Any]
    args_digest: str
    max_age_s: float

    @property
    def key(self) -> str:
        return f"{self.measure}#{self.args_digest}"

    def to_json(self) -> dict[str, Any]:
        return {"measure": self.measure, "lookup": self.lookup, "args": dict(self.args), "key": self.key}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasureRequest:
        """The lookup `to_json` wrote. Its max age is the plan's, not in the JSON: read back as 0 s, so an
        observation taken for it is never held fresher than the plan would hold it."""
        args_digest = data["key"].rpartition("#")[2]
        return cls(data["measure"], data["lookup"], data["args"], args_digest, 0.0)


@attrs.frozen(kw_only=True)
class Record:
    verdict: Verdict
    server: str
    tool: str
    contract_digest: str
    principal: str
    checklist_version: str
    slots: tuple[SlotState, ...]
    questions: tuple[Question, ...]
    measures: tuple[MeasureRequest, ...]  # the lookup frontier
    unmet: tuple[Unmet, ...]
    gaps: tuple[Gap, ...]
    notices: tuple[str, ...]
    payload: Mapping[str, Any] | None
    payload_digest: str | None
    payload_valid: bool | None  # None until every slot is settled: completeness and validity are two facts
    payload_errors: tuple[str, ...]
    unknown_count: int
    reasons: tuple[str, ...]  # why the verdict is what it is, in words
    evaluated_at: str
    timing_at: str | None = None
    # The moment the first observation this record rests on goes stale (observed_at + max_age_s): a grant
    # for it expires no later than this.
    fresh_until: str | None = None

    @classmethod
    def one_open_slot(
        cls,
        *,
        verdict: Verdict,
        server: str,
        tool: str,
        contract_digest: str,
        principal: str,
        checklist_version: str,
        slot: SlotState,
        questions: tuple[Question, ...] = (),
        gaps: tuple[Gap, ...] = (),
        reason: str,
        evaluated_at: str,
    ) -> Record:
        """A record of one open slot that says why and no payload: the pipeline did not run (which tool is
        not settled yet, a tool gone from the catalog, a pinned definition that changed upstream)."""
        return cls(
            verdict=verdict,
            server=server,
            tool=tool,
            contract_digest=contract_digest,
            principal=principal,
            checklist_version=checklist_version,
            slots=(slot,),
            questions=questions,
            measures=(),
            unmet=(),
            gaps=gaps,
            notices=(),
            payload=None,
            payload_digest=None,
            payload_valid=None,
            payload_errors=(),
            unknown_count=1,
            reasons=(reason,),
            evaluated_at=evaluated_at,
        )

    def slot(self, key: str) -> SlotState:
        for s in self.slots:
            if s.key == key:
                return s
        raise KeyError(key)

    def body(self) -> dict[str, Any]:
        """The record JSON without its own digest (what the digest covers)."""
        return {
            "verdict": self.verdict,
            "server": self.server,
            "tool": self.tool,
            "contract_digest": self.contract_digest,
            "principal": self.principal,
            "checklist_version": self.checklist_version,
            "slots": [s.to_json() for s in self.slots],
            "questions": [q.to_json() for q in self.questions],
            "measures": [m.to_json() for m in self.measures],
            "unmet": [u.to_json() for u in self.unmet],
            "gaps": [g.to_json() for g in self.gaps],
            "notices": list(self.notices),
            "payload": dict(self.payload) if self.payload is not None else None,
            "payload_digest": self.payload_digest,
            "payload_valid": self.payload_valid,
            "payload_errors": list(self.payload_errors),
            "unknown_count": self.unknown_count,
            "reasons": list(self.reasons),
            "evaluated_at": self.evaluated_at,
            "timing_at": self.timing_at,
            "fresh_until": self.fresh_until,
        }

    def digest(self) -> str:
        # Computed on demand: evaluating a preflight should not pay for hashing a record nobody stores.
        return _body_digest(self.body())

    def to_json(self) -> dict[str, Any]:
        out = self.body()
        out["record_digest"] = _body_digest(out)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        """The record `to_json` (or `body`) wrote: its JSON again, digest and all. `record_digest` is not
        read; it follows from the rest."""
        return cls(
            verdict=data["verdict"],
            server=data["server"],
            tool=data["tool"],
            contract_digest=data["contract_digest"],
            principal=data["principal"],
            checklist_version=data["checklist_version"],
            slots=tuple(SlotState.from_json(s) for s in data["slots"]),
            questions=tuple(Question.from_json(q) for q in data["questions"]),
            measures=tuple(MeasureRequest.from_json(m) for m in data["measures"]),
            unmet=tuple(Unmet.from_json(u) for u in data["unmet"]),
            gaps=tuple(Gap.from_json(g) for g in data["gaps"]),
            notices=tuple(data["notices"]),
            payload=data["payload"],
            payload_digest=data["payload_digest"],
            payload_valid=data["payload_valid"],
            payload_errors=tuple(data["payload_errors"]),
            unknown_count=data["unknown_count"],
            reasons=tuple(data["reasons"]),
            evaluated_at=data["evaluated_at"],
            timing_at=data.get("timing_at"),
            fresh_until=data.get("fresh_until"),
        )


def _body_digest(body: dict[str, Any]) -> str:
    """digest(body), without walking the parts whose JSON is canonical by their types.

    Only values from outside (arguments, candidates, pointers, question schemas, lookup arguments, the
    payload) can hold a number or key RFC 8785 spells differently: any that is not plain sends the whole
    body down the general path.
    """
    if not (written_as_is(body["unknown_count"]) and written_as_is(body["payload"])):
        return digest(body)
    for slot in body["slots"]:
        if not (written_as_is(slot["value"]) and written_as_is(slot["pointer"])):
            return digest(body)
        for extra in ("candidate", "refused"):
            candidate = slot.get(extra)
            if candidate is not None and not written_as_is(candidate):
                return digest(body)
        for finding in slot["findings"]:
            pointer = finding.get("pointer")
            if pointer is not None and not written_as_is(pointer):
                return digest(body)
    for question in body["questions"]:
        if (
            not written_as_is(question["schema"])
            or not written_as_is(question.get("shows"))
            or not written_as_is(question.get("proposed"))
        ):
            return digest(body)
    for measure in body["measures"]:
        if not written_as_is(measure["args"]):
            return digest(body)
    return digest_written_as_is(body)
