"""The payload assembled from the settled slots, validated against the whole schema, and the verdict counted
from what is still empty."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import record
from .confirmations import CONSENT_KEY, is_user_yes_key
from .errors import SchemaUnusable
from .materialize import Materialize
from .record import SlotState
from .schema import find_property
from .state import set_path
from .validation import PayloadValidator


class Verdict(Materialize):
    """Stage: the payload and the verdict."""

    def payload(self) -> tuple[dict[str, Any] | None, bool | None, tuple[str, ...]]:
        validator = self.plan.validator
        if validator is None:  # no inputSchema (the plan has no root either): no payload
            return None, None, ()
        payload = self.assemble()
        complete = not any(s.key.startswith(("arg:", "branch:", "schema:")) for s in self.unknown)
        if not complete:
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

    def assemble(self, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        payload: dict[str, Any] = {}
        for path in self.objects:
            set_path(payload, path, {}, keep=True)
        for path, slot in self.arg_slots.items():
            if path in skip:
                continue
            if slot.status == "known" or (slot.status == "null" and self.required_path(path)):
                set_path(payload, path, slot.value)
        return payload

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
        for where, message in validator.located_errors(payload):
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

    def required_path(self, path: str) -> bool:
        found = find_property(self.plan.root, path) if self.plan.root is not None else None
        return found is not None and found[1]

    def value_only_slots(self, payload: Mapping[str, Any] | None, valid: bool | None) -> None:
        """The validator is the authority on constructs that only limit acceptable payloads: a grounded
        payload it accepts satisfies them; one they refuse holds them, since nobody can say what is missing.
        A payload refused elsewhere (a value's own pattern, say) leaves them waiting: that refusal decides."""
        refusals: tuple[tuple[tuple[str, ...], frozenset[str]], ...] = ()
        if valid is False and self.value_only and self.plan.validator is not None:
            refusals = self.plan.validator.refusals(payload)
        for item, at in self.value_only:
            key, where = f"schema:{item.location}", f"{item.construct} at {item.location}"
            valid_here = None if valid is False and not _responsible(item.construct, at, refusals) else valid
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
                detail = f"{where}: {item.detail}, and the payload does not validate"
                self.add(SlotState.unsupported(key, item.construct, detail))
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

    def count(self, valid: bool | None, errors: tuple[str, ...]) -> record.Verdict:
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
        yes_asks = [s for s in unknown if s.route == "ask_user" and is_user_yes_key(s.key)]
        asks = [s for s in unknown if s.route == "ask_user" and not is_user_yes_key(s.key)]
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


def _responsible(
    construct: str, at: tuple[str, ...], refusals: tuple[tuple[tuple[str, ...], frozenset[str]], ...]
) -> bool:
    """Whether a construct may be what refuses the payload: an error about the object it constrains as a
    whole, or one whose schema path passes through it. An error about one argument's own value is not."""
    return any(path == at or construct in keywords for path, keywords in refusals)


def _errors_at(validator: PayloadValidator, payload: dict[str, Any], where: tuple[str | int, ...]) -> bool:
    return any(w == where for w, _ in validator.located_errors(payload))
