"""One preflight: materialize slots, resolve them source by source, route the remainder, count a verdict.

The plan (compiled once per contract and checklist version: plan.py) holds everything that does not depend
on the request; `preflight()` is the cheap per-call part, the pipeline below. Its stages are one module each,
every one a class over the one before it and, at the bottom, the state they share (state.py): resolve.py fills
a slot from its sources, conditions.py judges expressions and approvals, consent.py asks the user's yes,
materialize.py builds the slots, verdict.py assembles the payload and counts what is still empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .canonical import digest
from .checklist import FIXED_CHECKLIST
from .plan import Plan, compile_plan
from .record import Gap, Question, Record, SlotState
from .request import Evidence, ExecutionRequest
from .verdict import Verdict

__all__ = ["Plan", "compile_plan", "preflight", "select_tool"]


def preflight(
    plan: Plan, request: ExecutionRequest, evidence: Evidence, *, tool_source: str = "instruction"
) -> Record:
    """Evaluate one candidate execution against a compiled plan. Pure: same inputs, same record."""
    run = Verdict(plan, request, evidence, tool_source)
    # The slots: the fixed intent part, then the provider's (labels, prose, every argument's value).
    run.fixed_slots()
    run.provider_slots()
    run.conditions()
    # The payload from the settled values; what only the whole schema decides is decided on it.
    payload, valid, errors = run.payload()
    run.value_only_slots(payload, valid)
    full_digest = digest(payload) if payload is not None else None
    payload_digest = full_digest if valid else None
    # What binds to the final payload: the user's yes to the call, its effect key, approvals.
    run.consent(payload if valid else None, payload_digest)
    run.effect_key(payload if valid else None)
    run.approvals(payload_digest)
    verdict = run.count(valid, errors)
    questions = run.questions if verdict in ("ask", "hold", "deferred") else []
    measures = tuple(run.frontier.values()) if verdict == "measure" else ()
    contract = plan.contract
    return Record(
        verdict=verdict,
        server=contract.server,
        tool=contract.name,
        contract_digest=contract.digest,
        principal=request.principal,
        checklist_version=plan.checklist_version,
        slots=tuple(run.slots),
        questions=tuple(questions),
        measures=measures,
        unmet=tuple(run.unmet),
        gaps=tuple(run.gaps),
        notices=plan.notices,
        payload=payload,
        payload_digest=full_digest,
        payload_valid=valid,
        payload_errors=errors,
        unknown_count=len(run.unknown),
        reasons=tuple(run.reasons),
        evaluated_at=run.now.isoformat(),
        timing_at=run.timing_at.isoformat() if run.timing_at else None,
        fresh_until=run.fresh_until.isoformat() if run.fresh_until else None,
    )


def select_tool(plans: Sequence[Plan], request: ExecutionRequest, evidence: Evidence) -> Plan | Record:
    """Narrow candidate tools by the intended change; more than one left asks the user, never naming tools."""
    changing = [p for p in plans if not p.contract.read_only]
    if request.intended_effect:
        changing = [p for p in changing if request.intended_effect in p.contract.extension.effects]
    options = tuple(
        p.contract.extension.state_change or p.contract.title or "another action" for p in changing
    )
    answer = evidence.answers.get("fixed:tool")
    if answer is not None and len(changing) > 1:
        if (
            isinstance(answer.value, int)
            and not isinstance(answer.value, bool)
            and 0 <= answer.value < len(changing)
        ):
            return changing[answer.value]
        if isinstance(answer.value, str) and answer.value in options and options.count(answer.value) == 1:
            return changing[options.index(answer.value)]
    if len(changing) == 1:
        return changing[0]
    fixed_tool = FIXED_CHECKLIST[0]
    if not changing:
        slot = SlotState.tool_held("no catalog tool can produce the intended change")
        questions: tuple[Question, ...] = ()
        verdict: Literal["hold", "ask"] = "hold"
    else:
        detail = f"{len(changing)} actions could do this"
        slot = SlotState.ask_user("fixed:tool", "the action", detail, kind="intent", defined_by="fixed")
        questions = (
            Question("fixed:tool", fixed_tool.question, {"enum": list(options)}, options, kind="choice"),
        )
        verdict = "ask"
    return Record.one_open_slot(
        verdict=verdict,
        server="",
        tool="",
        contract_digest="",
        principal=request.principal,
        checklist_version="fixed@1",
        slot=slot,
        questions=questions,
        gaps=(Gap("user_gap", "fixed:tool", slot.detail or ""),) if slot.gap else (),
        reason=slot.detail or "",
        evaluated_at=evidence.now.isoformat(),
    )
