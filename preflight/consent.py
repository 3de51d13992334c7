"""The user's confirmations and consent (a yes bound to exact values), and four eyes on an approver's edit."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .approvals import approval_state, slot_approval, value_digest
from .conditions import Conditions
from .confirmations import CONFIRM_PREFIX, CONSENT_KEY, bound_state
from .errors import ExpressionError
from .expressions import evaluate_key
from .record import Finding, Question, SlotApproval, SlotState, Unmet
from .state import NO_RESULT, Resolution
from .summary import spell_unseen


class Consent(Conditions):
    """Stage: the user's yes to values and to the call, and approvers' edits."""

    def editor(self, res: Resolution) -> str | None:
        """Who set this value by an answer, if not the requesting user: an approver's edit in the console."""
        if res.source != "user_answer" or res.pointer is None:
            return None
        by = res.pointer.get("by")
        return by if isinstance(by, str) and by != self.request.principal else None

    def chosen_by_approver(self) -> Resolution | None:
        """The action, when an approver chose it among the candidate tools (four eyes, as for a value)."""
        a = self.evidence.answers.get("fixed:tool")
        if self.tool_source != "user_answer" or a is None or a.answered_by == self.request.principal:
            return None
        res = Resolution(status="known", value=self.contract.identity, source="user_answer")
        res.pointer = {"answer": a.id, "by": a.answered_by}
        return res

    def edit_detail(self, res: Resolution) -> str | None:
        editor = self.editor(res)
        if editor is None:
            return None
        return f"edited by {editor}: another approver must approve this value"

    def value_approval(self, key: str, res: Resolution, *, approve: bool) -> SlotApproval | None:
        """An approver's approval a settled value needs: by contract (`confirm: {"by": "approver"}`), or
        because an approver edited it (four eyes: then the editor's own approval does not count)."""
        editor = self.editor(res)
        # An approver's edit to null (leaving an argument out) is an edit like any other.
        if res.status == "unknown" or not ((approve and res.status == "known") or editor is not None):
            return None
        state = approval_state(self.evidence.approvals, key, res.value, excluding=editor)
        return slot_approval(state)

    def bound_slot(self, key: str, label: str, bound_digest: str, question: Question, declined: str) -> None:
        a = self.evidence.answers.get(key)
        if a is not None and a.answered_by != self.request.principal:
            a = None  # an answer recorded as anyone else's (a reviewer's) is not the user's: no answer at all
        state = bound_state(a.value, bound_digest) if a is not None else "none"
        pointer = {"answer": a.id, "by": a.answered_by, "digest": bound_digest} if a is not None else None
        if state in ("yes", "no"):
            # The user's no to exactly this: recorded, and the call does not run while it stands.
            no = state == "no"
            self.add(
                SlotState(
                    key=key,
                    kind="intent",
                    defined_by="provider",
                    label=label,
                    status="known",
                    value=False if no else bound_digest,
                    source="user_answer",
                    pointer=pointer,
                    findings=(Finding("user_answer", "found", pointer, "the user said no" if no else None),),
                    met=False if no else None,
                    detail=declined if no else None,
                )
            )
            if no:
                self.unmet.append(Unmet(key, "block", declined))
            return
        finding = (
            Finding("user_answer", "no_result", pointer, "the answer was for another value; asked again")
            if state == "void"
            else NO_RESULT["user_answer"]
        )
        detail = "awaits the user's yes or no"
        self.add(SlotState.ask_user(key, label, detail, kind="intent", findings=(finding,)))
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
            detail = "the user is asked to consent once the payload is complete and valid"
            self.add(SlotState.held(CONSENT_KEY, label, detail, kind="intent"))
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
            self.add(SlotState.held(key, text, detail, findings=(finding,)))
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


def _words(value: Any) -> str:
    """A value as the user reads it: exact JSON (nothing rounded), every character that does not show itself
    spelled as an escape (spell_unseen), so what the user says yes to is what they see."""
    return spell_unseen(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _flatten(payload: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in payload.items():
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(value, Mapping) and value:
            out.extend(_flatten(value, path))
        else:
            out.append((path, value))
    return out
