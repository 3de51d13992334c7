"""What a preflight is asked about (the candidate execution) and what has been collected for it so far."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .approvals import Approval
from .canonical import canonical_json
from .errors import RequestError
from .pointers import Span, Turn

__all__ = [
    "Answer",
    "Candidate",
    "Evidence",
    "ExecutionRequest",
    "Observation",
    "Preset",
    "PriorValue",
    "Timing",
    "parse_request",
]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A value the model proposed, with where it says the value lives."""

    value: Any
    pointer: Span | tuple[Span, ...] | None = None


@dataclass(frozen=True, slots=True)
class Timing:
    mode: Literal["immediate", "at"]
    at: datetime | None = None
    pointer: Span | None = None


@dataclass(frozen=True, slots=True)
class ExecutionRequest:
    principal: str
    conversation: tuple[Turn, ...] = ()
    candidates: Mapping[str, Candidate] = field(default_factory=dict)  # argument path -> candidate
    action_name: Span | None = None
    timing: Timing | None = None
    intended_effect: str | None = None
    environment: str = ""


@dataclass(frozen=True, slots=True)
class Answer:
    """The user's own words from a trusted channel (or a reviewer's edit, with their identity)."""

    value: Any
    answered_by: str
    id: str = ""
    # A reviewer's answer given after the user had answered the slot themselves: their turn no longer
    # speaks for them, so an edit that matches the turn does not restore it as the source.
    after_user_answer: bool = False


@dataclass(frozen=True, slots=True)
class Preset:
    value: Any
    id: str
    consent: str = ""  # who consented, when, in which execution


@dataclass(frozen=True, slots=True)
class Observation:
    """The outcome of one lookup: a value observed at a time, or an error. Never "no result" for an error."""

    measure: str
    args_digest: str
    observed_at: datetime
    value: Any = None
    error: str | None = None
    id: str = ""

    @property
    def key(self) -> str:
        return f"{self.measure}#{self.args_digest}"


@dataclass(frozen=True, slots=True)
class PriorValue:
    value: Any
    record_id: str
    origin: str  # the source that settled it in that record


@dataclass(frozen=True, slots=True)
class Evidence:
    now: datetime
    answers: Mapping[str, Answer] = field(default_factory=dict)  # slot key -> answer
    presets: Mapping[str, Preset] = field(default_factory=dict)  # slot key -> preset
    observations: Mapping[str, Observation] = field(default_factory=dict)  # Observation.key -> observation
    prior: Mapping[str, PriorValue] = field(default_factory=dict)  # slot key -> earlier record's value
    approvals: tuple[Approval, ...] = ()
    pending: frozenset[str] = frozenset()  # observation keys whose lookups are running right now


def _span(raw: Any, field_name: str) -> Span:
    if not isinstance(raw, Mapping):
        raise RequestError(field_name, "a pointer is an object with turn, start and end")
    try:
        turn, start, end = raw["turn"], raw["start"], raw["end"]
    except KeyError as exc:
        raise RequestError(field_name, f"a pointer needs {exc.args[0]!r}") from None
    for name, value in (("turn", turn), ("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise RequestError(f"{field_name}.{name}", "must be an integer")
    return Span(turn, start, end)


def _pointer(raw: Any, field_name: str) -> Span | tuple[Span, ...] | None:
    if raw is None:
        return None
    if isinstance(raw, list):
        return tuple(_span(p, f"{field_name}[{i}]") for i, p in enumerate(raw))
    return _span(raw, field_name)


def parse_request(data: Mapping[str, Any]) -> ExecutionRequest:
    """Read the JSON body of an execution request (the tool selection is read by the caller).

    Raises RequestError naming the field for any shape the engine cannot read; a pointer that is
    well-formed but out of range is not an error here (it simply does not verify).
    """
    principal = data.get("principal")
    if not isinstance(principal, str) or not principal:
        raise RequestError("principal", "required, a non-empty string")
    turns_raw = data.get("conversation", [])
    if not isinstance(turns_raw, list):
        raise RequestError("conversation", "must be a list of turns")
    turns = []
    for i, t in enumerate(turns_raw):
        if (
            not isinstance(t, Mapping)
            or not isinstance(t.get("content"), str)
            or not isinstance(t.get("role"), str)
        ):
            raise RequestError(f"conversation[{i}]", "a turn has a string role and string content")
        trusted = t.get("trusted", False)
        if not isinstance(trusted, bool):
            raise RequestError(f"conversation[{i}].trusted", "must be true or false")
        if not t["content"].isascii():
            try:
                t["content"].encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError(
                    f"conversation[{i}].content", "not valid Unicode (a lone surrogate)"
                ) from None
        turns.append(Turn(t["role"], t["content"], trusted))
    cands_raw = data.get("candidates", {})
    if not isinstance(cands_raw, Mapping):
        raise RequestError("candidates", "must be an object keyed by argument name")
    candidates = {}
    for key, c in cands_raw.items():
        name = key[4:] if key.startswith("arg:") else key
        if name in candidates:
            # "amount" and "arg:amount" are one argument: keeping either would silently drop the other.
            raise RequestError(f"candidates.{key}", f"names the same argument as another candidate ({name})")
        if not isinstance(c, Mapping) or "value" not in c:
            raise RequestError(f"candidates.{key}", "a candidate is an object with a value (and a pointer)")
        try:
            # A value no digest can represent (an integer past 2**53, a lone surrogate, inf) could be neither
            # recorded nor sent as stated: refused here, not a crash when the record is sealed.
            canonical_json(c["value"])
        except TypeError as exc:
            raise RequestError(f"candidates.{key}.value", str(exc)) from None
        candidates[name] = Candidate(c["value"], _pointer(c.get("pointer"), f"candidates.{key}.pointer"))
    action = data.get("action_name")
    timing = _timing(data.get("timing"))
    intended = data.get("intended_change")
    effect = None
    if isinstance(intended, Mapping):
        effect = intended.get("effect")
    elif intended is not None and not isinstance(intended, str):
        raise RequestError("intended_change", "must be a string or an object with an effect")
    if effect is not None and not isinstance(effect, str):
        raise RequestError("intended_change.effect", "must be a string")
    env = data.get("environment", "")
    if not isinstance(env, str):
        raise RequestError("environment", "must be a string")
    return ExecutionRequest(
        principal=principal,
        conversation=tuple(turns),
        candidates=candidates,
        action_name=_span(action, "action_name") if action is not None else None,
        timing=timing,
        intended_effect=effect,
        environment=env,
    )


def _timing(raw: Any) -> Timing | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("mode") not in ("immediate", "at"):
        raise RequestError("timing", 'must be {"mode": "immediate"} or {"mode": "at", "at": "<ISO 8601>"}')
    at = None
    if raw["mode"] == "at":
        text = raw.get("at")
        if not isinstance(text, str):
            raise RequestError("timing.at", "required for mode 'at', an ISO 8601 time")
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            raise RequestError("timing.at", f"not an ISO 8601 time: {text!r}") from None
        if at.tzinfo is None:
            raise RequestError("timing.at", "needs a UTC offset; a local time is ambiguous")
        at = at.astimezone(UTC)
    pointer = raw.get("pointer")
    return Timing(raw["mode"], at, _span(pointer, "timing.pointer") if pointer is not None else None)
