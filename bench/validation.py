"""Payload validation on the catalogs' own payloads: preflight's PayloadValidator, jsonschema, jsonschema-rs.

    .venv/bin/python bench/validation.py            # full run
    .venv/bin/python bench/validation.py --quick    # fewer iterations

Every tool of the shared catalogs gives one valid payload (the grounded request's arguments, as
bench/engine.py builds them) and up to two invalid ones (a required argument left out, the first argument
given the wrong type). Per payload, each validator answers "is it valid?" and, for an invalid payload, lists
its errors, as the engine does. Validators are built once per schema, outside the timing. PayloadValidator
asks jsonschema-rs first and jsonschema for every refusal and message; "jsonschema-rs" is it alone.

Also printed: whether jsonschema-rs gives the same verdicts and the same error messages as jsonschema, which
write the messages records show.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "preflight")]

import jsonschema  # noqa: E402
from catalog_util import CATALOGS, catalog_tools, catalogs_present, grounded_request  # noqa: E402
from jsonschema.validators import validator_for  # noqa: E402
from machine import speed_line  # noqa: E402

from preflight.validation import NO_RETRIEVAL, PayloadValidator  # noqa: E402

try:
    import jsonschema_rs  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    jsonschema_rs = None


def _no_retrieval(uri: str) -> Any:
    raise ValueError(f"no retrieval: {uri}")


def payloads(schema: dict[str, Any], valid: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("valid", valid)]
    required = [r for r in schema.get("required") or [] if isinstance(r, str) and r in valid]
    if required:
        out.append(("invalid", {k: v for k, v in valid.items() if k != required[0]}))
    props = schema.get("properties") or {}
    first = next((k for k in valid if k in props), None)
    if first is not None:
        wrong: Any = 12345 if isinstance(valid[first], str) else "not-this-type"
        out.append(("invalid", {**valid, first: wrong}))
    return out


def per_call_ns(call: Callable[[], Any], iterations: int) -> float:
    for _ in range(max(1, iterations // 10)):
        call()
    clock = time.perf_counter_ns
    best = float("inf")
    for _ in range(3):  # the fastest of three runs: others' load only ever adds time
        t0 = clock()
        for _ in range(iterations):
            call()
        best = min(best, (clock() - t0) / iterations)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    iterations = 100 if args.quick else 1_000
    if not catalogs_present():
        raise SystemExit(f"no catalogs at {CATALOGS}")
    gc.collect()
    print(f"Python {sys.version.split()[0]}, single thread, time.perf_counter_ns")
    print(speed_line())
    rs_version = _version("jsonschema-rs") if jsonschema_rs else "not installed"
    print(f"jsonschema {_version('jsonschema')}, jsonschema-rs {rs_version}\n")

    times: dict[tuple[str, str], list[float]] = {}
    same_verdict = same_messages = compared = invalid_count = 0
    differing: list[str] = []
    for server, tool in catalog_tools():
        schema = tool.get("inputSchema") or {}
        preflight_v = PayloadValidator(schema)
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        plain = cls(schema, format_checker=cls.FORMAT_CHECKER, registry=NO_RETRIEVAL)
        rs = None
        if jsonschema_rs is not None:
            try:
                rs = jsonschema_rs.validator_for(schema, validate_formats=True, retriever=_no_retrieval)
            except Exception:  # a schema jsonschema-rs refuses: counted as a difference
                differing.append(f"{server}/{tool['name']}: jsonschema-rs refuses the schema")
        for kind, payload in payloads(schema, grounded_request(tool).expected_payload()):
            verdict = plain.is_valid(payload)
            if kind == "invalid" and verdict:
                continue  # the mutation happened to be allowed: not an invalid payload
            if kind == "valid" and not verdict:
                continue
            invalid_count += kind == "invalid"

            def ours(p: dict[str, Any] = payload, v: Any = preflight_v) -> Any:
                return v.is_valid(p) or v.errors(p)

            def alone(p: dict[str, Any] = payload, v: Any = plain) -> Any:
                return v.is_valid(p) or list(v.iter_errors(p))

            candidates: dict[str, Callable[[], Any]] = {"PayloadValidator": ours, "jsonschema": alone}
            if rs is not None:

                def rust(p: dict[str, Any] = payload, v: Any = rs) -> Any:
                    return v.is_valid(p) or list(v.iter_errors(p))

                candidates["jsonschema-rs"] = rust
                compared += 1
                if rs.is_valid(payload) == verdict:
                    same_verdict += 1
                else:
                    differing.append(f"{server}/{tool['name']} ({kind}): verdicts differ")
                want = sorted(e.message for e in plain.iter_errors(payload))
                got = sorted(e.message for e in rs.iter_errors(payload))
                if kind == "valid":
                    pass
                elif want == got:
                    same_messages += 1
                else:
                    differing.append(f"{server}/{tool['name']}: {want[:1]} vs {got[:1]}")
            for name, call in candidates.items():
                times.setdefault((name, kind), []).append(per_call_ns(call, iterations))

    print(f"per payload, µs (built once per schema; {iterations} calls per payload, best of 3 runs)")
    print(f"{'validator':<18} {'payloads':>9} {'kind':>8} {'mean':>8} {'p50':>8} {'max':>8} {'total ms':>9}")
    for (name, kind), ns in sorted(times.items(), key=lambda kv: (kv[0][1] != "valid", kv[0][0])):
        us = [x / 1000 for x in ns]
        print(
            f"{name:<18} {len(us):>9} {kind:>8} {statistics.mean(us):>8.1f} {statistics.median(us):>8.1f} "
            f"{max(us):>8.1f} {sum(us) / 1000:>9.3f}"
        )
    if jsonschema_rs is not None:
        print(f"\njsonschema-rs vs jsonschema: {same_verdict}/{compared} same verdicts,")
        print(f"    {same_messages}/{invalid_count} invalid payloads with the same error messages")
        for line in differing[:8]:
            print("    " + line)
        if len(differing) > 8:
            print(f"    ... and {len(differing) - 8} more")


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "(version unknown)"


if __name__ == "__main__":
    main()
