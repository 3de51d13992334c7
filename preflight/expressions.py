"""Condition expressions: CEL, compiled once, evaluated against settled values only.

CEL is used because it cannot loop forever, has no I/O and no access to Python objects; it is never `eval`.
An expression may read four roots:

- ``arg``       the tool call's arguments (``arg.amount``, ``arg.payee.iban``)
- ``measure``   system lookups by name (``measure.balance``)
- ``principal`` the identity the call is made for (a string)
- ``env``       deployment facts by key (``env.region``)

`Expression.reads` tells the engine what must be settled before the expression can be evaluated. It is
found from the source text: ``arg.a.b`` reads ``arg:a.b``; ``measure.balance.cents`` reads ``measure:balance``
(a measure is one lookup, whatever part of its value is used); ``env.region`` reads ``env:region``; any use
of ``principal`` reads ``principal``. A root used as a whole (``size(arg)``, ``arg["x"]``) reads
``arg:*`` (or ``measure:*``, ``env:*``): such an expression depends on every value under that root.

Evaluation fails closed: any runtime failure or a non-boolean result raises `ExpressionError`, never `False`,
because `False` would be taken as an answer.

List helpers, for positional comparisons the CEL library has no function for (no `lists.range`, no
`zip`, no `distinct`, no `indexOf`); each fails the expression (`ExpressionError`) on anything but lists:

- ``zip(a, b)``        the pairs ``[a[i], b[i]]``; lists of different lengths fail the expression:
                       ``zip(arg.item_ids, arg.new_item_ids).all(p, p[0] != p[1])``
- ``indices(a)``       ``[0, 1, ..., size(a) - 1]``: ``indices(a).all(i, a[i] <= b[i])``
- ``distinct(a)``      ``a`` without repeats, first occurrences in order: ``size(distinct(a)) == size(a)``
- ``index_of(a, x)``   the first position of ``x`` in ``a``, -1 when absent
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import cel

from preflight.errors import ExpressionError

__all__ = ["ROOTS", "Expression", "compile_expression", "evaluate", "evaluate_key"]

ROOTS = ("arg", "measure", "principal", "env")


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{name} takes lists, not {type(value).__name__}")
    return value


def _zip(a: Any, b: Any) -> list[list[Any]]:
    first, second = _list(a, "zip"), _list(b, "zip")
    if len(first) != len(second):
        raise ValueError(f"zip of lists of {len(first)} and {len(second)} items")
    return [[x, y] for x, y in zip(first, second, strict=True)]


def _indices(a: Any) -> list[int]:
    return list(range(len(_list(a, "indices"))))


def _distinct(a: Any) -> list[Any]:
    out: list[Any] = []
    for item in _list(a, "distinct"):
        # JSON equality, as CEL's `in` would judge it: true is not 1
        if not any(type(item) is type(seen) and item == seen for seen in out):
            out.append(item)
    return out


def _index_of(a: Any, x: Any) -> int:
    for i, item in enumerate(_list(a, "index_of")):
        if type(item) is type(x) and item == x:
            return i
    return -1


HELPERS: Mapping[str, Any] = MappingProxyType(
    {"zip": _zip, "indices": _indices, "distinct": _distinct, "index_of": _index_of}
)

_IDENT = r"[A-Za-z_]\w*"
# `(?<![\w.])` keeps `x.arg` (a field called "arg" of something else) from counting as the root.
_ROOT_CHAIN = re.compile(
    rf"(?<![\w.])(arg|measure|principal|env)(?!\w)((?:\s*\.\s*{_IDENT})*)(\s*\()?",
)
_SEGMENT = re.compile(_IDENT)
# Names bound by CEL's comprehension macros show up in `Program.variables()` but are not inputs.
_BOUND = re.compile(rf"\.\s*(?:all|exists_one|exists|map|filter)\s*\(\s*({_IDENT})\s*,")
_STRING_PREFIX = re.compile(r"(?<!\w)[rRbB]{1,2}$")


@dataclass(frozen=True, slots=True)
class Expression:
    source: str
    reads: frozenset[str]
    program: Any = field(compare=False, repr=False, hash=False)
    # The roots it reads: only these are handed to CEL, whose cost grows with the size of its input.
    roots: frozenset[str] = field(default=frozenset(ROOTS), compare=False, repr=False, hash=False)
    # The list helpers it calls: only then is a CEL context with functions built for it.
    helpers: frozenset[str] = field(default=frozenset(), compare=False, repr=False, hash=False)


def compile_expression(source: str) -> Expression:
    """Compile `source`, rejecting syntax errors and names outside `ROOTS`."""
    if not source.strip():
        raise ExpressionError(source, "is empty")
    try:
        program = cel.compile(source)
    except ValueError as error:
        raise ExpressionError(source, f"does not parse: {error}") from error
    code = _blank_literals(source)
    bound = frozenset(_BOUND.findall(code))
    names = set(program.variables()) - bound
    unknown = sorted(names - set(ROOTS))
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        raise ExpressionError(
            source, f"reads unknown name(s) {listed}; expressions may read {', '.join(ROOTS)}"
        )
    reads = _reads(code)
    # Belt and braces: should the text scan ever miss a root the compiler saw, assume the whole root is read,
    # so the expression waits for more rather than being evaluated too early.
    for root in names:
        if not any(read == root or read.startswith(f"{root}:") for read in reads):
            reads.add("principal" if root == "principal" else f"{root}:*")
    roots = frozenset(read.partition(":")[0] for read in reads)
    helpers = frozenset(program.functions()) & HELPERS.keys()
    return Expression(source, frozenset(reads), program, roots, helpers)


def evaluate(
    expr: Expression,
    *,
    args: Mapping[str, Any],
    measures: Mapping[str, Any],
    principal: str = "",
    env: Mapping[str, Any] | None = None,
) -> bool:
    """The boolean value of `expr`; raises `ExpressionError` instead of guessing when it has none."""
    result = _execute(expr, args=args, measures=measures, principal=principal, env=env)
    if not isinstance(result, bool):
        raise ExpressionError(expr.source, f"result is {type(result).__name__} {result!r}, not a boolean")
    return result


def evaluate_key(expr: Expression, *, args: Mapping[str, Any], principal: str = "") -> str:
    """The string value of a key expression (an `effect_key`); an int is spelled as text. Anything else,
    a bool or a float included, raises `ExpressionError`: two spellings of one key would be two locks."""
    result = _execute(expr, args=args, measures={}, principal=principal, env=None)
    if isinstance(result, int) and not isinstance(result, bool):
        return str(result)
    if not isinstance(result, str) or not result:
        raise ExpressionError(expr.source, f"result is {type(result).__name__} {result!r}, not a key")
    return str(result)


def _execute(
    expr: Expression,
    *,
    args: Mapping[str, Any],
    measures: Mapping[str, Any],
    principal: str,
    env: Mapping[str, Any] | None,
) -> Any:
    # A root the expression never names cannot change its value; converting it would be wasted work.
    roots = expr.roots
    context: dict[str, Any] = {}
    if "arg" in roots:
        context["arg"] = _plain(args)
    if "measure" in roots:
        context["measure"] = _plain(measures)
    if "principal" in roots:
        context["principal"] = principal
    if "env" in roots:
        context["env"] = _plain(env) if env is not None else {}
    try:
        if expr.helpers:
            functions = {name: HELPERS[name] for name in expr.helpers}
            result = expr.program.execute(cel.Context(variables=context, functions=functions))
        else:
            result = expr.program.execute(context)
    except KeyError as error:
        raise ExpressionError(expr.source, f"no value for {error}") from error
    except TypeError as error:
        raise ExpressionError(expr.source, f"type mismatch: {error}") from error
    # CEL reports undefined names, overflow, division by zero and unconvertible inputs with assorted
    # exception types; each of them means there is no answer.
    except Exception as error:
        raise ExpressionError(expr.source, f"failed: {type(error).__name__}: {error}") from error
    return result


def _plain(values: Mapping[str, Any]) -> Mapping[str, Any]:
    # cel converts dict and mappingproxy natively; other Mapping types it rejects, so copy only those.
    if isinstance(values, dict | MappingProxyType):
        return values
    return dict(values)


def _reads(code: str) -> set[str]:
    reads: set[str] = set()
    for match in _ROOT_CHAIN.finditer(code):
        root = match.group(1)
        segments = _SEGMENT.findall(match.group(2))
        if match.group(3) and segments:
            segments.pop()  # `arg.name.startsWith(...)`: the last segment is a method, not a field
        if root == "principal":
            reads.add("principal")
        elif not segments:
            reads.add(f"{root}:*")
        elif root == "arg":
            reads.add("arg:" + ".".join(segments))
        else:
            reads.add(f"{root}:{segments[0]}")
    return reads


def _blank_literals(source: str) -> str:
    """`source` with every string/bytes literal replaced by ``""`` and comments removed.

    Only called on source CEL has accepted, so literals are known to be terminated.
    """
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        char = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
            continue
        if char not in "'\"":
            out.append(char)
            i += 1
            continue
        prefix = _STRING_PREFIX.search(source, 0, i)
        raw = prefix is not None and "r" in prefix.group().lower()
        quote = char * 3 if source.startswith(char * 3, i) else char
        i += len(quote)
        while i < n and not source.startswith(quote, i):
            i += 2 if source[i] == "\\" and not raw else 1
        i += len(quote)
        out.append('""')
    return "".join(out)
