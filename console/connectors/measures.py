"""Lookups (measures): HTTP, registered Python callables and MCP tools, each bounded by its timeout."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

from console import egress, json_values
from console.connectors import transport
from console.connectors.errors import MeasureFailed, OutcomeUnknown, ToolCallFailed
from console.connectors.tools import CALL_GRACE_S, connect_timeout, first_text, mcp_call, result_bytes
from console.connectors.transport import (
    HTTP_LOOP_GRACE_S,
    Outcome,
    as_json,
    call_in_thread,
    check_timeout,
    http_lookups,
    run_async,
)

DEFAULT_MEASURE_TIMEOUT_S = 5.0
# A measurement stamped in the future would look fresh forever; allow only ordinary clock skew.
MAX_CLOCK_SKEW = timedelta(seconds=60)


_LOOKUPS: dict[str, Callable[..., Any]] = {}


def register_lookup[F: Callable[..., Any]](name: str) -> Callable[[F], F]:
    """Register a Python callable as the lookup ``name`` for ``{"kind": "python"}`` measures.

    It is called with the measure's args as keyword arguments and returns the value, or
    ``(value, observed_at)`` with an offset-aware ``observed_at``. Without one, the call's start time is used.
    """

    def decorator(fn: F) -> F:
        _LOOKUPS[name] = fn
        return fn

    return decorator


# --------------------------------------------------------------------------------------------- measures


class StartedMeasure:
    """A lookup under way, bounded by the measure's timeout: an HTTP one on the process's HTTP loop thread
    (`_HttpLookups`), any other in a thread of its own. Starting the lookups of a frontier one after another
    and then collecting them costs at most a thread each; a blocking call in a thread of the caller's would
    cost two."""

    def __init__(
        self,
        name: str,
        call: Future[Outcome] | None = None,
        deadline: float = 0.0,
        finish: Callable[[Outcome], tuple[Any, datetime]] | None = None,
        failed: Exception | None = None,
    ) -> None:
        self.name, self._call, self._finish, self._failed = name, call, finish, failed
        self._deadline = deadline  # time.monotonic()'s, when waiting for it ends

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the answer is in, or the lookup has failed or timed out; True once it has."""
        if self._call is None or self._call.done():
            return True
        left = self._deadline - time.monotonic()
        if timeout is not None and timeout < left:
            return bool(futures.wait([self._call], max(0.0, timeout)).done)
        futures.wait([self._call], max(0.0, left))
        return True

    @staticmethod
    def wait_all(started: Sequence[StartedMeasure], timeout: float) -> None:
        """Wait until each is in, has failed or has timed out, or for `timeout`: as `wait` on each in turn,
        but woken once, when the last of them is in, not once per answer (a frontier's answers come close
        together, and each wake-up of this thread was a hand-over of the GIL from the HTTP loop thread parsing
        the next one)."""
        until = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            out = [
                (s._call, s._deadline)
                for s in started
                if s._call is not None and not s._call.done() and s._deadline > now
            ]
            if not out or now >= until:
                return
            futures.wait([call for call, _ in out], min(until, *(deadline for _, deadline in out)) - now)

    @staticmethod
    def together() -> contextlib.AbstractContextManager[None]:
        """The HTTP lookups started inside the block leave together when it ends (`_HttpLookups.together`)."""
        return http_lookups.together()

    def result(self) -> tuple[Any, datetime]:
        """``(value, observed_at)``, waiting if need be; ``MeasureFailed`` without a trustworthy value."""
        try:
            if self._failed is not None:
                raise self._failed
            assert self._call is not None and self._finish is not None
            try:
                outcome = self._call.result(max(0.0, self._deadline - time.monotonic()))
            except TimeoutError:
                outcome = Outcome(timed_out=True)
            value, observed_at = self._finish(outcome)
            try:
                # A value is stored and digested: one PostgreSQL or canonical JSON cannot hold is no value.
                json_values.check_json(value)
            except json_values.JSONProblem as exc:
                raise MeasureFailed(f"the answer cannot be recorded: {exc.detail}") from None
            return value, observed_at
        except MeasureFailed as exc:
            if self.name and not exc.detail.startswith(f"{self.name}:"):
                raise MeasureFailed(f"{self.name}: {exc.detail}") from exc
            raise
        except Exception as exc:
            raise MeasureFailed(f"{self.name}: {type(exc).__name__}: {exc}") from exc


def start_measure(measure: Mapping[str, Any], args: Mapping[str, Any]) -> StartedMeasure:
    """Start one lookup and return at once. Its `result()` is ``(value, observed_at)`` with an aware
    ``observed_at`` in UTC, or ``MeasureFailed`` for every way of not getting a trustworthy value, so the
    caller records an ``error`` finding (hold) and never a silent ``no_result``."""
    name = str(measure.get("name") or "")
    began = time.monotonic()
    try:
        timeout_s = measure.get("timeout_s")
        timeout_s = DEFAULT_MEASURE_TIMEOUT_S if timeout_s is None else timeout_s
        check_timeout(timeout_s, MeasureFailed)
        kind = measure.get("kind")
        if kind == "http":
            call, wait_s, finish = _http_measure(name, measure.get("url"), args, float(timeout_s))
        elif kind == "python":
            config = measure.get("config") or {}
            call, wait_s, finish = _python_measure(str(config.get("lookup") or name), args, float(timeout_s))
        elif kind == "mcp":
            call, wait_s, finish = _mcp_measure(measure.get("config") or {}, args, float(timeout_s))
        else:
            raise MeasureFailed(f"unknown measure kind {kind!r}")
    except Exception as exc:
        return StartedMeasure(name, failed=exc)
    return StartedMeasure(name, call, began + wait_s, finish)


# The call under way, how long to wait for it from its start, and what makes its answer a value.
_Started = tuple["Future[Outcome]", float, Callable[["Outcome"], tuple[Any, datetime]]]


def _http_measure(name: str, url: Any, args: Mapping[str, Any], timeout_s: float) -> _Started:
    """POST the lookup to its URL; the answer must be 200 with ``{"value": ..., "observed_at": ...}``.

    Every HTTP lookup of the process runs on one event loop thread with one pooled httpx client
    (`_HttpLookups`): a batch starts ten at once, and ten threads each with a client fight over the GIL.
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MeasureFailed("http measure needs 'url': an http(s) URL")
    try:
        egress.check_url(url)
    except egress.EgressRefused as exc:
        raise MeasureFailed(f"{exc.code}: {exc.detail}") from None
    body = json.dumps({"measure": name, "args": dict(args)}, allow_nan=False).encode()
    call = http_lookups.start(url, body, timeout_s)

    def finish(outcome: Outcome) -> tuple[Any, datetime]:
        if outcome.timed_out:
            raise MeasureFailed(f"no answer within {timeout_s}s")
        if outcome.error is not None:
            raise MeasureFailed(f"request failed: {_describe_http_error(outcome.error)}")
        status, raw = outcome.value
        if status != 200:
            raise MeasureFailed(f"answered HTTP {status}, expected 200")
        if len(raw) > transport.MAX_MEASURE_BODY_BYTES:
            raise MeasureFailed(f"answer larger than {transport.MAX_MEASURE_BODY_BYTES} bytes")
        try:
            answer = json.loads(raw, parse_constant=_reject_constant)
        except ValueError as exc:
            raise MeasureFailed(f"answer is not JSON: {exc}") from exc
        if not isinstance(answer, dict):
            raise MeasureFailed("answer is not a JSON object")
        missing = [key for key in ("value", "observed_at") if key not in answer]
        if missing:
            raise MeasureFailed(f"answer lacks {', '.join(missing)}")
        return answer["value"], _parse_observed_at(answer["observed_at"])

    return call, timeout_s + HTTP_LOOP_GRACE_S, finish


def _describe_http_error(exc: BaseException) -> str:
    # httpx wraps what broke; the operating system's own error (refused, unresolved, a certificate) says more.
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError):
            exc = cause
        cause = cause.__cause__ or cause.__context__  # httpcore re-raises its own `from None`
    return f"{type(exc).__name__}: {exc}"


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def _parse_observed_at(raw: Any) -> datetime:
    if not isinstance(raw, str):
        raise MeasureFailed("observed_at is not a string")
    try:
        observed = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise MeasureFailed(f"observed_at {raw!r} is not ISO 8601") from exc
    return _aware_utc(observed)


def _aware_utc(observed: datetime) -> datetime:
    if observed.tzinfo is None or observed.utcoffset() is None:
        # A naive time could be any zone; its age cannot be computed, so it cannot be fresh.
        raise MeasureFailed(f"observed_at {observed.isoformat()} has no UTC offset")
    observed = observed.astimezone(UTC)
    if observed > datetime.now(UTC) + MAX_CLOCK_SKEW:
        raise MeasureFailed(f"observed_at {observed.isoformat()} is in the future")
    return observed


def _python_measure(lookup: str, args: Mapping[str, Any], timeout_s: float) -> _Started:
    fn = _LOOKUPS.get(lookup)
    if fn is None:
        raise MeasureFailed(f"no python lookup registered as {lookup!r}")
    started = datetime.now(UTC)

    def finish(outcome: Outcome) -> tuple[Any, datetime]:
        if outcome.timed_out:
            raise MeasureFailed(f"lookup {lookup!r} did not return within {timeout_s}s")
        if outcome.error is not None:
            raise MeasureFailed(f"lookup {lookup!r} raised {type(outcome.error).__name__}: {outcome.error}")
        value, observed_at = outcome.value, started
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], datetime):
            value, observed_at = value[0], _aware_utc(value[1])
        try:
            return as_json(value), observed_at
        except ValueError as exc:
            raise MeasureFailed(f"lookup {lookup!r} returned a value that is not JSON: {exc}") from exc

    return call_in_thread(fn, dict(args)), timeout_s, finish


def _mcp_measure(config: Mapping[str, Any], args: Mapping[str, Any], timeout_s: float) -> _Started:
    connector, tool = config.get("connector"), config.get("tool")
    if not isinstance(connector, Mapping) or not isinstance(tool, str):
        raise MeasureFailed("mcp measure needs config.connector and config.tool")
    if connector.get("kind") not in ("mcp_stdio", "mcp_http"):
        raise MeasureFailed(f"mcp measure cannot use connector kind {connector.get('kind')!r}")
    # Stamped before the call: the server read the value after this moment, so its age is never understated.
    observed_at = datetime.now(UTC)
    connect_s = connect_timeout(connector, timeout_s)

    def call() -> dict[str, Any]:
        return run_async(mcp_call, connector, tool, dict(args), connect_s, timeout_s, True)

    def finish(outcome: Outcome) -> tuple[Any, datetime]:
        if outcome.timed_out:  # the SDK's own timeouts answer first; this catches a transport that blocks
            raise MeasureFailed(f"{tool!r} lookup failed: no answer within {connect_s + timeout_s}s")
        if isinstance(outcome.error, ToolCallFailed | OutcomeUnknown):
            raise MeasureFailed(f"{tool!r} lookup failed: {outcome.error}") from outcome.error
        if outcome.error is not None:
            raise outcome.error
        result = outcome.value
        if len(result_bytes(result)) > transport.MAX_MEASURE_BODY_BYTES:
            raise MeasureFailed(f"{tool!r} answered with more than {transport.MAX_MEASURE_BODY_BYTES} bytes")
        if result["isError"]:
            raise MeasureFailed(f"{tool!r} reported an error: {first_text(result)}")
        value = result["structuredContent"]
        if value is None:
            text = next((c.get("text") for c in result["content"] if c.get("type") == "text"), None)
            if text is None:
                raise MeasureFailed(f"{tool!r} returned neither structuredContent nor text")
            try:
                value = json.loads(text, parse_constant=_reject_constant)
            except ValueError as exc:
                raise MeasureFailed(f"{tool!r} text content is not JSON: {exc}") from exc
        field = config.get("field")
        if field is not None:
            if not isinstance(value, dict) or field not in value:
                raise MeasureFailed(f"{tool!r} answer has no field {field!r}")
            value = value[field]
        return value, observed_at

    return call_in_thread(call, {}), connect_s + timeout_s + CALL_GRACE_S, finish
