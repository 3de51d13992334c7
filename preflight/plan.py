"""The plan: what a preflight knows of a tool before any request, compiled once per contract and
checklist version and cached (a long-running server sees contract versions come and go)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .canonical import digest
from .checklist import FIXED_CHECKLIST, Checklist, FixedObligation
from .contract import SlotConfig, ToolContract
from .labels import Label
from .schema import ObjectNode, Property, compile_object
from .validation import PayloadValidator


class Bounded[K, V]:
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


_validators: Bounded[str, PayloadValidator] = Bounded(4096)


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
    label_consents: tuple[Label, ...]  # `[confirm] text` without a target: the user consents to the call
    arguments: frozenset[str]
    props: Mapping[str, PropInfo]  # by path: every property in the root's tree (branches, nested objects)
    nodes: Mapping[str, NodePlan]  # by node location
    notices: tuple[str, ...]


_plans: Bounded[tuple[str, str], Plan] = Bounded(4096)


def compile_plan(contract: ToolContract, rules: Sequence[Checklist] = ()) -> Plan:
    """Compile once per (contract digest, checklist versions); later calls return the cached plan."""
    stamp = "fixed@1;" + ",".join(sorted(c.stamp for c in rules))
    key = (contract.digest, stamp)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    schema = contract.input_schema
    root = compile_object(schema) if schema is not None else None
    labels = contract.labels.labels
    label_required = frozenset(lb.target for lb in labels if lb.tag == "required" and lb.target)
    props, nodes = _walk(contract, root, labels, label_required) if root is not None else ({}, {})
    plan = Plan(
        contract=contract,
        root=root,
        validator=_validator(schema) if schema is not None else None,
        rules=tuple(rules),
        checklist_version=f"{stamp};contract={contract.digest[7:19]}",
        fixed=FIXED_CHECKLIST,
        label_consents=tuple(lb for lb in labels if lb.tag == "confirm" and not lb.target),
        arguments=frozenset(props),
        props=props,
        nodes=nodes,
        notices=(*contract.extension.notices, *(lb.text for lb in labels if lb.tag == "notice")),
    )
    _plans.put(key, plan)
    return plan


def compile_node(node: ObjectNode, props: Mapping[str, PropInfo], label_required: frozenset[str]) -> NodePlan:
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


def _walk(
    contract: ToolContract, root: ObjectNode, labels: Sequence[Label], required: frozenset[str]
) -> tuple[dict[str, PropInfo], dict[str, NodePlan]]:
    """Every argument's PropInfo (by path) and every object node's NodePlan (by location)."""
    confirm = {lb.target for lb in labels if lb.tag == "confirm" and lb.target}
    props: dict[str, PropInfo] = {}
    nodes: dict[str, NodePlan] = {}

    def walk(node: ObjectNode) -> None:
        for prop in node.properties.values():
            cfg = contract.slot_config(prop.path)
            label = cfg.label or str(
                prop.schema.get("title") or prop.path.replace("_", " ").replace(".", " ")
            )
            tags = (("confirm",) if cfg.confirm or prop.path in confirm else ()) + (
                ("required",) if prop.path in required else ()
            )
            props[prop.path] = PropInfo(
                f"arg:{prop.path}",
                cfg,
                label,
                tags,
                "observed" in cfg.sources,
                "confirm" in tags,
            )
            if prop.child is not None:
                walk(prop.child)
        nodes[node.location] = compile_node(node, props, required)

    walk(root)
    return props, nodes
