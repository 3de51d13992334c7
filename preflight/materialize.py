"""Materializing: the slot list from the fixed checklist, the contract (labels, prose, schema) and the rules,
each filled from its sources or routed (asked, looked up, held)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from .checklist import FixedObligation
from .confirmations import CONFIRM_PREFIX
from .consent import Consent
from .contract import SlotConfig
from .plan import PropInfo
from .record import Finding, Gap, GapClass, Owner, Question, Route, SlotApproval, SlotKind, SlotState
from .resolve import NOT_A_TIMING, timing_of
from .schema import BranchGroup, ObjectNode, Property, select_branches
from .state import Resolution, pointer_json
from .validation import same_json, schema_keys


def settled_slot(
    res: Resolution,
    *,
    key: str,
    kind: SlotKind,
    defined_by: Owner,
    label: str,
    labels: tuple[str, ...] = (),
    approval: SlotApproval | None = None,
    detail: str | None = None,
    candidate: Any = None,
    unverified: bool = False,
) -> SlotState:
    """A slot its sources settled: the resolution's status and value, where it came from, what was found."""
    return SlotState(
        key=key,
        kind=kind,
        defined_by=defined_by,
        label=label,
        status=res.status,
        value=res.value,
        source=res.source,
        pointer=res.pointer,
        labels=labels,
        approval=approval,
        findings=tuple(res.findings),
        detail=detail,
        candidate=candidate,
        unverified=unverified,
    )


class Materialize(Consent):
    """Stage: building the slots."""

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
                        pointer=pointer_json(self.request.action_name),
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
                        SlotState.provider_gap(
                            ob.key,
                            "the intended change",
                            "the tool does not declare the state change it makes",
                            kind=ob.kind,
                            defined_by="fixed",
                            findings=tuple(res.findings),
                        )
                    )
                else:
                    # Its one source is the contract's declared state change, a non-empty string: known.
                    label = "the intended change"
                    self.add(settled_slot(res, key=ob.key, kind=ob.kind, defined_by="fixed", label=label))

    def intent_slot(self, ob: FixedObligation, res: Resolution) -> None:
        label = _INTENT_LABELS[ob.key]
        if ob.key == "fixed:timing" and res.status == "known":
            at = timing_of(res.value)
            if at is NOT_A_TIMING:
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
                SlotState.ask_user(
                    ob.key,
                    label,
                    f"{label}: not grounded in the user's words",
                    kind=ob.kind,
                    defined_by="fixed",
                    findings=tuple(res.findings),
                    candidate=res.candidate,
                    unverified=res.unverified,
                )
            )
            proposed = (res.candidate,) if res.unverified else ()
            self.questions.append(Question(ob.key, ob.question, _INTENT_SCHEMAS[ob.key], proposed=proposed))
        else:
            self.add(
                settled_slot(
                    res,
                    key=ob.key,
                    kind=ob.kind,
                    defined_by="fixed",
                    label=label,
                    approval=self.value_approval(ob.key, res, approve=False),
                    detail=self.edit_detail(res),
                )
            )

    def provider_slots(self) -> None:
        c = self.contract
        for problem in c.labels.problems:
            detail = f"malformed label on line {problem.line}: {problem.reason}"
            self.add(SlotState.provider_gap(f"label:{problem.line}", problem.text, detail))
        for i, sentence in enumerate(c.prose_conditions):
            detail = f"a condition stated only in prose, not declared: {sentence!r}"
            self.add(SlotState.provider_gap(f"cond:prose-{i + 1}", sentence, detail))
        if self.plan.root is None:
            detail = "the tool declares no inputSchema (that is not a tool without arguments)"
            self.add(SlotState.provider_gap("schema:#", "the tool's arguments", detail))
            return
        self.walk_node(self.plan.root)

    def walk_node(self, node: ObjectNode) -> None:
        np = self.plan.nodes[node.location]
        for item in node.unsupported:
            if item.value_only:
                self.value_only.append((item, tuple(node.path.split(".")) if node.path else ()))
                continue
            detail = f"{item.construct} at {item.location}: {item.detail}"
            self.add(SlotState.unsupported(f"schema:{item.location}", item.construct, detail))
        resolutions: dict[str, Resolution] = {}
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
        expected = required | {n for n, p in node.properties.items() if p.path in self.request.candidates}
        selection = select_branches(node, grounded, values, branch_answers, expected)
        required = required | selection.required
        for group in selection.open_groups:
            self.branch_slot(node, group)
        for group, complete in selection.conflicts:
            labels = " and ".join(group.branches[i].label for i in complete)
            detail = f"conflict: more than one exclusive alternative is complete ({labels})"
            self.add(SlotState.held(f"branch:{group.location}", "which alternative applies", detail))
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
                    self.walk_node(child)
                continue
            if name not in required and name not in resolutions:
                continue
            res = resolutions.get(name) or self.resolve_prop(prop)
            self.arg_slot(prop, res, name in required)
        self.undeclared(node)

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
            a = self.evidence.answers.get(f"branch:{group.location}")
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
        detail = f"no grounded value selects one {group.kind} alternative"
        self.add(SlotState.ask_user(key, "which alternative applies", detail))
        self.questions.append(
            Question(key, self.sanitize(text), {"enum": list(options)}, options, kind="choice")
        )

    def arg_slot(self, prop: Property, res: Resolution, required: bool, info: PropInfo | None = None) -> None:
        info = info or self.plan.props[prop.path]
        cfg, key, label, labels = info.config, info.key, info.label, info.labels
        self.arg_props[prop.path] = (prop, required)
        if res.refused is not None and res.status != "unknown":
            other = res.unverified and not same_json(res.candidate, res.value)
            proposed = (res.candidate,) if other else ()
            self.refuse(prop.path, res.value, res.refused, findings=tuple(res.findings), proposed=proposed)
            return
        if res.status != "unknown":
            slot = settled_slot(
                res,
                key=key,
                kind="value",
                defined_by="provider",
                label=label,
                labels=labels,
                approval=self.value_approval(key, res, approve=cfg.approve),
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
                    question_schema(self.contract.input_schema, prop.schema, required),
                    proposed=(res.candidate,) if res.unverified else (),
                )
            )

    def question_text(self, cfg: SlotConfig, label: str, required: bool) -> str:
        text = cfg.question or f"What should the {label} be?"
        if not required:
            text = cfg.question or f"Should {label} be included, and if so, what is it?"
        return self.sanitize(text)

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
        info = self.plan.props[prop.path] if prop is not None else None
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
            schema = question_schema(self.contract.input_schema, prop.schema, required) if prop else {}
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
            self.extra_paths = sorted(p for p in self.evidence_paths() if p not in self.plan.arguments)
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
                slot = SlotState.held(
                    key,
                    label,
                    look_alike
                    or "no place in the arguments: a dotted name, or inside a value that is no object",
                    kind="value",
                    defined_by="user",
                )
                # Not an argument slot: it has no place in the payload, and nothing that reads the argument
                # it seems to sit in waits for it.
                self.add(slot)
                continue
            res = self.walk_sources(key, cfg.sources, path=path, schema={}, config=cfg)
            self.undeclared_at[path] = node.path
            if res.status != "unknown":
                slot = settled_slot(
                    res,
                    key=key,
                    kind="value",
                    defined_by="user",
                    label=label,
                    candidate=res.candidate,
                    unverified=res.unverified,
                    detail="not an argument the tool declares",
                )
                self.values[path] = res.value
                self.arg_slots[path] = slot
                self.add(slot)
                continue
            slot = SlotState.ask_user(
                key,
                label,
                "proposed without a verified source; not an argument the tool declares",
                defined_by="user",
                findings=tuple(res.findings),
                candidate=res.candidate,
                unverified=res.unverified,
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


_INTENT_LABELS = {"fixed:action_name": "what should be done", "fixed:timing": "when it should happen"}


_INTENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "fixed:action_name": {"type": "string", "minLength": 1},
    "fixed:timing": {"oneOf": [{"const": "immediate"}, {"type": "string", "format": "date-time"}]},
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


def question_schema(
    root: Mapping[str, Any] | None, schema: Mapping[str, Any], required: bool
) -> dict[str, Any]:
    """The schema a question carries: the argument's own, with the root's definitions when its `$ref`s
    name them (so it stands alone), and null besides for an optional argument (null leaves it out)."""
    out = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
    defs = {}
    if root is not None and "$ref" in schema_keys(schema):
        defs = {k: root[k] for k in ("$defs", "definitions") if isinstance(root.get(k), Mapping)}
    if not required:
        out = {"anyOf": [out, {"type": "null"}]}
    return {**out, **defs}
