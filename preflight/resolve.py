"""The source walk: a slot's value from its designated sources, in order (answers, the user's words,
presets, lookups, prior state...), with what each source said."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .canonical import digest
from .checklist import FixedObligation
from .contract import MeasureSpec, SlotConfig
from .errors import SchemaUnusable
from .plan import Bounded, PropInfo
from .pointers import check_pointer, check_words
from .record import Finding, MeasureRequest
from .request import Answer, Candidate, Observation
from .schema import Property, find_property
from .state import NO_RESULT, Resolution, RunState, pointer_json
from .validation import same_json


class Resolve(RunState):
    """Stage: resolving values source by source."""

    def walk_sources(
        self,
        key: str,
        sources: Sequence[str],
        *,
        path: str | None = None,
        schema: Mapping[str, Any] | None = None,
        config: SlotConfig | None = None,
    ) -> Resolution:
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
                        pointer_json(cand.pointer),
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
    ) -> Resolution:
        res = Resolution()
        evidence = self.evidence
        for source in sources:
            if source == "user_answer":
                a = evidence.answers.get(key)
                if a is not None and self.users_own_words(a, sources, cand, schema):
                    # A reviewer's edit back to what the user's own words say adds nothing of its own: the
                    # user's turn stays the source (and no second approver is needed for it).
                    assert cand is not None and cand.pointer is not None
                    return self._found(res, "instruction", cand.value, pointer_json(cand.pointer))
                if a is not None:
                    return self._found(res, source, a.value, {"answer": a.id, "by": a.answered_by})
            elif source == "instruction":
                if cand is None:
                    res.findings.append(NO_RESULT[source])
                    continue
                if cand.pointer is None:
                    res.findings.append(Finding(source, "no_result", detail="proposed without a pointer"))
                    res.unverified = True
                    continue
                check = check_pointer(self.request.conversation, cand.pointer, cand.value, schema)
                if check.ok:
                    return self._found(res, source, cand.value, pointer_json(cand.pointer))
                res.findings.append(
                    Finding(
                        source,
                        "no_result",
                        pointer_json(cand.pointer),
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
                res.findings.append(NO_RESULT[source])
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

    def observe(self, spec: MeasureSpec, res: Resolution) -> Observation | None:
        """Look up a measure's observation for the current arguments, or put the lookup on the frontier."""
        missing = tuple(f"arg:{p}" for p in sorted(spec.reads) if p not in self.values)
        if missing:
            res.waits_for = missing
            return None
        args = lookup_args(spec, self.values.__getitem__, self.request.principal)
        request = MeasureRequest(spec.name, spec.lookup, args, _args_digest(args), spec.max_age_s)
        if self.deferred:
            # Measurements are taken at trigger time, never stored ahead for a deferred execution.
            res.measure = request
            return None
        obs = self.evidence.observations.get(request.key)
        if obs is None or request.key in self.evidence.pending:
            running = obs is None and request.key in self.evidence.pending
            detail = "lookup running" if running else "not measured yet"
            self.look_up(res, request, Finding("observed", "no_result", {"measure": spec.name}, detail))
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
            detail = f"stale: observed {age:.0f}s ago, max age {spec.max_age_s:.0f}s"
            self.look_up(res, request, Finding("observed", "no_result", _observation_json(obs), detail))
            return None
        stale_at = obs.observed_at + timedelta(seconds=spec.max_age_s)
        if self.fresh_until is None or stale_at < self.fresh_until:
            self.fresh_until = stale_at
        return obs

    def look_up(self, res: Resolution, request: MeasureRequest, finding: Finding) -> None:
        """The slot waits for this lookup: it goes on the frontier, once."""
        res.findings.append(finding)
        res.measure = request
        self.frontier.setdefault(request.key, request)

    def action_name_resolution(self, ob: FixedObligation) -> Resolution:
        res = Resolution()
        for source in ob.sources:
            if source == "user_answer" and (a := self.evidence.answers.get(ob.key)) is not None:
                return self._found(res, source, a.value, {"answer": a.id, "by": a.answered_by})
            if source == "instruction" and (span := self.request.action_name) is not None:
                check = check_words(self.request.conversation, span)
                if check.ok:
                    return self._found(res, source, check.text, pointer_json(span))
                res.findings.append(
                    Finding(
                        source,
                        "no_result",
                        pointer_json(span),
                        f"the pointer does not hold the action ({check.reason})",
                    )
                )
                continue
            res.findings.append(NO_RESULT[source])
        return res

    def timing_resolution(self, ob: FixedObligation) -> Resolution:
        res = Resolution()
        timing = self.request.timing
        for source in ob.sources:
            a = self.evidence.answers.get(ob.key) if source == "user_answer" else None
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
                check = check_words(self.request.conversation, timing.pointer)
                # Free-form time words ("now", "on Friday at 9") cannot be matched to a value; the pointer
                # must still land on the user's own words, and the reviewer sees them.
                if check.ok:
                    return self._found(res, source, value, pointer_json(timing.pointer))
                res.unverified = True
                res.findings.append(
                    Finding(
                        source,
                        "no_result",
                        pointer_json(timing.pointer),
                        f"the pointer does not hold the timing ({check.reason})",
                    )
                )
                continue
            if source == "preset" and (p := self.evidence.presets.get(ob.key)) is not None:
                return self._found(res, source, p.value, {"preset": p.id})
            res.findings.append(NO_RESULT[source])
        return res

    def reviewer_restores_timing(self, a: Answer, sources: Sequence[str]) -> bool:
        """A reviewer's timing that is the one the user's words gave: the user's turn stays the source."""
        timing = self.request.timing
        if a.answered_by == self.request.principal or a.after_user_answer or "instruction" not in sources:
            return False
        if timing is None or timing.pointer is None:
            return False
        at = timing_of(a.value)
        if at is NOT_A_TIMING or at != (timing.at.astimezone(UTC) if timing.at else None):
            return False
        return check_words(self.request.conversation, timing.pointer).ok

    def resolve_prop(self, prop: Property, info: PropInfo | None = None) -> Resolution:
        done = self.resolved.get(prop.path)
        if done is not None:
            return done
        cfg = (info or self.plan.props[prop.path]).config
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
            found = find_property(self.plan.root, member) if self.plan.root is not None else None
            schema = found[0].schema if found is not None else {}
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


MAX_CLOCK_SKEW_S = 30.0  # how far ahead of this clock an observation's time may be


def principal_id(principal: str) -> str:
    """What a `principal` source or lookup argument gives: the id after the kind (`user:alice` -> `alice`)."""
    kind, sep, rest = principal.partition(":")
    return rest if sep and kind and rest else principal


_args_digests: Bounded[tuple[Any, ...], str] = Bounded(16384)


def lookup_args(spec: MeasureSpec, argument: Callable[[str], Any], principal: str) -> dict[str, Any]:
    """A lookup's arguments: each `arg:<path>` the argument's value (read by `argument`), `principal` the
    principal's id, anything else as declared. The gate's re-check builds them again the same way."""
    return {
        k: argument(v[4:])
        if isinstance(v, str) and v.startswith("arg:")
        else principal_id(principal)
        if v == "principal"
        else v
        for k, v in spec.args.items()
    }


def _args_digest(args: Mapping[str, Any]) -> str:
    """`digest(args)`, kept for args whose values are hashable (scalars, mostly): a lookup's args are the same
    in each preflight of an execution. Each value's type is part of the key: 1, 1.0 and True are equal in
    Python, not in JSON."""
    try:
        key = tuple((name, type(value), value) for name, value in sorted(args.items()))
        found = _args_digests.get(key)
    except TypeError:  # an unhashable value: a list or a dict
        return digest(args)
    if found is None:
        found = digest(args)
        _args_digests.put(key, found)
    return found


NOT_A_TIMING = object()  # what timing_of() gives for a value that is neither immediate nor a time


def timing_of(value: Any) -> datetime | object | None:
    """None for immediate, a UTC datetime for a scheduled time, NOT_A_TIMING for anything else."""
    if value == "immediate" or (isinstance(value, Mapping) and value.get("mode") == "immediate"):
        return None
    text = value.get("at") if isinstance(value, Mapping) else value
    if not isinstance(text, str):
        return NOT_A_TIMING
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return NOT_A_TIMING
    if at.tzinfo is None:
        return NOT_A_TIMING
    return at.astimezone(UTC)


_ABSENT: Final = object()


def _observation_json(obs: Observation) -> dict[str, Any]:
    return {"observation": obs.id, "measure": obs.measure, "observed_at": obs.observed_at.isoformat()}
