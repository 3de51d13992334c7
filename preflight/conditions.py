"""Conditions: the provider's and the rules' expressions, judged once what they read is settled, and the
approvals they call for."""

from __future__ import annotations

from typing import Any, Literal, cast

from .approvals import approval_state, slot_approval
from .checklist import Rule
from .errors import ExpressionError
from .expressions import Expression, evaluate
from .record import Finding, Route, SlotState, Unmet
from .resolve import Resolve
from .state import DefinedBy, Resolution, set_path


class Conditions(Resolve):
    """Stage: judging conditions and the approvals they call for."""

    def conditions(self) -> None:
        for cond in self.contract.extension.conditions:
            self.condition_slot(f"cond:{cond.id}", "provider", cond.check, cond.on_false, cond.text, cond.id)
        for _, rule in self.rules:
            if rule.kind == "condition" and rule.check is not None:
                self.condition_slot(
                    f"user:{rule.id}", _rule_owner(rule), rule.check, rule.on_false, rule.text, rule.id
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

    def judge(self, expr: Expression) -> tuple[Resolution, bool | None]:
        """Evaluate an expression once everything it reads is settled: (its trace, its value or None)."""
        res = Resolution()
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

    def reads_ready(self, expr: Expression, res: Resolution) -> dict[str, Any] | None:
        """The measure values an expression reads, or None while something it reads is unsettled."""
        waits: list[str] = []
        routes: list[Route] = []
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
            set_path(out, path, value)
        return out

    def unsettled(self, key: str, owner: DefinedBy, text: str, res: Resolution, **more: Any) -> SlotState:
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
                detail = "needs a person's approval once every value is settled"
                self.add(SlotState.held(key, text, detail, defined_by=owner, approval="required"))
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
                detail = "needs a person's approval of these exact values"
                self.add(SlotState.held(key, text, detail, defined_by=owner, approval=slot_approval(state)))


def _rule_owner(rule: Rule) -> Literal["policy", "user"]:
    return "user" if rule.principals else "policy"
