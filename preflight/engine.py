"""One preflight: materialize slots, resolve them source by source, route the remainder, count a verdict.

The plan (compiled once per contract and checklist version) holds everything that does not depend on the
request; `preflight()` is the cheap per-call part.
"""

from __future__ import annotations

import json
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, cast

from .approvals import approval_state, value_digest
from .canonical import digest
from .checklist import FIXED_CHECKLIST, Checklist, FixedObligation, Rule, rules_stamp
from .confirmations import CONFIRM_PREFIX, CONSENT_KEY, bound_state
from .contract import MeasureSpec, SlotConfig, ToolContract
from .errors import ExpressionError, SchemaUnusable
from .expressions import Expression, evaluate, evaluate_key
from .labels import Label
from .pointers import Span, check_pointer
from .record import Finding, Gap, GapClass, MeasureRequest, Question, Record, SlotState, Unmet
from .request import Answer, Candidate, Evidence, ExecutionRequest, Observation
from .schema import BranchGroup, ObjectNode, Property, Unsupported, compile_object, select_branches
from .validation import PayloadValidator, same_json

__all__ = ["Plan", "compile_plan", "preflight", "select_tool"]

Route = Literal["ask_user", "measure", "hold", "provider_gap", "unsupported"]
DefinedBy = Literal["provider", "policy", "user"]


class _Bounded[K, V]:
    """A small thread-safe LRU: a long-running server sees contract versions come and go."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[K, V] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_validators: _Bounded[str, PayloadValidator] = _Bounded(4096)
_args_digests: _Bounded[tuple[Any, ...], str] = _Bounded(16384)


def _args_digest(args: Mapping[str, Any]) -> str:
    """`digest(args)`, kept for args whose values are hashable (scalars, mostly). A lookup's args are the same
    in each preflight of an execution (two or three on the way to a grant), and their canonical JSON was about
    a fifth of an engine run with 20 lookups (bench/lookups.py). Each value's type is part of the key: 1,
    1.0 and True are equal in Python, not in JSON."""
    try:
        key = tuple((name, type(value), value) for name, value in sorted(args.items()))
        found = _args_digests.get(key)
    except TypeError:  # an unhashable value: a list or a dict
        return digest(args)
    if found is None:
        found = digest(args)
        _args_digests.put(key, found)
    return found


def _validator(schema: Mapping[str, Any]) -> PayloadValidator:
    """A payload validator (Draft 2020-12 unless declared, formats checked), cached by schema digest."""
    key = digest(schema)
    found = _validators.get(key)
    if found is None:
        found = PayloadValidator(schema)
        _validators.put(key, found)
    return found


@dataclass(frozen=True, slots=True)
class PropInfo:
    """What a plan knows of one argument before any request: computed once, read on every preflight."""

    key: str
    config: SlotConfig
    label: str
    labels: tuple[str, ...]
    observed: bool = False  # "observed" is among its sources: it may read other arguments
    confirm: bool = False  # "confirm" is among its labels: the requesting user confirms the value
    approve: bool = False  # `confirm: {"by": "approver"}`: an approver approves the value


@dataclass(frozen=True, slots=True)
class NodePlan:
    """What a plan knows of one object node before any request."""

    entries: tuple[tuple[str, Property, PropInfo], ...]  # in schema order
    # Observed sources may read other arguments, so they are resolved after everything else.
    resolve_order: tuple[tuple[str, Property, PropInfo], ...]
    required: frozenset[str]  # the schema's required names and those a [required:...] label adds
    # No branches, conditionals, dependencies or nested objects: only rules can add obligations, so the
    # branch selection (and what it needs: grounded names, their values, answers) is skipped.
    flat: bool


@dataclass(frozen=True, slots=True)
class Plan:
    contract: ToolContract
    root: ObjectNode | None
    validator: PayloadValidator | None = field(compare=False, repr=False)
    rules: tuple[Checklist, ...]
    checklist_version: str
    fixed: tuple[FixedObligation, ...]
    label_required: frozenset[str]
    label_confirm: frozenset[str]
    label_consents: tuple[Label, ...]  # `[confirm] text` without a target: the user consents to the call
    arguments: frozenset[str]
    props: Mapping[str, PropInfo]
    nodes: Mapping[str, NodePlan]  # by node location
    notices: tuple[str, ...]


_plans: _Bounded[tuple[str, str], Plan] = _Bounded(4096)


def compile_plan(contract: ToolContract, rules: Sequence[Checklist] = ()) -> Plan:
    """Compile once per (contract digest, checklist versions); later calls return the cached plan."""
    stamp = f"fixed@1;{rules_stamp(rules)}"
    key = (contract.digest, stamp)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    schema = contract.input_schema
    root = compile_object(schema) if schema is not None else None
    labels = contract.labels.labels
    props = _prop_infos(contract, root, labels) if root is not None else {}
    label_required = frozenset(lb.target for lb in labels if lb.tag == "required" and lb.target)
    plan = Plan(
        contract=contract,
        root=root,
        validator=_validator(schema) if schema is not None else None,
        rules=tuple(rules),
        checklist_version=f"{stamp};contract={contract.digest[7:19]}",
        fixed=FIXED_CHECKLIST,
        label_required=label_required,
        label_confirm=frozenset(lb.target for lb in labels if lb.tag == "confirm" and lb.target),
        label_consents=tuple(lb for lb in labels if lb.tag == "confirm" and not lb.target),
        arguments=_paths(root) if root is not None else frozenset(),
        props=props,
        nodes=_node_plans(root, props, label_required) if root is not None else {},
        notices=(*contract.extension.notices, *(lb.text for lb in labels if lb.tag == "notice")),
    )
    _plans.put(key, plan)
    return plan


def _node_plan(node: ObjectNode, props: Mapping[str, PropInfo], label_required: frozenset[str]) -> NodePlan:
    entries = tuple((name, prop, props[prop.path]) for name, prop in node.properties.items())
    return NodePlan(
        entries=entries,
        resolve_order=tuple(sorted(entries, key=lambda e: e[2].observed)),
        required=frozenset(node.required)
        | {name for name, prop, _ in entries if prop.path in label_required},
        flat=not (
            node.groups
            or node.conditionals
            or node.dependent_required
            or any(prop.child is not None for _, prop, _ in entries)
        ),
    )


def _node_plans(
    root: ObjectNode, props: Mapping[str, PropInfo], label_required: frozenset[str]
) -> dict[str, NodePlan]:
    out: dict[str, NodePlan] = {}

    def walk(node: ObjectNode) -> None:
        out[node.location] = _node_plan(node, props, label_required)
        for prop in node.properties.values():
            if prop.child is not None:
                walk(prop.child)

    walk(root)
    return out


def _prop_infos(contract: ToolContract, root: ObjectNode, labels: Sequence[Label]) -> dict[str, PropInfo]:
    confirm = {lb.target for lb in labels if lb.tag == "confirm" and lb.target}
    required = {lb.target for lb in labels if lb.tag == "required" and lb.target}
    out: dict[str, PropInfo] = {}

    def walk(node: ObjectNode) -> None:
        for prop in node.properties.values():
            cfg = contract.slot_config(prop.path)
            label = cfg.label or str(
                prop.schema.get("title") or prop.path.replace("_", " ").replace(".", " ")
            )
            tags = (("confirm",) if cfg.confirm or prop.path in confirm else ()) + (
                ("required",) if prop.path in required else ()
            )
            out[prop.path] = PropInfo(
                f"arg:{prop.path}",
                cfg,
                label,
                tags,
                "observed" in cfg.sources,
                "confirm" in tags,
                cfg.approve,
            )
            if prop.child is not None:
                walk(prop.child)

    walk(root)
    return out


def _paths(node: ObjectNode) -> frozenset[str]:
    out: set[str] = set()
    for prop in node.properties.values():
        out.add(prop.path)
        if prop.child is not None:
            out |= _paths(prop.child)
    return frozenset(out)


@dataclass(slots=True)
class _Resolution:
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


class _Run:
    """State of one evaluation. Not shared across threads or calls."""

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
        self.resolved: dict[str, _Resolution] = {}
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

    # ---- sources ---------------------------------------------------------------------------------

    def answer(self, key: str) -> Answer | None:
        return self.evidence.answers.get(key)

    def walk_sources(
        self,
        key: str,
        sources: Sequence[str],
        *,
        path: str | None = None,
        schema: Mapping[str, Any] | None = None,
        config: SlotConfig | None = None,
    ) -> _Resolution:
        cand = self.request.candidates.get(path) if path is not None else None
        res = self._walk_sources(key, sources, cand, schema, config)
        if cand is not None and res.source != "instruction":
            # Nothing the user's conversation proposed is lost from the record: shown beside whatever
            # settled the slot (or beside its question), never counted.
            res.candidate, res.unverified = cand.value, True
            if "instruction" not in sources:
                res.findings.append(
                    Finding(
                        "instruction",
                        "no_result",
                        _pointer_json(cand.pointer),
                        "proposed, but this slot does not take values from the conversation",
                    )
                )
            if res.source == "preset" and not same_json(cand.value, res.value):
                # A remembered value must not quietly override what this conversation proposes.
                res.refused = "the conversation proposes another value than the remembered one"
        return res

    def _walk_sources(
        self,
        key: str,
        sources: Sequence[str],
        cand: Candidate | None,
        schema: Mapping[str, Any] | None,
        config: SlotConfig | None,
    ) -> _Resolution:
        res = _Resolution()
        evidence = self.evidence
        for source in sources:
            if source == "user_answer":
                a = evidence.answers.get(key)
                if a is not None and self.users_own_words(a, sources, cand, schema):
                    # A reviewer's edit back to what the user's own words say adds nothing of its own: the
                    # user's turn stays the source (and no second approver is needed for it).
                    assert cand is not None and cand.pointer is not None
                    return self._found(res, "instruction", cand.value, _pointer_json(cand.pointer))
                if a is not None:
                    return self._found(res, source, a.value, {"answer": a.id, "by": a.answered_by})
            elif source == "instruction":
                if cand is None:
                    res.findings.append(_NO_RESULT[source])
                    continue
                if cand.pointer is None:
                    res.findings.append(Finding(source, "no_result", detail="proposed without a pointer"))
                    res.unverified = True
                    continue
                check = check_pointer(self.request.conversation, cand.pointer, cand.value, schema)
                if check.ok:
                    return self._found(res, source, cand.value, _pointer_json(cand.pointer))
                res.findings.append(
                    Finding(
                        source,
                        "no_result",
                        _pointer_json(cand.pointer),
                        f"the pointer does not hold the value ({check.reason})",
                    )
                )
                res.unverified = True
                continue
            elif source == "preset":
                p = evidence.presets.get(key)
                if p is not None:
                    return self._found(res, source, p.value, {"preset": p.id})
            elif source == "observed":
                spec = (self.contract.extension.measures or {}).get(config.measure or "") if config else None
                if spec is None:
                    res.findings.append(Finding(source, "error", detail="no measure observes this slot"))
                    res.error = True
                    return res
                obs = self.observe(spec, res)
                if res.error or res.measure is not None or res.waits_for:
                    return res  # an error holds; a pending lookup is not "no result"
                if obs is not None:
                    return self._found(res, source, obs.value, _observation_json(obs))
                continue
            elif source == "prior_state":
                prior = evidence.prior.get(key)
                if prior is not None:
                    return self._found(
                        res,
                        source,
                        prior.value,
                        {"record": prior.record_id, "slot": key, "origin": prior.origin},
                    )
            elif source == "principal":
                # The identity the call is made for (a token may be restricted to it), not the agent's word.
                who = self.request.principal
                return self._found(res, source, principal_id(who), {"principal": who})
            elif source == "contract":
                declared = self.contract.extension.state_change
                if declared:
                    return self._found(res, source, declared, {"contract": self.contract.digest})
            if not res.findings or res.findings[-1].source != source:
                res.findings.append(_NO_RESULT[source])
        return res

    def users_own_words(
        self, a: Answer, sources: Sequence[str], cand: Candidate | None, schema: Mapping[str, Any] | None
    ) -> bool:
        """Whether an answer by someone other than the requesting user (a reviewer) gives exactly the value
        the user's own words hold: a candidate whose pointer verifies, on a slot that takes instruction."""
        if a.answered_by == self.request.principal or a.after_user_answer or "instruction" not in sources:
            return False
        if cand is None or cand.pointer is None or not same_json(cand.value, a.value):
            return False
        return check_pointer(self.request.conversation, cand.pointer, cand.value, schema).ok

    @staticmethod
    def _found(res: _Resolution, source: str, value: Any, pointer: Mapping[str, Any] | None) -> _Resolution:
        res.findings.append(Finding(source, "found", pointer))
        res.status = "null" if value is None else "known"
        res.value, res.source, res.pointer = value, source, pointer
        res.unverified = False
        return res

    def observe(self, spec: MeasureSpec, res: _Resolution) -> Observation | None:
        """Look up a measure's observation for the current arguments, or put the lookup on the frontier."""
        missing = tuple(f"arg:{p}" for p in sorted(spec.reads) if p not in self.values)
        if missing:
            res.waits_for = missing
            return None
        args = {
            k: self.values[v[4:]]
            if isinstance(v, str) and v.startswith("arg:")
            else principal_id(self.request.principal)
            if v == "principal"
            else v
            for k, v in spec.args.items()
        }
        request = MeasureRequest(spec.name, spec.lookup, args, _args_digest(args), spec.max_age_s)
        if self.deferred:
            # Measurements are taken at trigger time, never stored ahead for a deferred execution.
            res.measure = request
            return None
        obs = self.evidence.observations.get(request.key)
        if obs is None or request.key in self.evidence.pending:
            res.findings.append(
                Finding(
                    "observed",
                    "no_result",
                    {"measure": spec.name},
                    "lookup running"
                    if obs is None and request.key in self.evidence.pending
                    else "not measured yet",
                )
            )
            res.measure = request
            self.frontier.setdefault(request.key, request)
            return None
        if obs.error is not None:
            res.findings.append(Finding("observed", "error", _observation_json(obs), obs.error))
            res.error = True
            return None
        age = (self.now - obs.observed_at).total_seconds()
        if age < -MAX_CLOCK_SKEW_S:
            # A time ahead of ours would keep the value "fresh" for ever (and a grant on it alive): no answer.
            detail = f"observed {-age:.0f}s in the future"
            res.findings.append(Finding("observed", "error", _observation_json(obs), detail))
            res.error = True
            return None
        if age > spec.max_age_s:
            res.findings.append(
                Finding(
                    "observed",
                    "no_result",
                    _observation_json(obs),
                    f"stale: observed {age:.0f}s ago, max age {spec.max_age_s:.0f}s",
                )
            )
            res.measure = request
            self.frontier.setdefault(request.key, request)
            return None
        stale_at = obs.observed_at + timedelta(seconds=spec.max_age_s)
        if self.fresh_until is None or stale_at < self.fresh_until:
            self.fresh_until = stale_at
        return obs

    # ---- slots -----------------------------------------------------------------------------------

    def add(self, slot: SlotState) -> None:
        self.slots.append(slot)
        if slot.status == "unknown":
            self.unknown.append(slot)
        elif slot.approval is not None and slot.approval != "approved":
            self.confirms.append(slot)
        if slot.gap is not None:
            self.gaps.append(Gap(slot.gap, slot.key, slot.detail or slot.label))

    def fixed_slots(self) -> None:
        read_only = self.contract.read_only
        for ob in self.plan.fixed:
            if read_only and ob.key != "fixed:tool":
                continue  # trusted read-only tools pass without the intent part of the gate
            if ob.key == "fixed:tool":
                chosen = self.chosen_by_approver()
                self.add(
                    SlotState(
                        key=ob.key,
                        kind=ob.kind,
                        defined_by="fixed",
                        label="the action",
                        status="known",
                        value=self.contract.identity,
                        source=self.tool_source,
                        pointer=_pointer_json(self.request.action_name),
                        approval=self.value_approval(ob.key, chosen, approve=False) if chosen else None,
                        findings=(Finding(self.tool_source, "found", {"tool": self.contract.identity}),),
                        detail=self.edit_detail(chosen) if chosen else None,
                    )
                )
            elif ob.key == "fixed:action_name":
                self.intent_slot(ob, self.action_name_resolution(ob))
            elif ob.key == "fixed:timing":
                self.intent_slot(ob, self.timing_resolution(ob))
            elif ob.key == "fixed:intended_change":
                res = self.walk_sources(ob.key, ob.sources)
                if res.status == "unknown":
                    self.add(
                        SlotState(
                            key=ob.key,
                            kind=ob.kind,
                            defined_by="fixed",
                            label="the intended change",
                            status="unknown",
                            route="provider_gap",
                            gap="provider_gap",
                            findings=tuple(res.findings),
                            detail="the tool does not declare the state change it makes",
                        )
                    )
                else:
                    self.add(
                        SlotState(
                            key=ob.key,
                            kind=ob.kind,
                            defined_by="fixed",
                            label="the intended change",
                            status="known",
                            value=res.value,
                            source=res.source,
                            pointer=res.pointer,
                            findings=tuple(res.findings),
                        )
                    )

    def action_name_resolution(self, ob: FixedObligation) -> _Resolution:
        res = _Resolution()
        for source in ob.sources:
            if source == "user_answer" and (a := self.answer(ob.key)) is not None:
                return self._found(res, source, a.value, {"answer": a.id, "by": a.answered_by})
            if source == "instruction" and (span := self.request.action_name) is not None:
                text = _span_text(self.request, span)
                check = check_pointer(self.request.conversation, span, text or "\x00", None)
                if check.ok and text and text.strip():
                    return self._found(res, source, text, _pointer_json(span))
                res.findings.append(
                    Finding(
                        source,
                        "no_result",
                        _pointer_json(span),
                        f"the pointer does not hold the action ({check.reason})",
                    )
                )
                continue
            res.findings.append(_NO_RESULT[source])
        return res

    def timing_resolution(self, ob: FixedObligation) -> _Resolution:
        res = _Resolution()
        timing = self.request.timing
        for source in ob.sources:
            a = self.answer(ob.key) if source == "user_answer" else None
            if a is not None and not self.reviewer_restores_timing(a, ob.sources):
                return self._found(res, source, a.value, {"answer": a.id, "by": a.answered_by})
            if source == "instruction" and timing is not None:
                value = {"mode": timing.mode, "at": timing.at.isoformat() if timing.at else None}
                res.candidate = value
                if timing.pointer is None:
                    res.unverified = True
                    res.findings.append(
                        Finding(source, "no_result", detail="timing proposed without a pointer")
                    )
                    continue
                text = _span_text(self.request, timing.pointer)
                check = check_pointer(self.request.conversation, timing.pointer, text or "\x00", None)
                # Free-form time words ("now", "on Friday at 9") cannot be matched to a value; the pointer
                # must still land on the user's own words, and the reviewer sees them.
                if check.ok and text and text.strip():
                    return self._found(res, source, value, _pointer_json(timing.pointer))
                res.unverified = True
                res.findings.append(
                    Finding(
                        source,
                        "no_result",
                        _pointer_json(timing.pointer),
                        f"the pointer does not hold the timing ({check.reason})",
                    )
                )
                continue
            if source == "preset" and (p := self.evidence.presets.get(ob.key)) is not None:
                return self._found(res, source, p.value, {"preset": p.id})
            res.findings.append(_NO_RESULT[source])
        return res

    def reviewer_restores_timing(self, a: Answer, sources: Sequence[str]) -> bool:
        """A reviewer's timing that is the one the user's words gave: the user's turn stays the source."""
        timing = self.request.timing
        if a.answered_by == self.request.principal or a.after_user_answer or "instruction" not in sources:
            return False
        if timing is None or timing.pointer is None:
            return False
        at = _timing_at(a.value)
        if at is _BAD or at != (timing.at.astimezone(UTC) if timing.at else None):
            return False
        text = _span_text(self.request, timing.pointer)
        check = check_pointer(self.request.conversation, timing.pointer, text or "\x00", None)
        return check.ok and bool(text and text.strip())

    def intent_slot(self, ob: FixedObligation, res: _Resolution) -> None:
        label = _INTENT_LABELS[ob.key]
        if ob.key == "fixed:timing" and res.status == "known":
            at = _timing_at(res.value)
            if at is _BAD:
                res.status = "unknown"
                res.findings.append(
                    Finding(res.source or "user_answer", "no_result", detail=f"not a timing: {res.value!r}")
                )
            elif isinstance(at, datetime):
                self.timing_at = at
                if at > self.now + timedelta(seconds=1):
                    self.deferred = True
        if res.status == "unknown":
            self.add(
                SlotState(
                    key=ob.key,
                    kind=ob.kind,
                    defined_by="fixed",
                    label=label,
                    status="unknown",
                    route="ask_user",
                    gap="user_gap",
                    findings=tuple(res.findings),
                    candidate=res.candidate,
                    unverified=res.unverified,
                    detail=f"{label}: not grounded in the user's words",
                )
            )
            proposed = (res.candidate,) if res.unverified else ()
            self.questions.append(Question(ob.key, ob.question, _INTENT_SCHEMAS[ob.key], proposed=proposed))
        else:
            self.add(
                SlotState(
                    key=ob.key,
                    kind=ob.kind,
                    defined_by="fixed",
                    label=label,
                    status=res.status,
                    value=res.value,
                    source=res.source,
                    pointer=res.pointer,
                    approval=self.value_approval(ob.key, res, approve=False),
                    findings=tuple(res.findings),
                    detail=self.edit_detail(res),
                )
            )

    def provider_slots(self) -> None:
        c = self.contract
        for problem in c.labels.problems:
            self.add(
                SlotState(
                    key=f"label:{problem.line}",
                    kind="condition",
                    defined_by="provider",
                    label=problem.text,
                    status="unknown",
                    route="provider_gap",
                    gap="provider_gap",
                    detail=f"malformed label on line {problem.line}: {problem.reason}",
                )
            )
        for i, sentence in enumerate(c.prose_conditions):
            self.add(
                SlotState(
                    key=f"cond:prose-{i + 1}",
                    kind="condition",
                    defined_by="provider",
                    label=sentence,
                    status="unknown",
                    route="provider_gap",
                    gap="provider_gap",
                    detail=f"a condition stated only in prose, not declared: {sentence!r}",
                )
            )
        if self.plan.root is None:
            self.add(
                SlotState(
                    key="schema:#",
                    kind="condition",
                    defined_by="provider",
                    label="the tool's arguments",
                    status="unknown",
                    route="provider_gap",
                    gap="provider_gap",
                    detail="the tool declares no inputSchema (that is not a tool without arguments)",
                )
            )
            return
        self.walk_node(self.plan.root, present=True)

    def node_plan(self, node: ObjectNode) -> NodePlan:
        found = self.plan.nodes.get(node.location)
        if found is None:  # not a node the plan walk saw: work it out for this call
            props = {p.path: self.info(p) for p in node.properties.values()}
            found = _node_plan(node, props, self.plan.label_required)
        return found

    def walk_node(self, node: ObjectNode, present: bool) -> None:
        np = self.node_plan(node)
        for item in node.unsupported:
            if item.value_only:
                self.value_only.append((item, tuple(node.path.split(".")) if node.path else ()))
                continue
            self.add(
                SlotState(
                    key=f"schema:{item.location}",
                    kind="condition",
                    defined_by="provider",
                    label=item.construct,
                    status="unknown",
                    route="unsupported",
                    gap="implementation_gap",
                    detail=f"{item.construct} at {item.location}: {item.detail}",
                )
            )
        resolutions: dict[str, _Resolution] = {}
        candidates = self.request.candidates
        answers, presets, prior = self.evidence.answers, self.evidence.presets, self.evidence.prior
        for name, prop, info in np.resolve_order:
            key = info.key
            if prop.path in candidates or key in answers or key in presets or key in prior:
                resolutions[name] = self.resolve_prop(prop, info)
        required = np.required
        if self.rule_required:
            required = required | {n for n, p, _ in np.entries if p.path in self.rule_required}
        if np.flat:
            # Nothing but the required names and the resolved ones makes a slot here.
            for name, prop, info in np.entries:
                res = resolutions.get(name)
                if res is None:
                    if name not in required:
                        continue
                    res = self.resolve_prop(prop, info)
                self.arg_slot(prop, res, name in required, info)
            self.undeclared(node)
            return
        grounded = {n for n, r in resolutions.items() if r.status == "known"}
        # A nested object counts as grounded once any member of it is: that is what makes it present.
        grounded |= {
            n for n, p in node.properties.items() if p.child is not None and self.member_grounded(p.child)
        }
        values = {n: resolutions[n].value for n in grounded if n in resolutions}
        branch_answers = self.branch_answers(node)
        base_required = required
        expected = base_required | {
            n for n in node.properties if node.properties[n].path in self.request.candidates
        }
        selection = select_branches(node, grounded, values, branch_answers, expected)
        required = base_required | selection.required
        for group in selection.open_groups:
            self.branch_slot(node, group)
        for group, complete in selection.conflicts:
            labels = " and ".join(group.branches[i].label for i in complete)
            self.add(
                SlotState(
                    key=f"branch:{group.location}",
                    kind="condition",
                    defined_by="provider",
                    label="which alternative applies",
                    status="unknown",
                    route="hold",
                    detail=f"conflict: more than one exclusive alternative is complete ({labels})",
                )
            )
        for name in node.order:
            prop = node.properties[name]
            if prop.child is not None:
                paths = self.evidence_paths()
                members = any(p.startswith(prop.path + ".") for p in paths)
                child = prop.child
                settles_itself = not (child.required or child.groups or child.conditionals)
                if prop.path in paths or (name in required and not members and settles_itself):
                    # Settled as one value: a whole object from a trusted answer, or an obligatory object
                    # whose members are all optional (someone still has to say what goes in it).
                    res = resolutions.get(name) or self.resolve_prop(prop)
                    if members and res.status == "known" and res.refused is None:
                        clash = self.member_clash(prop.path, res.value, paths)
                        if clash is not None:
                            # Both are the user's: keeping the whole would silently drop the member.
                            res.refused = clash
                            self.values.pop(prop.path, None)
                    self.arg_slot(prop, res, name in required)
                elif name in required or members:
                    self.objects.append(prop.path)
                    self.walk_node(child, present=True)
                continue
            if name not in required and name not in resolutions:
                continue
            if name in selection.waiting and name not in resolutions:
                pass  # a discriminator still open: its own slot below asks for it
            res = resolutions.get(name) or self.resolve_prop(prop)
            self.arg_slot(prop, res, name in required)
        self.undeclared(node)

    def evidence_paths(self) -> set[str]:
        paths = set(self.request.candidates)
        for mapping in (self.evidence.answers, self.evidence.presets, self.evidence.prior):
            paths |= {k[4:] for k in mapping if k.startswith("arg:")}
        return paths

    def has_evidence(self, prop: Property) -> bool:
        key = f"arg:{prop.path}"
        return (
            prop.path in self.request.candidates
            or key in self.evidence.answers
            or key in self.evidence.presets
            or key in self.evidence.prior
        )

    def info(self, prop: Property) -> PropInfo:
        found = self.plan.props.get(prop.path)
        if found is None:  # a property reached only through a branch the plan walk did not see
            cfg = self.contract.slot_config(prop.path)
            found = PropInfo(
                f"arg:{prop.path}",
                cfg,
                cfg.label or prop.path.replace("_", " "),
                (),
                "observed" in cfg.sources,
            )
        return found

    def resolve_prop(self, prop: Property, info: PropInfo | None = None) -> _Resolution:
        done = self.resolved.get(prop.path)
        if done is not None:
            return done
        cfg = (info or self.info(prop)).config
        res = self.walk_sources(
            f"arg:{prop.path}", cfg.sources, path=prop.path, schema=prop.schema, config=cfg
        )
        if res.status == "known" and res.refused is None and self.plan.validator is not None:
            # Checked before anything reads it: a value the tool refuses settles nothing, so no condition
            # or lookup is judged on it.
            try:
                problems = self.plan.validator.value_errors(prop.schema, res.value, kept=True)
            except SchemaUnusable as exc:
                # Nobody can tell whether the tool takes this value: it settles nothing, and holds.
                res.findings.append(Finding(res.source or "schema", "error", detail=exc.reason))
                res.status, res.error, res.reason = "unknown", True, exc.reason
                problems = []
            if problems:
                res.refused = "; ".join(problems[:3])
        if res.status != "unknown" and res.refused is None:
            self.values[prop.path] = res.value
        if not res.waits_for:
            # a lookup waiting for other arguments is looked at again once they are settled
            self.resolved[prop.path] = res
        return res

    def member_clash(self, path: str, whole: Any, paths: set[str]) -> str | None:
        """Why a whole object's value disagrees with what was stated for one of its members, or None."""
        for member in sorted(p for p in paths if p.startswith(path + ".")):
            cfg = self.contract.slot_config(member)
            # Only the user's own sources: a lookup is not started to second-guess an answer.
            sources = [s for s in cfg.sources if s in ("user_answer", "instruction", "preset", "prior_state")]
            schema = _member_schema(self.plan.root, member)
            cand = self.request.candidates.get(member)
            res = self._walk_sources(f"arg:{member}", sources, cand, schema, cfg)
            if res.status == "unknown":
                continue
            here: Any = whole
            for part in member[len(path) + 1 :].split("."):
                here = here.get(part, _ABSENT) if isinstance(here, dict) else _ABSENT
            if here is _ABSENT or not same_json(here, res.value):
                rest = member[len(path) + 1 :]
                return f"{rest} is also given, as {res.value!r}, and this value does not hold it"
        return None

    def member_grounded(self, node: ObjectNode) -> bool:
        for prop in node.properties.values():
            if prop.child is not None:
                if self.member_grounded(prop.child):
                    return True
            elif self.has_evidence(prop) and self.resolve_prop(prop).status == "known":
                return True
        return False

    def branch_answers(self, node: ObjectNode) -> dict[str, int]:
        out = {}
        for group in node.groups:
            a = self.answer(f"branch:{group.location}")
            if a is None:
                continue
            labels = [b.label for b in group.branches]
            if isinstance(a.value, int) and not isinstance(a.value, bool):
                out[group.location] = a.value
            elif isinstance(a.value, str) and a.value in labels:
                out[group.location] = labels.index(a.value)
        return out

    def branch_slot(self, node: ObjectNode, group: BranchGroup) -> None:
        key = f"branch:{group.location}"
        options = tuple(b.label for b in group.branches)
        text = "Which of these will you provide: " + ", or ".join(options) + "?"
        self.add(
            SlotState(
                key=key,
                kind="value",
                defined_by="provider",
                label="which alternative applies",
                status="unknown",
                route="ask_user",
                gap="user_gap",
                detail=f"no grounded value selects one {group.kind} alternative",
            )
        )
        self.questions.append(
            Question(key, self.sanitize(text), {"enum": list(options)}, options, kind="choice")
        )

    def arg_slot(
        self, prop: Property, res: _Resolution, required: bool, info: PropInfo | None = None
    ) -> None:
        info = info or self.info(prop)
        cfg, key, label, labels = info.config, info.key, info.label, info.labels
        self.arg_props[prop.path] = (prop, required)
        if res.refused is not None and res.status != "unknown":
            other = res.unverified and not same_json(res.candidate, res.value)
            proposed = (res.candidate,) if other else ()
            self.refuse(prop.path, res.value, res.refused, findings=tuple(res.findings), proposed=proposed)
            return
        if res.status != "unknown":
            slot = SlotState(
                key=key,
                kind="value",
                defined_by="provider",
                label=label,
                status=res.status,
                value=res.value,
                source=res.source,
                pointer=res.pointer,
                labels=labels,
                approval=self.value_approval(key, res, approve=info.approve),
                findings=tuple(res.findings),
                detail=self.edit_detail(res),
                candidate=res.candidate,
                unverified=res.unverified,
            )
            self.arg_slots[prop.path] = slot
            self.add(slot)
            if info.confirm and res.status == "known":
                self.confirmation_slot(key, label, res.value)
            return
        route: Route
        gap: GapClass | None = None
        detail = None
        if res.error:
            route, detail = "hold", res.reason or "a lookup failed; the slot cannot be settled from it"
        elif res.measure is not None or res.waits_for:
            route = "measure"
        elif "user_answer" in cfg.sources:
            route, gap = "ask_user", "user_gap"
            detail = "proposed without a verified source" if res.unverified else "the user did not say"
        else:
            route, gap, detail = "hold", "source_gap", "every permitted source was checked; none had a value"
        slot = SlotState(
            key=key,
            kind="value",
            defined_by="provider",
            label=label,
            status="unknown",
            route=route,
            gap=gap,
            labels=labels,
            findings=tuple(res.findings),
            candidate=res.candidate,
            unverified=res.unverified,
            detail=detail,
            waits_for=res.waits_for,
        )
        self.arg_slots[prop.path] = slot
        self.add(slot)
        if route == "ask_user":
            self.questions.append(
                Question(
                    key,
                    self.question_text(cfg, label, required),
                    self.question_schema(prop.schema, required),
                    proposed=(res.candidate,) if res.unverified else (),
                )
            )

    def question_text(self, cfg: SlotConfig, label: str, required: bool) -> str:
        text = cfg.question or f"What should the {label} be?"
        if not required:
            text = cfg.question or f"Should {label} be included, and if so, what is it?"
        return self.sanitize(text)

    def question_schema(self, schema: Mapping[str, Any], required: bool) -> dict[str, Any]:
        """What an answer must satisfy: the argument's own schema (with the definitions its `$ref`s name),
        or null as well for an optional argument (null leaves it out)."""
        return question_schema(self.contract.input_schema, schema, required)

    def refuse(
        self,
        path: str,
        value: Any,
        reason: str,
        *,
        findings: tuple[Finding, ...] = (),
        without: bool = False,
        proposed: tuple[Any, ...] = (),
    ) -> None:
        """A value the tool's schema refuses (or has no setting for): it settles nothing. A user-answerable
        slot is asked again with the reason, anything else holds: nobody may settle it now."""
        prop, required = self.arg_props.get(path, (None, False))
        info = self.info(prop) if prop is not None else None
        cfg = info.config if info is not None else self.contract.slot_config(path)
        label = info.label if info is not None else path.replace("_", " ").replace(".", " ")
        key = f"arg:{path}"
        user = "user_answer" in cfg.sources
        old = self.arg_slots.get(path)
        slot = SlotState(
            key=key,
            kind="value",
            defined_by=old.defined_by if old is not None else "provider",
            label=label,
            status="unknown",
            route="ask_user" if user else "hold",
            gap="user_gap" if user else "source_gap",
            labels=info.labels if info is not None else (),
            findings=findings or (old.findings if old is not None else ()),
            candidate=value,
            detail=f"the tool refuses this value: {reason}",
            refused=reason,
        )
        if old is not None:
            # Refused after the payload was assembled: the settled slot it was is replaced in place.
            self.slots[self.slots.index(old)] = slot
            if old in self.confirms:
                self.confirms.remove(old)
            self.drop_confirmation(key)
            self.unknown.append(slot)
            self.gaps.append(Gap("user_gap" if user else "source_gap", key, slot.detail or label))
        else:
            self.add(slot)
        self.arg_slots[path] = slot
        self.values.pop(path, None)
        if not user:
            return
        if without:
            name = path.rsplit(".", 1)[-1]
            text = f"This action has no setting for {name!r}; go ahead without it?"
            question = Question(key, text, {"type": "null"}, kind="without", reason=reason)
        else:
            schema = self.question_schema(prop.schema, required) if prop is not None else {}
            text = self.question_text(cfg, label, required)
            question = Question(key, text, schema, reason=reason, proposed=proposed)
        self.questions.append(question)

    def drop_confirmation(self, key: str) -> None:
        """The user's yes/no to a value the tool now refuses: it asks about (or binds) nothing any more, since
        that value will not be sent; the restated value gets its own confirmation."""
        ckey = CONFIRM_PREFIX + key
        self.slots[:] = [s for s in self.slots if s.key != ckey]
        self.unknown[:] = [s for s in self.unknown if s.key != ckey]
        self.gaps[:] = [g for g in self.gaps if g.slot != ckey]
        self.unmet[:] = [u for u in self.unmet if u.id != ckey]
        self.questions[:] = [q for q in self.questions if q.slot != ckey]

    def undeclared(self, node: ObjectNode) -> None:
        """Values for arguments this object does not declare. What the user stated is never silently left
        out: each becomes a slot like any other, and the whole-payload validation decides."""
        if self.extra_paths is None:
            # Computed once per run: most requests name declared arguments only, and then this is all.
            declared = self.plan.arguments
            extra = {p for p in self.request.candidates if p not in declared}
            for mapping in (self.evidence.answers, self.evidence.presets, self.evidence.prior):
                extra.update(k[4:] for k in mapping if k[:4] == "arg:" and k[4:] not in declared)
            self.extra_paths = sorted(extra)
        prefix = f"{node.path}." if node.path else ""
        skeletons: dict[str, list[str]] | None = None  # built at the first undeclared name in this object
        for path in self.extra_paths:
            if not path.startswith(prefix) or path in self.arg_slots:
                continue
            rest = path[len(prefix) :]
            head = rest.split(".", 1)[0]
            prop = node.properties.get(head)
            if prop is not None and "." not in rest:
                continue  # declared: its own slot, if the schema makes one
            if prop is not None and prop.child is not None and prop.path not in self.arg_slots:
                continue  # a member of a declared object: that object's walk has it
            key = f"arg:{path}"
            # "amount.x" beside a scalar amount, or "a.b" for an undeclared "a": a name with a dot cannot be
            # told from a nested argument, and no payload holds both readings.
            clash = "." in rest or rest == ""
            if skeletons is None:
                skeletons = _skeletons(node, self.extra_paths, prefix)
            look_alike = None if clash else _look_alike(rest, skeletons)
            cfg = self.contract.slot_config(path)
            label = path.replace("_", " ").replace(".", " ")
            if clash or look_alike:
                slot = SlotState(
                    key=key,
                    kind="value",
                    defined_by="user",
                    label=label,
                    status="unknown",
                    route="hold",
                    detail=look_alike
                    or "no place in the arguments: a dotted name, or inside a value that is no object",
                )
                # Not an argument slot: it has no place in the payload, and nothing that reads the argument
                # it seems to sit in waits for it.
                self.add(slot)
                continue
            res = self.walk_sources(key, cfg.sources, path=path, schema={}, config=cfg)
            self.undeclared_at[path] = node.path
            if res.status != "unknown":
                slot = SlotState(
                    key=key,
                    kind="value",
                    defined_by="user",
                    label=label,
                    status=res.status,
                    value=res.value,
                    source=res.source,
                    pointer=res.pointer,
                    findings=tuple(res.findings),
                    candidate=res.candidate,
                    unverified=res.unverified,
                    detail="not an argument the tool declares",
                )
                self.values[path] = res.value
                self.arg_slots[path] = slot
                self.add(slot)
                continue
            slot = SlotState(
                key=key,
                kind="value",
                defined_by="user",
                label=label,
                status="unknown",
                route="ask_user",
                gap="user_gap",
                findings=tuple(res.findings),
                candidate=res.candidate,
                unverified=res.unverified,
                detail="proposed without a verified source; not an argument the tool declares",
            )
            self.arg_slots[path] = slot
            self.add(slot)
            self.questions.append(
                Question(
                    key,
                    f"Should {label} be included, and if so, what is it?",
                    {},
                    proposed=(res.candidate,) if res.unverified else (),
                )
            )

    def sanitize(self, text: str) -> str:
        # A question never names a tool: the user chooses outcomes, not implementations.
        for name in (self.contract.name, self.contract.identity):
            if name and name in text:
                text = text.replace(name, "this action")
        return text

    # ---- conditions and approvals ---------------------------------------------------------------

    def args_activation(self, expr: Expression) -> dict[str, Any]:
        # Only the arguments an expression reads: converting the rest into CEL values is wasted work.
        names = (
            None if "arg:*" in expr.reads else {r[4:].split(".")[0] for r in expr.reads if r[:4] == "arg:"}
        )
        out: dict[str, Any] = {}
        for path, value in self.values.items():
            if names is not None and path.split(".")[0] not in names:
                continue
            if value is None and path in self.arg_slots and self.arg_slots[path].status == "null":
                continue
            _set_path(out, path, value)
        return out

    def reads_ready(self, expr: Expression, res: _Resolution) -> dict[str, Any] | None:
        """The measure values an expression reads, or None while something it reads is unsettled."""
        waits: list[str] = []
        routes: list[str] = []
        measures: dict[str, Any] = {}
        for read in sorted(expr.reads):
            kind, _, target = read.partition(":")
            if kind == "arg":
                if not self.unknown:
                    continue  # every slot so far is settled, the arguments included
                pending = [
                    s
                    for p, s in self.arg_slots.items()
                    if s.status == "unknown" and (target == "*" or p == target or p.startswith(target + "."))
                ]
                for s in pending:
                    waits.append(s.key)
                    routes.append(s.route or "hold")
            elif kind == "measure":
                spec = (self.contract.extension.measures or {})[target]
                res.waits_for = ()
                obs = self.observe(spec, res)
                if res.error:
                    return None
                if obs is None and res.waits_for:
                    # the lookup itself waits for arguments: take their routes
                    for key in res.waits_for:
                        waits.append(key)
                        slot = self.arg_slots.get(key[4:])
                        routes.append(slot.route or "hold" if slot is not None else "hold")
                elif obs is None:
                    waits.append(read)
                    routes.append("measure")
                else:
                    measures[target] = obs.value
        if waits:
            res.waits_for = tuple(waits)
            res.findings.append(Finding("condition", "no_result", detail="waits for " + ", ".join(waits)))
            # the route of what it waits for; a hold anywhere dominates
            for r in ("hold", "ask_user", "measure"):
                if r in routes:
                    res.source = r
                    break
            return None
        return measures

    def judge(self, expr: Expression) -> tuple[_Resolution, bool | None]:
        """Evaluate an expression once everything it reads is settled: (its trace, its value or None)."""
        res = _Resolution()
        measures = self.reads_ready(expr, res)
        if measures is None:
            return res, None
        try:
            value = evaluate(
                expr,
                args=self.args_activation(expr),
                measures=measures,
                principal=self.request.principal,
                env={"environment": self.request.environment},
            )
        except ExpressionError as exc:
            # fail closed: an expression with no answer is never read as false
            res.error = True
            res.reason = exc.reason
            res.findings.append(Finding("condition", "error", detail=exc.reason))
            return res, None
        res.findings.append(
            Finding("condition", "found", {"measures": sorted(measures)} if measures else None)
        )
        return res, value

    def unsettled(self, key: str, owner: DefinedBy, text: str, res: _Resolution, **more: Any) -> SlotState:
        """An expression with no value yet: held on an error, else routed like what it waits for."""
        route: Route = "hold"
        detail = None
        waits_for: tuple[str, ...] = ()
        if res.error:
            detail = f"could not be evaluated: {res.reason}" if res.reason else "a lookup it reads failed"
        else:
            route, waits_for = cast(Route, res.source or "hold"), res.waits_for
        return SlotState(
            key=key,
            kind="condition",
            defined_by=owner,
            label=text,
            status="unknown",
            route=route,
            findings=tuple(res.findings),
            detail=detail,
            waits_for=waits_for,
            **more,
        )

    def condition_slot(
        self,
        key: str,
        owner: DefinedBy,
        expr: Expression,
        on_false: Literal["hold", "block"],
        text: str,
        cond_id: str,
    ) -> None:
        res, met = self.judge(expr)
        if met is None:
            self.add(self.unsettled(key, owner, text, res))
            return
        self.add(
            SlotState(
                key=key,
                kind="condition",
                defined_by=owner,
                label=text,
                status="known",
                value=met,
                source="condition",
                findings=tuple(res.findings),
                met=met,
                detail=None if met else f"unmet: {on_false}",
            )
        )
        if not met:
            self.unmet.append(Unmet(cond_id, on_false, text))

    def conditions(self) -> None:
        for cond in self.contract.extension.conditions:
            self.condition_slot(f"cond:{cond.id}", "provider", cond.check, cond.on_false, cond.text, cond.id)
        for _, rule in self.rules:
            if rule.kind == "condition" and rule.check is not None:
                self.condition_slot(
                    f"user:{rule.id}", _rule_owner(rule), rule.check, rule.on_false, rule.text, rule.id
                )

    def approvals(self, payload_digest: str | None) -> None:
        wanted: list[tuple[str, str, Expression | None, DefinedBy]] = []
        for spec in self.contract.extension.extra_approval:
            wanted.append((spec.id, spec.text, spec.when, "provider"))
        for _, rule in self.rules:
            if rule.kind == "approval":
                wanted.append((rule.id, rule.text, rule.when, _rule_owner(rule)))
        for aid, text, when, owner in wanted:
            key = f"approval:{aid}"
            if when is not None:
                res, needed = self.judge(when)
                if needed is None:
                    self.add(self.unsettled(key, owner, text, res, approval="required"))
                    continue
                if not needed:
                    self.add(
                        SlotState(
                            key=key,
                            kind="condition",
                            defined_by=owner,
                            label=text,
                            status="null",
                            detail="not needed for these values",
                        )
                    )
                    continue
            if payload_digest is None:
                self.add(
                    SlotState(
                        key=key,
                        kind="condition",
                        defined_by=owner,
                        label=text,
                        status="unknown",
                        route="hold",
                        approval="required",
                        detail="needs a person's approval once every value is settled",
                    )
                )
                continue
            state = approval_state(self.evidence.approvals, key, payload_digest)
            if state == "approved":
                self.add(
                    SlotState(
                        key=key,
                        kind="condition",
                        defined_by=owner,
                        label=text,
                        status="known",
                        value=payload_digest,
                        source="approval",
                        approval="approved",
                    )
                )
            else:
                self.add(
                    SlotState(
                        key=key,
                        kind="condition",
                        defined_by=owner,
                        label=text,
                        status="unknown",
                        route="hold",
                        approval="void" if state == "void" else "required",
                        detail="needs a person's approval of these exact values",
                    )
                )

    # ---- the user's confirmations and consent, and four eyes ---------------------------------------

    def editor(self, res: _Resolution) -> str | None:
        """Who set this value by an answer, if not the requesting user: an approver's edit in the console."""
        if res.source != "user_answer" or res.pointer is None:
            return None
        by = res.pointer.get("by")
        return by if isinstance(by, str) and by != self.request.principal else None

    def chosen_by_approver(self) -> _Resolution | None:
        """The action, when an approver chose it among the candidate tools (four eyes, as for a value)."""
        a = self.evidence.answers.get("fixed:tool")
        if self.tool_source != "user_answer" or a is None or a.answered_by == self.request.principal:
            return None
        res = _Resolution(status="known", value=self.contract.identity, source="user_answer")
        res.pointer = {"answer": a.id, "by": a.answered_by}
        return res

    def edit_detail(self, res: _Resolution) -> str | None:
        editor = self.editor(res)
        if editor is None:
            return None
        return f"edited by {editor}: another approver must approve this value"

    def value_approval(
        self, key: str, res: _Resolution, *, approve: bool
    ) -> Literal["approved", "void", "required"] | None:
        """An approver's approval a settled value needs: by contract (`confirm: {"by": "approver"}`), or
        because an approver edited it (four eyes: then the editor's own approval does not count)."""
        editor = self.editor(res)
        # An approver's edit to null (leaving an argument out) is an edit like any other.
        if res.status == "unknown" or not ((approve and res.status == "known") or editor is not None):
            return None
        state = approval_state(self.evidence.approvals, key, res.value, excluding=editor)
        return "approved" if state == "approved" else "void" if state == "void" else "required"

    def user_yes(self, key: str, bound_digest: str) -> tuple[str, Answer | None]:
        """The state of the requesting user's yes/no for `key` bound to `bound_digest`. An answer recorded
        as anyone else's (a reviewer's) is not the user's, so it counts as no answer at all."""
        a = self.evidence.answers.get(key)
        if a is None or a.answered_by != self.request.principal:
            return "none", None
        return bound_state(a.value, bound_digest), a

    def bound_slot(self, key: str, label: str, bound_digest: str, question: Question, declined: str) -> None:
        state, a = self.user_yes(key, bound_digest)
        pointer = {"answer": a.id, "by": a.answered_by, "digest": bound_digest} if a is not None else None
        if state == "yes":
            self.add(
                SlotState(
                    key=key,
                    kind="intent",
                    defined_by="provider",
                    label=label,
                    status="known",
                    value=bound_digest,
                    source="user_answer",
                    pointer=pointer,
                    findings=(Finding("user_answer", "found", pointer),),
                )
            )
            return
        if state == "no":
            # The user's no to exactly this: recorded, and the call does not run while it stands.
            self.add(
                SlotState(
                    key=key,
                    kind="intent",
                    defined_by="provider",
                    label=label,
                    status="known",
                    value=False,
                    source="user_answer",
                    pointer=pointer,
                    findings=(Finding("user_answer", "found", pointer, "the user said no"),),
                    met=False,
                    detail=declined,
                )
            )
            self.unmet.append(Unmet(key, "block", declined))
            return
        finding = (
            Finding("user_answer", "no_result", pointer, "the answer was for another value; asked again")
            if state == "void"
            else _NO_RESULT["user_answer"]
        )
        self.add(
            SlotState(
                key=key,
                kind="intent",
                defined_by="provider",
                label=label,
                status="unknown",
                route="ask_user",
                gap="user_gap",
                findings=(finding,),
                detail="awaits the user's yes or no",
            )
        )
        self.questions.append(question)

    def confirmation_slot(self, slot_key: str, label: str, value: Any) -> None:
        """`[confirm:arg]` / `confirm: true`: the requesting user's yes to this exact value."""
        bound = value_digest(value)
        key = CONFIRM_PREFIX + slot_key
        shown = _words(value)
        # Only our words are sanitized (no tool names); the value is shown exactly as it would be sent.
        question = Question(
            key,
            self.sanitize(f"Please confirm the {label}: ") + shown + ". Is that right?",
            {"type": "boolean"},
            kind="confirmation",
            shows={"slot": slot_key, "value": value, "digest": bound},
        )
        declined = f"the user said {label} {shown} is not right; answer {slot_key} to change it"
        self.bound_slot(key, f"the user confirms the {label}", bound, question, declined)

    def consent(self, payload: Mapping[str, Any] | None, payload_digest: str | None) -> None:
        """`x-preflight.consent` or a `[confirm] text` label: the requesting user's yes to the whole call,
        asked once the payload is final and shown to them in words."""
        spec = self.contract.extension.consent
        texts = [lb.text for lb in self.plan.label_consents]
        if spec is not None:
            if spec.when is not None:
                res, needed = self.judge(spec.when)
                if needed is None:
                    self.add(self.unsettled(CONSENT_KEY, "provider", spec.text, res))
                    return
                if needed:
                    texts.insert(0, spec.text)
            else:
                texts.insert(0, spec.text)
        if not texts:
            return
        label = "the user consents to the call"
        if payload is None or payload_digest is None:
            self.add(
                SlotState(
                    key=CONSENT_KEY,
                    kind="intent",
                    defined_by="provider",
                    label=label,
                    status="unknown",
                    route="hold",
                    detail="the user is asked to consent once the payload is complete and valid",
                )
            )
            return
        words = self.payload_words(payload)
        question = Question(
            CONSENT_KEY,
            self.sanitize(" ".join(texts)) + " " + words + " Shall this be done?",
            {"type": "boolean"},
            kind="consent",
            shows={"payload": dict(payload), "digest": payload_digest, "words": words},
        )
        self.bound_slot(CONSENT_KEY, label, payload_digest, question, "the user declined the call as shown")

    def effect_key(self, payload: Mapping[str, Any] | None) -> None:
        """The lock the gate will take for this payload (`x-preflight.effect_key`), shown in the record; a key
        with no value for it holds here rather than granting a call the gate would refuse."""
        expr = self.contract.extension.effect_key
        if expr is None or payload is None:
            return
        key, text = "cond:effect_key", "what this call changes, one run at a time"
        try:
            value = evaluate_key(expr, args=payload, principal=self.request.principal)
        except ExpressionError as exc:
            detail = f"the effect key has no value for these arguments: {exc.reason}"
            finding = Finding("condition", "error", detail=exc.reason)
            self.add(
                SlotState(
                    key=key,
                    kind="condition",
                    defined_by="provider",
                    label=text,
                    status="unknown",
                    route="hold",
                    findings=(finding,),
                    detail=detail,
                )
            )
            return
        self.add(
            SlotState(
                key=key,
                kind="condition",
                defined_by="provider",
                label=text,
                status="known",
                value=f"{self.contract.server}/{value}",
                source="condition",
                findings=(Finding("condition", "found"),),
            )
        )

    def payload_words(self, payload: Mapping[str, Any]) -> str:
        """The call in words: what it changes, then every argument by its label. Never the tool's name."""
        parts = []
        for path, value in _flatten(payload):
            info = self.plan.props.get(path)
            label = info.label if info is not None else path.replace("_", " ").replace(".", " ")
            parts.append(f"{self.sanitize(label)}: {_words(value)}")
        change = self.contract.extension.state_change
        head = self.sanitize(f"This will do the following ({change}).") if change else "This will be done."
        return f"{head} " + "; ".join(parts) + "." if parts else head

    # ---- payload and verdict ---------------------------------------------------------------------

    def assemble(self, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        payload: dict[str, Any] = {}
        for path in self.objects:
            _set_path(payload, path, {}, keep=True)
        for path, slot in self.arg_slots.items():
            if path in skip:
                continue
            if slot.status == "known" or (slot.status == "null" and self.required_path(path)):
                _set_path(payload, path, slot.value)
        return payload

    def payload(self) -> tuple[dict[str, Any] | None, bool | None, tuple[str, ...]]:
        if self.plan.root is None:
            return None, None, ()
        payload = self.assemble()
        complete = not any(s.key.startswith(("arg:", "branch:", "schema:")) for s in self.unknown)
        if not complete:
            return payload, None, ()
        validator = self.plan.validator
        if validator is None:
            return payload, None, ()
        try:
            if validator.is_valid(payload):
                return payload, True, ()
            refusals, unblamed = self.blame(validator, payload)
        except SchemaUnusable as exc:
            return payload, False, (exc.reason,)
        for path, (reason, without) in refusals.items():
            self.refuse(path, self.arg_slots[path].value, reason, without=without)
        errors = tuple((*(f"arg:{p}: {r}" for p, (r, _) in refusals.items()), *unblamed)[:20])
        if unblamed:
            return self.assemble(frozenset(refusals)), False, errors
        # Every error is a value the user can restate (or leave out): asked again, not held.
        return self.assemble(frozenset(refusals)), None, errors

    def blame(
        self, validator: PayloadValidator, payload: dict[str, Any]
    ) -> tuple[dict[str, tuple[str, bool]], list[str]]:
        """Which settled values the tool refuses: ({argument path: (reason, has no setting)}, errors that
        are no one value's). An error inside a value is that value's; an error on an object (no
        additional properties, property names, max properties...) is the undeclared arguments' in it when
        leaving them out clears it."""
        settled = {p for p, s in self.arg_slots.items() if s.status != "unknown"}
        refusals: dict[str, tuple[str, bool]] = {}
        unblamed: list[str] = []
        located = validator.located_errors(payload)
        for where, message in located:
            parts = [str(x) for x in where]
            owner = next(
                (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in settled),
                None,
            )
            if owner is not None:
                refusals.setdefault(owner, (message, False))
                continue
            at = ".".join(parts)
            extra = frozenset(p for p, node in self.undeclared_at.items() if node == at and p in settled)
            if extra and not _errors_at(validator, self.assemble(extra), where):
                alone = [p for p in sorted(extra) if _errors_at(validator, self.assemble(extra - {p}), where)]
                for p in alone or sorted(extra):
                    name = p.rsplit(".", 1)[-1]
                    refusals.setdefault(p, (f"this action has no setting for {name!r} ({message})", True))
                continue
            unblamed.append(f"{'/'.join(parts) or '(arguments)'}: {message}")
        return refusals, unblamed

    def value_only_slots(self, payload: Mapping[str, Any] | None, valid: bool | None) -> None:
        """The validator is the authority on constructs that only limit acceptable payloads: a grounded
        payload it accepts satisfies them; one they refuse holds them, since nobody can say what is missing.
        A payload refused elsewhere (a value's own pattern, say) leaves them waiting: that refusal decides."""
        refusals: tuple[tuple[tuple[str, ...], frozenset[str]], ...] = ()
        if valid is False and self.value_only and self.plan.validator is not None:
            refusals = self.plan.validator.refusals(payload)
        for item, at in self.value_only:
            key, where = f"schema:{item.location}", f"{item.construct} at {item.location}"
            if valid is False and not _responsible(item.construct, at, refusals):
                valid_here: bool | None = None
            else:
                valid_here = valid
            if valid_here is True:
                self.add(
                    SlotState(
                        key=key,
                        kind="condition",
                        defined_by="provider",
                        label=item.construct,
                        status="known",
                        source="validation",
                        detail=f"{where}: the payload validates against the whole schema",
                    )
                )
            elif valid_here is False:
                self.add(
                    SlotState(
                        key=key,
                        kind="condition",
                        defined_by="provider",
                        label=item.construct,
                        status="unknown",
                        route="unsupported",
                        gap="implementation_gap",
                        detail=f"{where}: {item.detail}, and the payload does not validate",
                    )
                )
            else:
                # Not counted: the slots still open decide the verdict; this waits for the whole payload.
                self.slots.append(
                    SlotState(
                        key=key,
                        kind="condition",
                        defined_by="provider",
                        label=item.construct,
                        status="unknown",
                        detail=f"{where}: decided by validating the payload once every other slot is settled",
                        waits_for=("payload",),
                    )
                )

    def required_path(self, path: str) -> bool:
        root = self.plan.root
        node = root
        parts = path.split(".")
        for i, part in enumerate(parts):
            if node is None:
                return False
            if i == len(parts) - 1:
                return part in node.required
            prop = node.properties.get(part)
            node = prop.child if prop is not None else None
        return False

    def run(self) -> Record:
        self.fixed_slots()
        self.provider_slots()
        self.conditions()
        payload, valid, errors = self.payload()
        self.value_only_slots(payload, valid)
        full_digest = digest(payload) if payload is not None else None
        payload_digest = full_digest if valid else None
        self.consent(payload if valid else None, payload_digest)
        self.effect_key(payload if valid else None)
        self.approvals(payload_digest)
        notices = self.plan.notices
        verdict = self.count(valid, errors)
        questions = self.questions if verdict in ("ask", "hold", "deferred") else []
        measures = tuple(self.frontier.values()) if verdict == "measure" else ()
        return Record(
            verdict=verdict,
            server=self.contract.server,
            tool=self.contract.name,
            contract_digest=self.contract.digest,
            principal=self.request.principal,
            checklist_version=self.plan.checklist_version,
            slots=tuple(self.slots),
            questions=tuple(questions),
            measures=measures,
            unmet=tuple(self.unmet),
            gaps=tuple(self.gaps),
            notices=notices,
            payload=payload,
            payload_digest=full_digest,
            payload_valid=valid,
            payload_errors=errors,
            unknown_count=len(self.unknown),
            reasons=tuple(self.reasons),
            evaluated_at=self.now.isoformat(),
            timing_at=self.timing_at.isoformat() if self.timing_at else None,
            fresh_until=self.fresh_until.isoformat() if self.fresh_until else None,
        )

    def count(
        self, valid: bool | None, errors: tuple[str, ...]
    ) -> Literal["execute", "ask", "measure", "hold", "block", "deferred"]:
        unknown = self.unknown
        blocks = [u for u in self.unmet if u.on_false == "block"]
        holds = [
            s
            for s in unknown
            if s.route in ("hold", "provider_gap", "unsupported")
            and not s.key.startswith(("approval:", CONSENT_KEY))
        ]
        unmet_holds = [u for u in self.unmet if u.on_false == "hold"]
        # The user's yes/no to a value or the call: asked before a deferral (the user is here now, maybe not
        # at trigger time), after the lookups (a held call needs no yes).
        yes_asks = [s for s in unknown if s.route == "ask_user" and s.key.startswith(_YES_PREFIXES)]
        asks = [s for s in unknown if s.route == "ask_user" and not s.key.startswith(_YES_PREFIXES)]
        measures = [s for s in unknown if s.route == "measure"]
        confirms = self.confirms
        # A consent not askable yet (no valid payload) waits like an approval: last, and never an execute.
        approvals = [s for s in unknown if s.key.startswith("approval:") or s.key == CONSENT_KEY]
        if blocks:
            self.reasons.extend(f"blocked by {u.id}: {u.text}" for u in blocks)
            return "block"
        if holds or unmet_holds or valid is False:
            self.reasons.extend(f"{s.key}: {s.detail or s.route}" for s in holds)
            self.reasons.extend(f"unmet {u.id}: {u.text}" for u in unmet_holds)
            self.reasons.extend(f"payload invalid: {e}" for e in errors)
            return "hold"
        if asks:
            self.reasons.append(f"{len(asks)} slot(s) need the user's answer")
            return "ask"
        if yes_asks and (self.deferred or not measures):
            self.reasons.append(f"{len(yes_asks)} value(s) or the call need the user's yes")
            return "ask"
        if self.deferred:
            self.reasons.append("timing is in the future: preflight again at trigger time")
            return "deferred"
        if measures:
            self.reasons.append(f"{len(measures)} slot(s) wait for lookups")
            return "measure"
        if confirms or approvals:
            self.reasons.extend(
                f"{s.key}: {s.detail or 'awaiting approval'}" for s in (*confirms, *approvals)
            )
            return "hold"
        self.reasons.append("every obligation is settled and the payload is valid")
        return "execute"


_BAD = object()
MAX_CLOCK_SKEW_S = 30.0  # how far ahead of this clock an observation's time may be
_YES_PREFIXES = (CONFIRM_PREFIX, CONSENT_KEY)
# Findings are immutable, so the plain "nothing here" finding of each source is shared, not rebuilt.
_NO_RESULT = {
    source: Finding(source, "no_result")
    for source in ("user_answer", "instruction", "preset", "observed", "prior_state", "principal", "contract")
}


def principal_id(principal: str) -> str:
    """What a `principal` source or lookup argument gives: the id after the kind (`user:alice` -> `alice`)."""
    kind, sep, rest = principal.partition(":")
    return rest if sep and kind and rest else principal


_INTENT_LABELS = {"fixed:action_name": "what should be done", "fixed:timing": "when it should happen"}
_INTENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "fixed:action_name": {"type": "string", "minLength": 1},
    "fixed:timing": {"oneOf": [{"const": "immediate"}, {"type": "string", "format": "date-time"}]},
    "fixed:tool": {"type": "integer"},
    "fixed:intended_change": {"type": "string"},
}


# Names a JavaScript tool reads as its objects' machinery rather than as data (Object.assign, merges).
_RUNTIME_NAMES: Final = frozenset({"__proto__", "constructor", "prototype"})


def _name_skeleton(name: str) -> str:
    """What a reader takes a name for: compatibility forms folded, case and separators ignored, invisible
    characters dropped. Two names with one skeleton look like one argument on a review screen."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return "".join(c for c in folded if c not in "_- " and unicodedata.category(c)[0] not in "CZ")


def _scripts(name: str) -> set[str]:
    # A letter's script is the first word of its Unicode name (LATIN, CYRILLIC, GREEK...).
    return {unicodedata.name(c, "?").split(" ", 1)[0] for c in name if c.isalpha()}


def _skeletons(node: ObjectNode, extra: Sequence[str], prefix: str) -> dict[str, list[str]]:
    """The names of an object's arguments, declared and undeclared, by skeleton."""
    out: dict[str, list[str]] = {}
    names = {*node.properties, *(p[len(prefix) :] for p in extra if p.startswith(prefix))}
    for name in sorted(names):
        if "." not in name:
            out.setdefault(_name_skeleton(name), []).append(name)
    return out


def _look_alike(name: str, skeletons: Mapping[str, Sequence[str]]) -> str | None:
    """Why an undeclared argument's name (the agent's choice, never the user's words) cannot be told from
    another argument's or from no name, or None. Such a value holds: it has no place a reviewer could see."""
    if name in _RUNTIME_NAMES:
        return f"'{name}' is read as an object's machinery by some tools, not as an argument"
    if any(unicodedata.category(c)[0] in "CZ" and c != " " for c in name) or name != name.strip():
        return "the argument's name has invisible, control or edge space characters"
    if len(_scripts(name)) > 1:
        return "the argument's name mixes letters of several scripts"
    other = next((n for n in skeletons.get(_name_skeleton(name), ()) if n != name), None)
    if other is not None:
        return f"the argument's name looks like '{other}', another argument's"
    return None


_ABSENT: Final = object()


def _member_schema(root: ObjectNode | None, path: str) -> Mapping[str, Any]:
    """The declared schema of the argument at `path` ({} where the tool declares none)."""
    node = root
    parts = path.split(".")
    for i, part in enumerate(parts):
        prop = node.properties.get(part) if node is not None else None
        if prop is None:
            return {}
        if i == len(parts) - 1:
            return prop.schema
        node = prop.child
    return {}


def _timing_at(value: Any) -> datetime | object | None:
    """None for immediate, a UTC datetime for a scheduled time, _BAD for anything else."""
    if value == "immediate" or (isinstance(value, Mapping) and value.get("mode") == "immediate"):
        return None
    text = value.get("at") if isinstance(value, Mapping) else value
    if not isinstance(text, str):
        return _BAD
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return _BAD
    if at.tzinfo is None:
        return _BAD
    return at.astimezone(UTC)


def _responsible(
    construct: str, at: tuple[str, ...], refusals: tuple[tuple[tuple[str, ...], frozenset[str]], ...]
) -> bool:
    """Whether a construct may be what refuses the payload: an error about the object it constrains as a
    whole, or one whose schema path passes through it. An error about one argument's own value is not."""
    return any(path == at or construct in keywords for path, keywords in refusals)


def _words(value: Any) -> str:
    """A value as the user reads it: JSON, exactly (nothing rounded, quotes and newlines escaped), with every
    character that does not show itself (controls, format characters such as bidi overrides and zero-width
    joiners, separators other than a space) spelled as an escape, so what the user says yes to is what they
    see."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return "".join(f"\\u{ord(c):04x}" if c != " " and unicodedata.category(c) in _UNSEEN else c for c in text)


_UNSEEN = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp", "Zs"})


def _flatten(payload: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in payload.items():
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(value, Mapping) and value:
            out.extend(_flatten(value, path))
        else:
            out.append((path, value))
    return out


def _errors_at(validator: PayloadValidator, payload: dict[str, Any], where: tuple[str | int, ...]) -> bool:
    return any(w == where for w, _ in validator.located_errors(payload))


def _has_ref(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "$ref" in schema or any(_has_ref(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_ref(v) for v in schema)
    return False


def question_schema(
    root: Mapping[str, Any] | None, schema: Mapping[str, Any], required: bool
) -> dict[str, Any]:
    """The schema a question carries: the argument's own, with the root's definitions when its `$ref`s
    name them (so it stands alone), and null besides for an optional argument (null leaves it out)."""
    out = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
    defs = {}
    if root is not None and _has_ref(schema):
        defs = {k: root[k] for k in ("$defs", "definitions") if isinstance(root.get(k), Mapping)}
    if not required:
        out = {"anyOf": [out, {"type": "null"}]}
    return {**out, **defs}


def _rule_owner(rule: Rule) -> Literal["policy", "user"]:
    return "user" if rule.principals else "policy"


def _pointer_json(pointer: Span | tuple[Span, ...] | None) -> dict[str, Any] | None:
    if pointer is None:
        return None
    if isinstance(pointer, Span):
        return {"turn": pointer.turn, "start": pointer.start, "end": pointer.end}
    return {"spans": [{"turn": p.turn, "start": p.start, "end": p.end} for p in pointer]}


def _observation_json(obs: Observation) -> dict[str, Any]:
    return {"observation": obs.id, "measure": obs.measure, "observed_at": obs.observed_at.isoformat()}


def _span_text(request: ExecutionRequest, span: Span) -> str | None:
    if 0 <= span.turn < len(request.conversation):
        content = request.conversation[span.turn].content
        if 0 <= span.start < span.end <= len(content):
            return content[span.start : span.end]
    return None


def _set_path(target: dict[str, Any], path: str, value: Any, *, keep: bool = False) -> None:
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


def preflight(
    plan: Plan, request: ExecutionRequest, evidence: Evidence, *, tool_source: str = "instruction"
) -> Record:
    """Evaluate one candidate execution against a compiled plan. Pure: same inputs, same record."""
    return _Run(plan, request, evidence, tool_source).run()


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
        slot = SlotState(
            key="fixed:tool",
            kind="intent",
            defined_by="fixed",
            label="the action",
            status="unknown",
            route="ask_user",
            gap="user_gap",
            detail=f"{len(changing)} actions could do this",
        )
        questions = (
            Question("fixed:tool", fixed_tool.question, {"enum": list(options)}, options, kind="choice"),
        )
        verdict = "ask"
    return Record(
        verdict=verdict,
        server="",
        tool="",
        contract_digest="",
        principal=request.principal,
        checklist_version="fixed@1",
        slots=(slot,),
        questions=questions,
        measures=(),
        unmet=(),
        gaps=(Gap("user_gap", "fixed:tool", slot.detail or ""),) if slot.gap else (),
        notices=(),
        payload=None,
        payload_digest=None,
        payload_valid=None,
        payload_errors=(),
        unknown_count=1,
        reasons=(slot.detail or "",),
        evaluated_at=evidence.now.isoformat(),
    )
