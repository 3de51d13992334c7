"""Tool contracts: an MCP Tool object plus its `x-preflight` extension, checked and digested."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import jsonschema
from jsonschema.validators import validator_for

from .canonical import digest
from .errors import ContractError, ExpressionError
from .expressions import Expression, compile_expression
from .labels import ParsedLabels, parse_labels
from .summary import SummaryTemplate, compile_summary

__all__ = [
    "SOURCES",
    "ApprovalSpec",
    "ConditionSpec",
    "ConsentSpec",
    "Extension",
    "MeasureSpec",
    "SlotConfig",
    "ToolContract",
    "contract_from_mcp",
]

Source = Literal["user_answer", "instruction", "preset", "observed", "prior_state", "principal"]
# The search order. Not a trust ranking: stop at the first source that has an answer. `principal` (the
# identity the call is made for, e.g. a `user_id`) is never a default: an operator names it for its slots.
SOURCES: tuple[Source, ...] = ("user_answer", "instruction", "preset", "observed", "prior_state", "principal")
DEFAULT_ARG_SOURCES: tuple[Source, ...] = ("user_answer", "instruction", "preset")

_EXTENSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "state_change": {"type": "string", "minLength": 1},
        "effects": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "prose_reviewed": {"type": "boolean"},
        "slots": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "sources": {
                        "type": "array",
                        "minItems": 1,
                        "uniqueItems": True,
                        "items": {"enum": list(SOURCES)},
                    },
                    # true (or {"by": "user"}): the requesting user confirms the value; {"by": "approver"}:
                    # an approver approves it in the console.
                    "confirm": {
                        "oneOf": [
                            {"type": "boolean"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["by"],
                                "properties": {"by": {"enum": ["user", "approver"]}},
                            },
                        ]
                    },
                    "question": {"type": "string", "minLength": 1},
                    "label": {"type": "string", "minLength": 1},
                    "measure": {"type": "string", "minLength": 1},
                },
            },
        },
        "measures": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["lookup"],
                "properties": {
                    "lookup": {"type": "string", "minLength": 1},
                    "args": {"type": "object"},
                    "max_age_s": {"type": "number", "exclusiveMinimum": 0},
                },
            },
        },
        "conditions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "check", "on_false"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
                    "check": {"type": "string", "minLength": 1},
                    "on_false": {"enum": ["hold", "block"]},
                    "text": {"type": "string"},
                    "recheck": {"type": "boolean"},
                },
            },
        },
        # The requesting user's yes to the whole call, shown the final payload in words.
        "consent": {
            "oneOf": [
                {"type": "boolean"},
                {"type": "string", "minLength": 1},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "text": {"type": "string", "minLength": 1},
                        "when": {"type": "string", "minLength": 1},
                    },
                },
            ]
        },
        # What one run changes, as an expression over the arguments ("order:" + arg.order_id): runs with the
        # same key are serialized by the gate, which re-measures the conditions they rest on first.
        "effect_key": {"type": "string", "minLength": 1},
        "extra_approval": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
                    "when": {"type": "string", "minLength": 1},
                    "text": {"type": "string"},
                },
            },
        },
        "notices": {"type": "array", "items": {"type": "string", "minLength": 1}},
        # The call in one line for the review queue: "send {arg.amount} EUR to {arg.to_account}".
        "summary": {"type": "string", "minLength": 1, "maxLength": 500},
    },
}
_EXTENSION_VALIDATOR = jsonschema.Draft202012Validator(_EXTENSION_SCHEMA)

# Conditional language in a tool's own description: a rule stated only in prose, which code cannot check.
_PROSE_CONDITION = re.compile(
    r"\b(must|only (?:if|when)|requires?|required to|unless|cannot|can't|not allowed|at least|at most|"
    r"no more than|explicit(?:ly)? (?:user )?confirm\w*|confirmation)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class SlotConfig:
    sources: tuple[Source, ...] = DEFAULT_ARG_SOURCES
    confirm: bool = False  # the requesting user confirms the value (a question of kind `confirmation`)
    approve: bool = False  # an approver approves the value in the console (`confirm: {"by": "approver"}`)
    question: str | None = None
    label: str | None = None
    measure: str | None = None  # for an `observed` source: the measure whose value settles the slot


_DEFAULT_SLOT = SlotConfig()


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    name: str
    lookup: str
    args: Mapping[str, Any]  # parameter -> "arg:<path>" (a dependency), "principal", or a literal
    max_age_s: float
    reads: frozenset[str]  # argument paths this lookup needs settled first


@dataclass(frozen=True, slots=True)
class ConditionSpec:
    id: str
    check: Expression
    on_false: Literal["hold", "block"]
    text: str
    recheck: bool = False  # measured again by the gate at run time, under the effect key's lock


@dataclass(frozen=True, slots=True)
class ConsentSpec:
    text: str
    when: Expression | None


@dataclass(frozen=True, slots=True)
class ApprovalSpec:
    id: str
    when: Expression | None
    text: str


@dataclass(frozen=True, slots=True)
class Extension:
    state_change: str | None = None
    effects: tuple[str, ...] = ()
    prose_reviewed: bool = False
    slots: Mapping[str, SlotConfig] | None = None
    measures: Mapping[str, MeasureSpec] | None = None
    conditions: tuple[ConditionSpec, ...] = ()
    extra_approval: tuple[ApprovalSpec, ...] = ()
    notices: tuple[str, ...] = ()
    consent: ConsentSpec | None = None
    effect_key: Expression | None = None
    summary: SummaryTemplate | None = None


@dataclass(frozen=True, slots=True)
class ToolContract:
    server: str
    name: str
    title: str | None
    description: str
    input_schema: Mapping[str, Any] | None  # None is "not declared", never "no arguments"
    annotations: Mapping[str, Any]
    annotations_trusted: bool
    extension: Extension
    labels: ParsedLabels
    prose_conditions: tuple[str, ...]  # sentences that state a rule the contract does not declare
    digest: str
    definition: Mapping[str, Any]

    @property
    def identity(self) -> str:
        return f"{self.server}/{self.name}"

    @property
    def read_only(self) -> bool:
        """Read-only only counts when an operator trusts this server's annotations."""
        return self.annotations_trusted and self.annotations.get("readOnlyHint") is True

    def slot_config(self, path: str) -> SlotConfig:
        return (self.extension.slots or {}).get(path, _DEFAULT_SLOT)


def contract_from_mcp(
    server: str,
    tool: Mapping[str, Any],
    *,
    annotations_trusted: bool = False,
    extension: Mapping[str, Any] | None = None,
) -> ToolContract:
    """Build a contract from an MCP Tool object. `extension` is a side-car `x-preflight` that wins over the
    one inside the tool. Raises ContractError with the reason for anything the gate cannot rely on."""
    if not isinstance(tool, Mapping):
        raise ContractError("?", "a tool definition must be a JSON object")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ContractError("?", "the tool has no name")
    if not isinstance(server, str) or not server:
        raise ContractError(name, "the server name is empty")
    definition = dict(tool)
    meta = definition.get("_meta")
    if "x-preflight" not in definition and isinstance(meta, Mapping) and "x-preflight" in meta:
        # MCP SDKs drop unknown top-level Tool fields, so servers carry the extension in _meta.
        definition["x-preflight"] = meta["x-preflight"]
    if extension is not None:
        definition["x-preflight"] = extension
    schema = definition.get("inputSchema")
    if schema is not None:
        _check_schema(name, schema)
    description = definition.get("description") or ""
    if not isinstance(description, str):
        raise ContractError(name, "description must be a string", "description")
    annotations = definition.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise ContractError(name, "annotations must be an object", "annotations")
    paths = _argument_paths(schema)
    # Without a schema there is nothing to check the extension's names against; the missing schema holds.
    ext = _extension(name, definition.get("x-preflight"), paths if schema is not None else _Anything())
    labels = parse_labels(description, paths)
    read_only = annotations_trusted and annotations.get("readOnlyHint") is True
    prose = () if ext.prose_reviewed or read_only else _prose_conditions(description)
    title = definition.get("title") or annotations.get("title")
    return ToolContract(
        server=server,
        name=name,
        title=title if isinstance(title, str) else None,
        description=description,
        input_schema=schema,
        annotations=annotations,
        annotations_trusted=annotations_trusted,
        extension=ext,
        labels=labels,
        prose_conditions=prose,
        digest=digest({"server": server, "tool": definition, "annotations_trusted": annotations_trusted}),
        definition=definition,
    )


def _check_schema(name: str, schema: Any) -> None:
    if not isinstance(schema, Mapping):
        raise ContractError(name, "inputSchema must be a JSON object", "inputSchema")
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "inputSchema" + "".join(f"/{p}" for p in exc.absolute_path)
        raise ContractError(name, f"inputSchema is not a valid JSON Schema: {exc.message}", where) from None


def _extension(name: str, raw: Any, paths: frozenset[str]) -> Extension:
    if raw is None:
        return Extension()
    error = jsonschema.exceptions.best_match(_EXTENSION_VALIDATOR.iter_errors(raw))
    if error is not None:
        where = "x-preflight" + "".join(f"/{p}" for p in error.absolute_path)
        raise ContractError(name, f"x-preflight: {error.message}", where)
    slots = {}
    for path, cfg in (raw.get("slots") or {}).items():
        if path not in paths:
            raise ContractError(
                name,
                f"x-preflight names slot {path!r}, which is not an argument",
                f"x-preflight/slots/{path}",
            )
        sources = tuple(cfg.get("sources", DEFAULT_ARG_SOURCES))
        if "observed" in sources and not cfg.get("measure"):
            raise ContractError(
                name, "an observed source needs the measure that observes it", f"x-preflight/slots/{path}"
            )
        confirm = cfg.get("confirm")
        by = confirm.get("by") if isinstance(confirm, Mapping) else ("user" if confirm else None)
        slots[path] = SlotConfig(
            sources=cast(tuple[Source, ...], sources),
            confirm=by == "user",
            approve=by == "approver",
            question=cfg.get("question"),
            label=cfg.get("label"),
            measure=cfg.get("measure"),
        )
    measures = {}
    for mname, spec in (raw.get("measures") or {}).items():
        reads = set()
        for param, value in (spec.get("args") or {}).items():
            if isinstance(value, str) and value.startswith("arg:"):
                if value[4:] not in paths:
                    raise ContractError(
                        name,
                        f"measure {mname!r} reads {value!r}, which is not an argument",
                        f"x-preflight/measures/{mname}/args/{param}",
                    )
                reads.add(value[4:])
        measures[mname] = MeasureSpec(
            mname,
            spec["lookup"],
            dict(spec.get("args") or {}),
            float(spec.get("max_age_s", 60)),
            frozenset(reads),
        )
    for path, cfg in slots.items():
        if cfg.measure is not None and cfg.measure not in measures:
            raise ContractError(
                name,
                f"slot {path!r} is observed by an undeclared measure {cfg.measure!r}",
                f"x-preflight/slots/{path}/measure",
            )
    conditions = []
    seen: set[str] = set()
    for i, cond in enumerate(raw.get("conditions") or []):
        where = f"x-preflight/conditions/{i}"
        if cond["id"] in seen:
            raise ContractError(name, f"condition id {cond['id']!r} is used twice", where)
        seen.add(cond["id"])
        check = _compile(name, cond["check"], f"{where}/check", paths, measures)
        if cond.get("recheck") and not any(r.startswith("measure:") for r in check.reads):
            # Re-checking what reads only the arguments would find what the grant already rests on.
            raise ContractError(name, "a condition marked recheck must read a measure", f"{where}/recheck")
        conditions.append(
            ConditionSpec(
                cond["id"],
                check,
                cond["on_false"],
                cond.get("text") or cond["check"],
                bool(cond.get("recheck")),
            )
        )
    approvals = []
    for i, item in enumerate(raw.get("extra_approval") or []):
        where = f"x-preflight/extra_approval/{i}"
        when = _compile(name, item["when"], f"{where}/when", paths, measures) if item.get("when") else None
        approvals.append(ApprovalSpec(item["id"], when, item.get("text") or f"Approval: {item['id']}"))
    consent = None
    raw_consent = raw.get("consent")
    if raw_consent is not None and raw_consent is not False:
        text = "Go ahead with this?"
        when = None
        if isinstance(raw_consent, str):
            text = raw_consent
        elif isinstance(raw_consent, Mapping):
            text = raw_consent.get("text") or text
            if raw_consent.get("when"):
                when = _compile(name, raw_consent["when"], "x-preflight/consent/when", paths, measures)
        consent = ConsentSpec(text, when)
    effect_key = None
    if raw.get("effect_key"):
        effect_key = _compile(name, raw["effect_key"], "x-preflight/effect_key", paths, measures)
        if any(not r.startswith("arg:") for r in effect_key.reads):
            # The key is computed from the granted payload alone, before anything is measured.
            raise ContractError(name, "effect_key may read only arguments", "x-preflight/effect_key")
    summary = None
    if raw.get("summary"):
        try:
            summary = compile_summary(raw["summary"], paths)
        except ValueError as exc:
            raise ContractError(name, f"summary: {exc}", "x-preflight/summary") from None
    return Extension(
        state_change=raw.get("state_change"),
        effects=tuple(raw.get("effects") or ()),
        prose_reviewed=bool(raw.get("prose_reviewed")),
        slots=slots,
        measures=measures,
        conditions=tuple(conditions),
        extra_approval=tuple(approvals),
        notices=tuple(raw.get("notices") or ()),
        consent=consent,
        effect_key=effect_key,
        summary=summary,
    )


class _Anything(frozenset[str]):
    def __contains__(self, item: object) -> bool:
        return True


def _compile(
    name: str, source: str, where: str, paths: frozenset[str], measures: Mapping[str, MeasureSpec]
) -> Expression:
    try:
        expr = compile_expression(source)
    except ExpressionError as exc:
        raise ContractError(name, exc.reason, where) from None
    for read in expr.reads:
        kind, _, target = read.partition(":")
        if kind == "measure" and target not in measures:
            raise ContractError(name, f"{source!r} reads an undeclared measure {target!r}", where)
        if kind == "arg" and target != "*" and target not in paths:
            raise ContractError(name, f"{source!r} reads {target!r}, which is not an argument", where)
    return expr


def _argument_paths(schema: Mapping[str, Any] | None) -> frozenset[str]:
    """Every dotted argument path the schema describes (nested objects included)."""
    paths: set[str] = set()

    def walk(node: Any, prefix: str, depth: int) -> None:
        if not isinstance(node, Mapping) or depth > 8:
            return
        for key in ("allOf", "oneOf", "anyOf"):
            for sub in node.get(key) or []:
                walk(sub, prefix, depth + 1)
        for key in ("then", "else"):
            walk(node.get(key), prefix, depth + 1)
        props = node.get("properties")
        if isinstance(props, Mapping):
            for pname, sub in props.items():
                path = f"{prefix}.{pname}" if prefix else pname
                paths.add(path)
                walk(sub, path, depth + 1)
        for req in node.get("required") or []:
            if isinstance(req, str):
                paths.add(f"{prefix}.{req}" if prefix else req)

    walk(schema, "", 0)
    return frozenset(paths)


def _prose_conditions(description: str) -> tuple[str, ...]:
    found = []
    for line in description.splitlines():
        if line.lstrip().startswith("["):
            continue  # labels are declared obligations, not prose
        for sentence in re.split(r"(?<=[.!?])\s+", line):
            if _PROSE_CONDITION.search(sentence):
                found.append(sentence.strip())
    return tuple(found)
