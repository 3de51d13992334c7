"""Compile an `inputSchema` into the structure that decides which slots exist.

Only keywords that change *which arguments are obligatory* matter here (`required`, branches, conditionals,
dependencies, nesting). Keywords that only constrain a value (`minimum`, `pattern`, `format`, `enum`, ...)
are left to the payload validator. References are resolved by `referencing`, as the validator resolves them
(`$anchor`, `$id` bases, escaped pointers), in the dialect the schema declares. A keyword this module cannot
interpret is kept as an `Unsupported` entry: one that only constrains acceptable objects (`not`,
`minProperties`, ...) is settled when the grounded payload validates against the whole schema and holds
otherwise; an unresolvable reference always holds. Never zero slots, never a silent pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing import Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT201909, DRAFT202012, specification_with

if TYPE_CHECKING:
    from referencing._core import Resolved, Resolver  # documented as referencing's Resolver / Resolved

__all__ = [
    "Branch",
    "BranchGroup",
    "Conditional",
    "ObjectNode",
    "Property",
    "Selection",
    "Unsupported",
    "compile_object",
    "find_property",
    "select_branches",
]


@dataclass(frozen=True, slots=True)
class Unsupported:
    location: str
    construct: str
    detail: str
    # Only constrains which argument objects are acceptable: a grounded payload that validates against the
    # whole schema satisfies it. Otherwise (an unresolvable reference) nobody can say what it requires.
    value_only: bool = False


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


# Keys of a branch or a then/else that only name or identify it: they add no obligation.
_IDENTIFYING = frozenset(
    {
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "examples",
        "deprecated",
    }
)
# Keywords that constrain which argument objects are acceptable without saying which argument is missing.
# A grounded payload that validates against the whole schema satisfies them: the validator decides.
_VALUE_ONLY = frozenset(
    {
        "not",
        "dependentSchemas",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "patternProperties",
        "unevaluatedProperties",
        "const",
        "enum",
        "$dynamicRef",
        "$recursiveRef",
    }
)
# How often one schema may be expanded inside itself (a tree's node within a node) before its deeper
# members are left to the validator as one value.
_SELF_NESTING = 2


# A resolver, or None for the document's own (built only when a reference needs it).
type _Scope = Resolver[Any] | None


class _Builder:
    def __init__(self, root: Mapping[str, Any]) -> None:
        # The dialect the schema declares (`$schema`), Draft 2020-12 when it declares none or an unknown one.
        dialect = root.get("$schema")
        self.spec = specification_with(dialect if isinstance(dialect, str) else "", default=DRAFT202012)
        self.root = root
        self.resolver: Resolver[Any] | None = None  # built at the first reference: most schemas have none
        # Before 2019-09 a `$ref` replaces its siblings; since then they apply beside it.
        self.ref_siblings = self.spec in (DRAFT202012, DRAFT201909)
        self.problems: list[Unsupported] = []
        self.expanding: list[int] = [id(root)]  # targets being expanded on the way down: a repeat is a cycle

    def document(self) -> Resolver[Any]:
        """The resolver of the whole document (`None` in a scope stands for it)."""
        if self.resolver is None:
            resource = self.spec.create_resource(self.root)
            base = resource.id() if isinstance(self.root.get("$id"), str) else None
            # The metaschemas are there for schemas that refer to them, as a validator would find them.
            registry = METASCHEMAS.with_resource(base or "", resource)
            # An `$id` or anchor that is no string stops the crawl: only plain pointers resolve then.
            with contextlib.suppress(AttributeError, TypeError, ValueError):
                registry = registry.crawl()
            self.resolver = registry.resolver(base_uri=base or "")
        return self.resolver

    def enter(self, schema: Mapping[str, Any], scope: _Scope) -> _Scope:
        """The resolver for references inside `schema`: its own `$id` changes the base URI."""
        if "$id" not in schema and "id" not in schema:
            return scope
        try:
            resource = Resource.from_contents(schema, default_specification=self.spec)
            return (scope or self.document()).in_subresource(resource)
        except (AttributeError, TypeError, ValueError):
            return scope  # an `$id` that is no URI: the metaschema check refuses it; nothing to base on

    def limits(self, location: str, construct: str, detail: str) -> None:
        """A construct that only limits which argument objects are acceptable: the whole-payload validation
        decides it."""
        self.problems.append(Unsupported(location, construct, detail, value_only=True))

    def lookup(self, ref: str, location: str, scope: _Scope) -> Resolved[Any] | None:
        try:
            return (scope or self.document()).lookup(ref)
        except (Unresolvable, AttributeError, TypeError, ValueError):
            # Not in this document (a remote schema) or nowhere: nobody can say what it requires.
            self.problems.append(Unsupported(location, "$ref", f"unresolvable reference {ref}"))
            return None

    def view(
        self, schema: Mapping[str, Any], location: str, scope: _Scope, seen: tuple[int, ...] = ()
    ) -> tuple[Mapping[str, Any], _Scope]:
        """`schema` with its chain of references followed: what one value is asked and matched against."""
        scope = self.enter(schema, scope)
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return schema, scope
        found = self.lookup(ref, location, scope)
        if found is None:
            return {}, scope
        target = found.contents
        if id(target) in seen:
            # references that lead back to themselves without describing anything: no payload satisfies them
            self.problems.append(Unsupported(location, "$ref", f"reference loop through {ref}"))
            return {}, scope
        if not isinstance(target, Mapping):
            return {}, found.resolver  # `true` or `false`: the validator decides
        resolved, inner = self.view(target, location, found.resolver, (*seen, id(target)))
        siblings = {k: v for k, v in schema.items() if k != "$ref"} if self.ref_siblings else {}
        return ({**resolved, **siblings} if siblings else resolved), inner

    def node(self, schema: Mapping[str, Any], location: str, path: str, scope: _Scope) -> ObjectNode:
        acc = _Acc()
        start = len(self.problems)
        self.merge(schema, location, path, acc, scope, ())
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

    def merge(
        self,
        schema: Mapping[str, Any],
        location: str,
        path: str,
        acc: _Acc,
        scope: _Scope,
        seen: tuple[int, ...],
    ) -> None:
        scope = self.enter(schema, scope)
        ref = schema.get("$ref")
        if isinstance(ref, str):
            # A reference applies its target here, like one more `allOf` entry.
            found = self.lookup(ref, location, scope)
            if found is not None and isinstance(found.contents, Mapping):
                if id(found.contents) in seen:
                    # the object applies itself at the same level: a loop, not a nesting
                    self.problems.append(Unsupported(location, "$ref", f"reference loop through {ref}"))
                else:
                    self.merge(
                        found.contents, location, path, acc, found.resolver, (*seen, id(found.contents))
                    )
            if not self.ref_siblings:
                return
        if not _is_object(schema):
            self.limits(location, "type", f"arguments must be an object, not {schema['type']!r}")
        for key in schema:
            if key in _VALUE_ONLY:
                self.limits(
                    f"{location}/{key}",
                    key,
                    f"'{key}' limits the acceptable arguments in a way this engine does not interpret",
                )
            # any other keyword is a value constraint, an annotation or an unknown extension: it cannot add
            # obligations silently, because the whole payload is validated against the original schema anyway
        props = schema.get("properties", {})
        if isinstance(props, Mapping):
            for name, sub in props.items():
                acc.properties[name] = self.prop(
                    name, sub, f"{location}/properties/{_esc(name)}", path, scope
                )
        required = schema.get("required", [])
        if isinstance(required, list):
            acc.required.update(r for r in required if isinstance(r, str))
        for name in acc.required:
            if name not in acc.properties:
                # Required but undescribed: still an obligation, with an empty schema.
                acc.properties[name] = Property(name, _join(path, name), {}, None)
        for i, sub in enumerate(schema.get("allOf", []) or []):
            if isinstance(sub, Mapping):
                self.merge(sub, f"{location}/allOf/{i}", path, acc, scope, seen)
        for kind in ("oneOf", "anyOf"):
            alts = schema.get(kind)
            if isinstance(alts, list):
                group = self.group(kind, alts, f"{location}/{kind}", path, acc, scope)
                if group is not None:
                    acc.groups.append(group)
        if "if" in schema:
            cond = self.conditional(schema, location, path, acc, scope)
            if cond is not None:
                acc.conditionals.append(cond)
        for source_name in ("dependentRequired", "dependencies"):
            table = schema.get(source_name)
            if not isinstance(table, Mapping):
                continue
            for name, needs in table.items():
                if isinstance(needs, list) and all(isinstance(n, str) for n in needs):
                    acc.dependent.setdefault(name, set()).update(needs)
                    # Named by a dependency, so an argument of this object even where `properties` omits it:
                    # its value must reach the dependency, not pass as an undeclared extra.
                    for dep in (name, *needs):
                        acc.properties.setdefault(dep, Property(dep, _join(path, dep), {}, None))
                else:
                    self.limits(
                        f"{location}/{source_name}/{_esc(name)}",
                        source_name,
                        "schema-valued dependencies are not interpreted",
                    )

    def prop(self, name: str, sub: Any, location: str, path: str, scope: _Scope) -> Property:
        if "." in name:
            # Slot keys and payload paths are dotted; such a name could not be told from a nested one.
            self.problems.append(Unsupported(location, "properties", f"property name {name!r} contains '.'"))
        if not isinstance(sub, Mapping):
            return Property(name, _join(path, name), {}, None)
        if len(self.expanding) > 16:
            self.limits(location, "$ref", "references nest deeper than 16 levels")
            return Property(name, _join(path, name), {}, None)
        start = len(self.problems)
        resolved, _ = self.view(sub, location, scope)
        if len(self.problems) > start:
            return Property(name, _join(path, name), resolved, None)  # the view says why it cannot be read
        target = self.target(sub, scope)
        if target is not None and self.expanding.count(target) >= _SELF_NESTING:
            # A schema that contains itself below this property: the value is checked whole by the validator.
            self.limits(location, "$ref", "recursive reference")
            return Property(name, _join(path, name), resolved, None)
        child = None
        if _is_object(resolved):
            self.expanding.append(target if target is not None else id(sub))
            try:
                node = self.node(sub, location, _join(path, name), scope)
            finally:
                self.expanding.pop()
            if node.properties:
                child = node
            else:
                # No members to ask for: a leaf value whose constraints are the validator's.
                self.problems[start:] = [p for p in self.problems[start:] if not p.value_only]
        return Property(name, _join(path, name), resolved, child)

    def target(self, sub: Mapping[str, Any], scope: _Scope) -> int | None:
        """Which schema a property's `$ref` lands on, to see a cycle before expanding it."""
        ref = sub.get("$ref")
        if not isinstance(ref, str):
            return None
        try:
            return id((self.enter(sub, scope) or self.document()).lookup(ref).contents)
        except (Unresolvable, AttributeError, TypeError, ValueError):
            return None

    def group(
        self,
        kind: Literal["oneOf", "anyOf"],
        alts: list[Any],
        location: str,
        path: str,
        acc: _Acc,
        scope: _Scope,
    ) -> BranchGroup | None:
        branches = []
        resolved_alts = []
        for i, alt in enumerate(alts):
            where = f"{location}/{i}"
            inner = scope
            if isinstance(alt, Mapping):
                alt, inner = self.view(alt, where, scope)
            extra = (
                set(alt) - {"required", "properties", "type", "additionalProperties"} - _IDENTIFYING
                if isinstance(alt, Mapping)
                else {"?"}
            )
            if not isinstance(alt, Mapping) or extra or not isinstance(alt.get("required", []), list):
                self.limits(where, kind, "only branches of `required` names are interpreted")
                return None
            resolved_alts.append((i, where, alt, inner))
        for i, where, alt, inner in resolved_alts:
            for name, sub in (alt.get("properties") or {}).items():
                if name not in acc.properties:
                    acc.properties[name] = self.prop(
                        name, sub, f"{where}/properties/{_esc(name)}", path, inner
                    )
            names = frozenset(r for r in alt.get("required", []) if isinstance(r, str))
            for name in names:
                acc.properties.setdefault(name, Property(name, _join(path, name), {}, None))
            label = str(alt.get("title") or alt.get("description") or " and ".join(sorted(names)) or "none")
            branches.append(Branch(i, names, label))
        return BranchGroup(kind, location, tuple(branches))

    def conditional(
        self, schema: Mapping[str, Any], location: str, path: str, acc: _Acc, scope: _Scope
    ) -> Conditional | None:
        test = (
            self.view(schema["if"], f"{location}/if", scope)[0] if isinstance(schema["if"], Mapping) else None
        )
        if test is None or set(test) - {"properties", "required", "type"} - _IDENTIFYING:
            self.limits(f"{location}/if", "if", "only `if` on const/enum discriminators is interpreted")
            return None
        tests: dict[str, tuple[Any, ...] | None] = {}
        for name, sub in (test.get("properties") or {}).items():
            if not isinstance(sub, Mapping) or set(sub) - {"const", "enum", "type", "description"}:
                self.limits(
                    f"{location}/if/properties/{_esc(name)}",
                    "if",
                    "the discriminator must be tested with const or enum",
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
            inner = scope
            if isinstance(sub, Mapping):
                sub, inner = self.view(sub, f"{location}/{key}", scope)
            else:
                sub = None
            if sub is None or set(sub) - {"required", "properties"} - _IDENTIFYING:
                self.limits(f"{location}/{key}", key, "only `required` in then/else is interpreted")
                return None
            for name, psub in (sub.get("properties") or {}).items():
                acc.properties.setdefault(
                    name, self.prop(name, psub, f"{location}/{key}/properties/{_esc(name)}", path, inner)
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


def find_property(node: ObjectNode, path: str) -> tuple[Property, bool] | None:
    """The declared property at a dotted argument path, and whether its object requires it; None if not
    declared."""
    head, _, rest = path.partition(".")
    prop = node.properties.get(head)
    if prop is None:
        return None
    if not rest:
        return prop, head in node.required
    return find_property(prop.child, rest) if prop.child is not None else None


def compile_object(schema: Mapping[str, Any]) -> ObjectNode:
    """Compile a root `inputSchema` (already checked against its metaschema)."""
    return _Builder(schema).node(schema, "#", "", None)


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
    for cond in node.conditionals:
        outcome = _test(cond, grounded, values, expected)
        # None: an expected discriminator is still open, and its own slot asks for it
        if outcome is not None:
            required |= cond.then_required if outcome else cond.else_required
    # Dependencies chain (a needs b, b needs c): close over names that become required and are grounded.
    for name in sorted(grounded):
        required |= node.dependent_required.get(name, frozenset())
    return Selection(frozenset(required), tuple(open_groups), tuple(conflicts))


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
