"""Compile an `inputSchema` into the structure that decides which slots exist.

Only keywords that change *which arguments are obligatory* matter here (`required`, branches, conditionals,
dependencies, nesting). Keywords that only constrain a value (`minimum`, `pattern`, `format`, `enum`, ...)
are left to the payload validator. A structural keyword this module cannot interpret deterministically is
kept as an `Unsupported` entry, which becomes a slot that holds: never zero slots, never a silent pass.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Branch",
    "BranchGroup",
    "Conditional",
    "ObjectNode",
    "Property",
    "Selection",
    "Unsupported",
    "compile_object",
    "select_branches",
]

# Keywords that only constrain values or document them: the payload validator owns them.
_VALUE_KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "title",
        "description",
        "default",
        "examples",
        "type",
        "additionalProperties",
        "unevaluatedProperties",
        "patternProperties",
        "propertyNames",
        "maxProperties",
        "readOnly",
        "writeOnly",
        "deprecated",
        "format",
        "enum",
        "const",
        "nullable",
        "$defs",
        "definitions",
        "optional",
        "x-preflight",
    }
)
_STRUCTURAL = frozenset(
    {
        "properties",
        "required",
        "oneOf",
        "anyOf",
        "allOf",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependencies",
        "$ref",
    }
)


@dataclass(frozen=True, slots=True)
class Unsupported:
    location: str
    construct: str
    detail: str


@dataclass(frozen=True, slots=True)
class Property:
    name: str
    path: str  # dotted argument path, e.g. "shipping.city"
    schema: Mapping[str, Any]
    child: ObjectNode | None  # nested object with its own properties


@dataclass(frozen=True, slots=True)
class Branch:
    index: int
    required: frozenset[str]
    label: str


@dataclass(frozen=True, slots=True)
class BranchGroup:
    kind: Literal["oneOf", "anyOf"]
    location: str
    branches: tuple[Branch, ...]


@dataclass(frozen=True, slots=True)
class Conditional:
    location: str
    # discriminator name -> accepted values (const or enum); a name in `if_required` must be present
    tests: Mapping[str, tuple[Any, ...] | None]
    if_required: frozenset[str]
    then_required: frozenset[str]
    else_required: frozenset[str]


@dataclass(frozen=True, slots=True)
class ObjectNode:
    location: str
    path: str  # dotted prefix ("" for the root)
    properties: Mapping[str, Property]
    order: tuple[str, ...]
    required: frozenset[str]
    groups: tuple[BranchGroup, ...]
    conditionals: tuple[Conditional, ...]
    dependent_required: Mapping[str, frozenset[str]]
    unsupported: tuple[Unsupported, ...]


@dataclass(frozen=True, slots=True)
class Selection:
    """What branches, conditionals and dependencies add, given the names grounded so far."""

    required: frozenset[str]
    open_groups: tuple[BranchGroup, ...]  # nothing grounded picks a branch: ask which one
    conflicts: tuple[tuple[BranchGroup, tuple[int, ...]], ...]  # several complete branches of a oneOf
    waiting: frozenset[str]  # discriminators that must be settled before their conditional applies


class _Builder:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.problems: list[Unsupported] = []
        self.expanding: list[str] = ["#"]  # references being expanded on the way down: a repeat is a cycle

    def resolve(
        self, schema: Mapping[str, Any], location: str, seen: tuple[str, ...] = ()
    ) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return schema
        if not ref.startswith("#"):
            self.problems.append(Unsupported(location, "$ref", f"only local references are supported: {ref}"))
            return {}
        if ref in seen:
            self.problems.append(Unsupported(location, "$ref", f"recursive reference {ref}"))
            return {}
        target: Any = self.root
        for token in ref[1:].lstrip("/").split("/") if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or token not in target:
                self.problems.append(Unsupported(location, "$ref", f"unresolvable reference {ref}"))
                return {}
            target = target[token]
        if not isinstance(target, Mapping):
            self.problems.append(Unsupported(location, "$ref", f"reference {ref} is not a schema"))
            return {}
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        resolved = self.resolve(target, location, (*seen, ref))
        return {**resolved, **siblings} if siblings else resolved

    def node(self, schema: Mapping[str, Any], location: str, path: str) -> ObjectNode:
        acc = _Acc()
        start = len(self.problems)
        self.merge(schema, location, path, acc)
        return ObjectNode(
            location=location,
            path=path,
            properties=acc.properties,
            order=tuple(acc.properties),
            required=frozenset(acc.required),
            groups=tuple(acc.groups),
            conditionals=tuple(acc.conditionals),
            dependent_required={k: frozenset(v) for k, v in acc.dependent.items()},
            unsupported=tuple(self.problems[start:]),
        )

    def merge(self, schema: Mapping[str, Any], location: str, path: str, acc: _Acc) -> None:
        schema = self.resolve(schema, location)
        stype = schema.get("type")
        if stype is not None and stype != "object" and not (isinstance(stype, list) and "object" in stype):
            self.problems.append(Unsupported(location, "type", f"arguments must be an object, not {stype!r}"))
        for key in schema:
            if key in _STRUCTURAL or key in _VALUE_KEYWORDS:
                continue
            if key in {"not", "dependentSchemas", "minProperties", "$dynamicRef", "$recursiveRef"}:
                self.problems.append(
                    Unsupported(
                        f"{location}/{key}",
                        key,
                        f"'{key}' decides which arguments are needed in a way this engine does not interpret",
                    )
                )
            # any other keyword is annotation or an unknown extension: it cannot add obligations silently,
            # because the whole payload is validated against the original schema anyway
        props = schema.get("properties", {})
        if isinstance(props, Mapping):
            for name, sub in props.items():
                acc.properties[name] = self.prop(name, sub, f"{location}/properties/{_esc(name)}", path)
        required = schema.get("required", [])
        if isinstance(required, list):
            acc.required.update(r for r in required if isinstance(r, str))
        for name in acc.required:
            if name not in acc.properties:
                # Required but undescribed: still an obligation, with an empty schema.
                acc.properties[name] = Property(name, _join(path, name), {}, None)
        for i, sub in enumerate(schema.get("allOf", []) or []):
            if isinstance(sub, Mapping):
                self.merge(sub, f"{location}/allOf/{i}", path, acc)
        for kind in ("oneOf", "anyOf"):
            alts = schema.get(kind)
            if isinstance(alts, list):
                group = self.group(kind, alts, f"{location}/{kind}", path, acc)
                if group is not None:
                    acc.groups.append(group)
        if "if" in schema:
            cond = self.conditional(schema, location, path, acc)
            if cond is not None:
                acc.conditionals.append(cond)
        dep = schema.get("dependentRequired")
        legacy = schema.get("dependencies")
        for source_name, table in (("dependentRequired", dep), ("dependencies", legacy)):
            if not isinstance(table, Mapping):
                continue
            for name, needs in table.items():
                if isinstance(needs, list) and all(isinstance(n, str) for n in needs):
                    acc.dependent.setdefault(name, set()).update(needs)
                else:
                    self.problems.append(
                        Unsupported(
                            f"{location}/{source_name}/{_esc(name)}",
                            source_name,
                            "schema-valued dependencies are not interpreted",
                        )
                    )

    def prop(self, name: str, sub: Any, location: str, path: str) -> Property:
        if "." in name:
            # Slot keys and payload paths are dotted; such a name could not be told from a nested one.
            self.problems.append(Unsupported(location, "properties", f"property name {name!r} contains '.'"))
        if not isinstance(sub, Mapping):
            return Property(name, _join(path, name), {}, None)
        ref = sub.get("$ref")
        if isinstance(ref, str) and ref in self.expanding:
            self.problems.append(Unsupported(location, "$ref", f"recursive reference {ref}"))
            return Property(name, _join(path, name), {}, None)
        if len(self.expanding) > 16:
            self.problems.append(Unsupported(location, "$ref", "references nest deeper than 16 levels"))
            return Property(name, _join(path, name), {}, None)
        resolved = self.resolve(sub, location)
        child = None
        if (
            isinstance(resolved.get("properties"), Mapping)
            and resolved["properties"]
            and _is_object(resolved)
        ):
            self.expanding.append(ref if isinstance(ref, str) else "")
            try:
                child = self.node(resolved, location, _join(path, name))
            finally:
                self.expanding.pop()
        return Property(name, _join(path, name), resolved, child)

    def group(
        self, kind: Literal["oneOf", "anyOf"], alts: list[Any], location: str, path: str, acc: _Acc
    ) -> BranchGroup | None:
        branches = []
        for i, alt in enumerate(alts):
            where = f"{location}/{i}"
            alt = self.resolve(alt, where) if isinstance(alt, Mapping) else alt
            extra = (
                set(alt) - {"required", "properties", "title", "description", "type", "additionalProperties"}
                if isinstance(alt, Mapping)
                else {"?"}
            )
            if not isinstance(alt, Mapping) or extra or not isinstance(alt.get("required", []), list):
                self.problems.append(
                    Unsupported(where, kind, "only branches of `required` names are interpreted")
                )
                return None
            for name, sub in (alt.get("properties") or {}).items():
                if name not in acc.properties:
                    acc.properties[name] = self.prop(name, sub, f"{where}/properties/{_esc(name)}", path)
            names = frozenset(r for r in alt.get("required", []) if isinstance(r, str))
            for name in names:
                acc.properties.setdefault(name, Property(name, _join(path, name), {}, None))
            label = str(alt.get("title") or alt.get("description") or " and ".join(sorted(names)) or "none")
            branches.append(Branch(i, names, label))
        return BranchGroup(kind, location, tuple(branches))

    def conditional(
        self, schema: Mapping[str, Any], location: str, path: str, acc: _Acc
    ) -> Conditional | None:
        test = self.resolve(schema["if"], f"{location}/if") if isinstance(schema["if"], Mapping) else None
        if test is None or set(test) - {"properties", "required", "type"}:
            self.problems.append(
                Unsupported(f"{location}/if", "if", "only `if` on const/enum discriminators is interpreted")
            )
            return None
        tests: dict[str, tuple[Any, ...] | None] = {}
        for name, sub in (test.get("properties") or {}).items():
            if not isinstance(sub, Mapping) or set(sub) - {"const", "enum", "type", "description"}:
                self.problems.append(
                    Unsupported(
                        f"{location}/if/properties/{_esc(name)}",
                        "if",
                        "the discriminator must be tested with const or enum",
                    )
                )
                return None
            if "const" in sub:
                tests[name] = (sub["const"],)
            elif isinstance(sub.get("enum"), list):
                tests[name] = tuple(sub["enum"])
            else:
                tests[name] = None
        if_required = frozenset(r for r in test.get("required", []) if isinstance(r, str))
        for name in if_required:
            tests.setdefault(name, None)
        branches = []
        for key in ("then", "else"):
            sub = schema.get(key, {})
            sub = self.resolve(sub, f"{location}/{key}") if isinstance(sub, Mapping) else None
            if sub is None or set(sub) - {"required", "properties", "description"}:
                self.problems.append(
                    Unsupported(f"{location}/{key}", key, "only `required` in then/else is interpreted")
                )
                return None
            for name, psub in (sub.get("properties") or {}).items():
                acc.properties.setdefault(
                    name, self.prop(name, psub, f"{location}/{key}/properties/{name}", path)
                )
            names = frozenset(r for r in sub.get("required", []) if isinstance(r, str))
            for name in names:
                acc.properties.setdefault(name, Property(name, _join(path, name), {}, None))
            branches.append(names)
        for name in tests:
            acc.properties.setdefault(name, Property(name, _join(path, name), {}, None))
        return Conditional(location, tests, if_required, branches[0], branches[1])


class _Acc:
    def __init__(self) -> None:
        self.properties: dict[str, Property] = {}
        self.required: set[str] = set()
        self.groups: list[BranchGroup] = []
        self.conditionals: list[Conditional] = []
        self.dependent: dict[str, set[str]] = {}


def compile_object(schema: Mapping[str, Any]) -> ObjectNode:
    """Compile a root `inputSchema` (already checked against its metaschema)."""
    return _Builder(schema).node(schema, "#", "")


def select_branches(
    node: ObjectNode,
    grounded: Collection[str],
    values: Mapping[str, Any],
    answered: Mapping[str, int],
    expected: Collection[str],
) -> Selection:
    """Pick branches by counting grounded names; only grounded values may pick a branch.

    `answered` maps a group's location to the branch index a person chose, for groups nothing else picks.
    `expected` are names that will be settled before execution (required, or proposed by the agent): a
    conditional on such a discriminator waits for it instead of treating it as absent.
    """
    required: set[str] = set()
    open_groups: list[BranchGroup] = []
    conflicts: list[tuple[BranchGroup, tuple[int, ...]]] = []
    grounded = frozenset(grounded)
    for group in node.groups:
        complete = tuple(b.index for b in group.branches if b.required <= grounded)
        partial = tuple(
            b.index for b in group.branches if b.required & set(grounded) and b.index not in complete
        )
        if complete:
            if group.kind == "oneOf" and len(complete) > 1:
                conflicts.append((group, complete))
            continue
        chosen: int | None = None
        if len(partial) == 1:
            chosen = partial[0]
        elif group.location in answered:
            chosen = answered[group.location]
        if chosen is None or not 0 <= chosen < len(group.branches):
            open_groups.append(group)
        else:
            required |= group.branches[chosen].required
    waiting: set[str] = set()
    for cond in node.conditionals:
        outcome = _test(cond, grounded, values, expected)
        if outcome is None:
            waiting |= {n for n in cond.tests if n not in grounded}
        else:
            required |= cond.then_required if outcome else cond.else_required
    # Dependencies chain (a needs b, b needs c): close over names that become required and are grounded.
    for name in sorted(grounded):
        required |= node.dependent_required.get(name, frozenset())
    return Selection(frozenset(required), tuple(open_groups), tuple(conflicts), frozenset(waiting))


def _test(
    cond: Conditional, grounded: Collection[str], values: Mapping[str, Any], expected: Collection[str]
) -> bool | None:
    """Evaluate `if` on grounded discriminators; None while an expected discriminator is still open."""
    for name, accepted in cond.tests.items():
        if name not in grounded:
            if name in expected:
                return None
            if name in cond.if_required:
                return False  # absent for good: `if` fails, `else` applies, as a validator would decide
            continue
        if accepted is not None and not any(_same(values.get(name), a) for a in accepted):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1, but 1 is 1.0
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _is_object(schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    return t is None or t == "object" or (isinstance(t, list) and "object" in t)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
