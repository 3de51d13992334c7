"""The MCP gateway: an MCP server (the SDK's low-level `Server`) in front of upstream MCP servers, with every
`tools/call` preflighted through the same services the REST API calls.

What a client sends and gets:

- `tools/list`: the pinned definitions of the fronted servers' tools, as the upstream listed them.
- `tools/call`: the arguments are the model's candidates. Without pointers they are unverified and settle
  nothing; the user settles them in a form, where each proposal is the field's default. A preflight-aware
  client may send, in the request's `_meta`:

  - ``dev.preflight/conversation``: the conversation, as the Agent API takes it (turns with `trusted`);
  - ``dev.preflight/pointers``: ``{"<argument>": <pointer>}``, where in the conversation each argument is;
  - ``dev.preflight/action_name``: a pointer to the user's words naming the action;
  - ``dev.preflight/timing``: ``{"mode": "immediate" | "at", "at"?, "pointer"?}``;
  - ``dev.preflight/intended_change``: ``{"effect": "<name>"}``, the change the user asked for: the called
    tool and every fronted tool declaring that effect are the candidates, narrowed by it as the Agent API's
    `tool_candidates` are (more than one left: the user is asked which action, never shown tool names).

  Every result carries ``_meta["dev.preflight/record"]``: the execution id, its verdict and console URL.

Every request is an agent token's (console/gateway/auth.py): checked at every call before anything reaches an
upstream, and the executions it submits are that token's, as through the REST API.

Verdicts: `ask` is one form elicitation per frontier (2026-07-28: an `InputRequiredResult` whose
`requestState` the SDK's `RequestStateBoundary` seals; 2025-11-25: `elicitation/create` during the call);
`hold` is a URL elicitation of the review page; `block` and a client that cannot be asked are tool errors
that say why; `execute` sends exactly the granted payload upstream, once.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from django.conf import settings
from django.db import close_old_connections
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from console import connectors, models, storage
from console.connectors import tools as connector_tools
from console.errors import ServiceError
from console.gateway import auth, elicitation
from console.gateway import services as gateway_services
from console.gateway.upstream import Upstream
from console.services.executions import execution_answer, execution_create
from console.services.gate import execution_run, grant_issue

logger = logging.getLogger(__name__)

META_CONVERSATION = "dev.preflight/conversation"
META_POINTERS = "dev.preflight/pointers"
META_ACTION = "dev.preflight/action_name"
META_TIMING = "dev.preflight/timing"
META_INTENDED = "dev.preflight/intended_change"
META_RECORD = "dev.preflight/record"
# The one input request of a round, in InputRequiredResult.inputRequests.
INPUT_KEY = "preflight"
# The form field of a trusted destructiveHint's confirmation of the call.
CONFIRM_FIELD = "confirm:action"
# Rounds one legacy call may take (answers that do not fit, a review that takes a while) before it stops.
MAX_ROUNDS = 10
# How long one call waits for lookups (verdict `measure`) before telling a 2026-07-28 client to retry.
MEASURE_WAIT_S = 5.0
_ROUNDS: contextvars.ContextVar[int] = contextvars.ContextVar("gateway_rounds", default=0)
# The agent token of the call being served, checked when the call began (and again before anything runs).
_CALLER: contextvars.ContextVar[models.AgentToken | None] = contextvars.ContextVar(
    "gateway_caller", default=None
)
# A pin check this recent stands for the send that follows it in the same call.
RECHECK_AFTER_S = 1.0
ACTOR = "mcp-gateway"


async def _db[T](fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run a Django service in a worker thread (the ORM is synchronous)."""

    def job() -> T:
        close_old_connections()
        return fn(**kwargs)

    return await anyio.to_thread.run_sync(job)


def _text(text: str, *, error: bool, record: Mapping[str, Any] | None = None) -> types.CallToolResult:
    meta = {META_RECORD: record} if record is not None else None
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error, _meta=meta)


@dataclass(frozen=True, slots=True)
class Caps:
    form: bool
    url: bool

    @classmethod
    def of(cls, ctx: Any) -> Caps:
        caps = ctx.session.client_capabilities
        e = caps.elicitation if caps is not None else None
        if e is None:
            return cls(False, False)
        # An empty elicitation capability predates the modes and means form (spec, 2025-11-25).
        return cls(e.form is not None or e.url is None, e.url is not None)


@dataclass(frozen=True, slots=True)
class Exposed:
    upstream: Upstream
    definition: dict[str, Any]
    # The operator trusts this server's annotations (readOnlyHint passes, destructiveHint asks to confirm).
    trusted: bool = False
    # The state changes its contract declares it makes (x-preflight `effects`).
    effects: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Round:
    """What the previous round of this call asked, for reading its answer."""

    kind: str  # "form", "confirm", "url", "wait"
    fields: tuple[str, ...] = ()
    confirm: bool = False  # the form carried the call's confirmation
    # The payload digest the user confirmed so far (carried from round to round), and the one a confirm
    # round showed.
    confirmed: str | None = None
    shown: str | None = None
    # The record a URL round showed: the same record after the user came back means nothing changed yet.
    seq: int | None = None


class Gateway:
    def __init__(
        self,
        upstreams: Sequence[Upstream],
        *,
        principal: str,
        public_url: str | None = None,
        token: str | None = None,
    ) -> None:
        self.upstreams = list(upstreams)
        self.principal = principal
        # stdio: the one token this process was started with. None: over HTTP, each request's bearer token.
        self.token = token
        self.public_url = (public_url or settings.PREFLIGHT_PUBLIC_URL).rstrip("/")
        self.tools: dict[str, Exposed] = {}
        # (server, tool) -> (digest, when) of the last pin check that passed, so the send that follows it in
        # the same call does not list the upstream again (a later round, after the user answered, does).
        self._checked: dict[tuple[str, str], tuple[str, float]] = {}

    # ---- start-up ------------------------------------------------------------------------------

    async def open(self, task_group: anyio.abc.TaskGroup) -> None:
        """Connect every upstream and expose its pinned tools. A server the operator never imported is
        refused: nothing of it could be gated."""
        for upstream in self.upstreams:
            await upstream.start(task_group)
            pinned = await _db(_pinned_definitions, server=upstream.server)
            if not pinned:
                raise connectors.ToolCallFailed(
                    f"server {upstream.server!r} has no tools in the catalog; an operator imports it first"
                )
            for name, (definition, trusted, effects) in pinned.items():
                if name in self.tools:
                    raise connectors.ToolCallFailed(
                        f"tool {name!r} is offered by {self.tools[name].upstream.server!r}"
                        f" and {upstream.server!r}"
                    )
                self.tools[name] = Exposed(upstream, definition, trusted, effects)

    async def close(self) -> None:
        for upstream in self.upstreams:
            await upstream.close()

    def server(self) -> Server[Any]:
        server: Server[Any] = Server(
            "preflight-gateway",
            version="0.1.0",
            instructions="Tool calls pass through Preflight: the user settles what the call needs.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )
        security = RequestStateSecurity(
            keys=settings.PREFLIGHT_MCP_STATE_KEYS,
            ttl=float(settings.PREFLIGHT_MCP_STATE_TTL_S),
            # Bound to the principal and the exact token: a state minted for one never serves another.
            bind_principal=lambda ctx: f"{self.principal}|{_fingerprint(self._raw_token())}",
        )
        server.middleware.append(RequestStateBoundary(security, default_audience="preflight-gateway"))
        return server

    # ---- who calls ----------------------------------------------------------------------------

    def _raw_token(self) -> str | None:
        if self.token is not None:
            return self.token
        access = get_access_token()  # set by the SDK's bearer middleware for this HTTP request
        return access.token if access is not None else None

    async def _authorize(self) -> models.AgentToken:
        """The caller's agent token, looked up afresh; `auth.TokenRefused` (an MCP error) if it may not
        submit for this gateway's principal. Nothing reaches an upstream before this passes."""
        token = await _db(auth.check, raw=self._raw_token(), principal=self.principal)
        _CALLER.set(token)
        return token

    def _caller(self) -> models.AgentToken:
        token = _CALLER.get()
        if token is None:  # every handler authorizes first; fail closed if one did not
            raise auth.TokenRefused("unauthenticated", "no agent token checked for this call")
        return token

    def _actor(self) -> str:
        return f"{ACTOR} (agent:{self._caller().name})"

    # ---- handlers ------------------------------------------------------------------------------

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        await self._authorize()
        return types.ListToolsResult(
            tools=[types.Tool.model_validate(t.definition) for t in self.tools.values()]
        )

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        await self._authorize()
        exposed = self.tools.get(params.name)
        if exposed is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        if params.request_state is not None:
            # Minted by `_input_required`; the boundary verified seal, expiry, tool, arguments and caller
            # (`bind_principal`). An older release's state does not parse.
            try:
                state = json.loads(params.request_state)
                execution_id = state.pop("e")
                last = Round(**{**state, "fields": tuple(state["fields"])})
            except (ValueError, KeyError, TypeError):
                raise MCPError(code=types.INVALID_PARAMS, message="Invalid or expired requestState") from None
            if last.kind == "wait":
                return await self._advance(ctx, exposed, execution_id, confirmed=last.confirmed)
            # As the SDK parsed it: an answer of another kind (or none) is not the elicitation's.
            answer = (params.input_responses or {}).get(INPUT_KEY)
            if not isinstance(answer, types.ElicitResult):
                return _text("the answer to the elicitation is missing from inputResponses", error=True)
            return await self._take(ctx, exposed, execution_id, last, answer)
        return await self._begin(ctx, exposed, params.name, dict(params.arguments or {}), params.meta or {})

    # ---- the first round -----------------------------------------------------------------------

    async def _begin(
        self, ctx: Any, exposed: Exposed, name: str, arguments: dict[str, Any], meta: Mapping[str, Any]
    ) -> types.CallToolResult | types.InputRequiredResult:
        checked = await self._pin_check(exposed, name, arguments)
        if isinstance(checked, types.CallToolResult):
            return checked
        contract = checked
        engine = storage.engine_contract(contract)
        if engine.read_only and contract.definition.get("annotations", {}).get("destructiveHint") is not True:
            await _db(
                gateway_services.gateway_read_only_pass,
                contract=contract,
                principal=self.principal,
                arguments=arguments,
                token=self._caller(),
                actor=self._actor(),
            )
            try:
                result = await exposed.upstream.call(name, arguments, exposed.upstream.config.timeout_s)
            except (connectors.ToolCallFailed, connectors.OutcomeUnknown) as exc:
                return _text(f"{name}: {exc}", error=True)
            return types.CallToolResult.model_validate(result)
        body = self._body(exposed, name, arguments, meta)
        try:
            execution = await _db(execution_create, body=body, token=self._caller(), actor=self._actor())
        except ServiceError as exc:
            return _text(f"{exc.code}: {exc.detail}", error=True)
        return await self._advance(ctx, exposed, str(execution.pk))

    def _body(
        self, exposed: Exposed, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> dict[str, Any]:
        pointers = meta.get(META_POINTERS)
        pointers = pointers if isinstance(pointers, Mapping) else {}
        candidates = {
            key: {"value": value, **({"pointer": pointers[key]} if key in pointers else {})}
            for key, value in arguments.items()
        }
        body: dict[str, Any] = {
            "server": exposed.upstream.server,
            "tool": name,
            "principal": self.principal,
            "conversation": meta.get(META_CONVERSATION) or [],
            "candidates": candidates,
        }
        if META_ACTION in meta:
            body["action_name"] = meta[META_ACTION]
        if META_TIMING in meta:
            body["timing"] = meta[META_TIMING]
        if META_INTENDED in meta:
            intended = meta[META_INTENDED]
            effect = intended.get("effect") if isinstance(intended, Mapping) else intended
            # Passed on as sent: the request parser refuses a malformed one (a tool error saying why).
            body["intended_change"] = intended
            wanted = effect if isinstance(effect, str) else None
            others = [n for n, e in self.tools.items() if n != name and wanted in e.effects]
            del body["server"], body["tool"]
            body["tool_candidates"] = [
                {"server": self.tools[n].upstream.server, "tool": n} for n in [name, *others][:50]
            ]
        return body

    async def _pin_check(
        self, exposed: Exposed, name: str, arguments: Mapping[str, Any]
    ) -> models.ToolContract | types.CallToolResult:
        """The pinned contract if the upstream's live definition still hashes to it; else the refusal,
        recorded with a provider gap, before anything is sent."""
        try:
            contract, live, live_digest = await self._live(exposed, name)
        except connectors.ToolCallFailed as exc:
            return _text(f"{name}: the upstream could not be reached, nothing was sent: {exc}", error=True)
        if contract is not None and live_digest == contract.digest:
            self._checked[(exposed.upstream.server, name)] = (contract.digest, time.monotonic())
            return contract
        execution = await _db(
            gateway_services.gateway_pin_refusal,
            server=exposed.upstream.server,
            tool=name,
            live=live,
            live_contract_digest=live_digest,
            principal=self.principal,
            arguments=arguments,
            token=self._caller(),
            actor=self._actor(),
        )
        return _text(
            f"{name}: refused, nothing was sent: the tool's definition changed since an operator approved it;"
            " an operator must review it and import it again.",
            error=True,
            record=self._summary(str(execution.pk), "block"),
        )

    # ---- later rounds --------------------------------------------------------------------------

    async def _take(
        self,
        ctx: Any,
        exposed: Exposed,
        execution_id: str,
        last: Round,
        answer: types.ElicitResult,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Read the user's answer to the previous round, record it, and go on."""
        taken = _ROUNDS.get() + 1
        _ROUNDS.set(taken)  # per request: a 2025-11-25 call asks all its rounds inside one request
        if taken > MAX_ROUNDS:
            return _text(
                "Too many rounds; nothing was executed.",
                error=True,
                record=self._summary(execution_id, "ask"),
            )
        if answer.action != "accept":
            return await self._decline(execution_id, answer.action, list(last.fields) or [last.kind])
        content = answer.content or {}
        problem = ""
        confirmed = last.confirmed
        if last.kind == "form":
            latest = await _db(_record, execution_id=execution_id)
            form = self._form(exposed, latest)
            answers = {k: v for k, v in form.answers(content).items() if k in last.fields}
            if answers:
                try:
                    await _db(
                        execution_answer,
                        execution_id=execution_id,
                        answers=answers,
                        answered_by=self.principal,
                        channel="agent",
                        actor=f"{self._actor()}:elicitation",
                    )
                except ServiceError as exc:
                    problem = f"That answer could not be used ({exc.detail}). Please answer again."
            if last.confirm and content.get(CONFIRM_FIELD) is True and not problem:
                # The yes covers the call only if the user saw every argument of it in this form: as a field,
                # or listed as already given with the value it still has.
                shown = _settled(latest)
                after = await _db(_record, execution_id=execution_id)
                payload = after.get("payload") or {}
                if after.get("payload_valid") and all(
                    f"arg:{k}" in answers or shown.get(f"arg:{k}", _MISSING) == v for k, v in payload.items()
                ):
                    confirmed = await self._confirm(execution_id, after)
        elif last.kind == "url":
            latest = await _db(_record, execution_id=execution_id)
            if latest.get("seq") == last.seq:
                page = latest["console_url"] + ("answers/" if latest["verdict"] == "ask" else "")
                return _unchanged(self.public_url + page, self._summary(execution_id, latest["verdict"]))
        elif last.kind == "confirm":
            if content.get(CONFIRM_FIELD) is not True:
                text = "The user did not confirm; nothing was executed."
                return await self._decline(execution_id, "decline", [CONFIRM_FIELD], text)
            latest = await _db(_record, execution_id=execution_id)
            if latest.get("payload_digest") == last.shown:
                confirmed = await self._confirm(execution_id, latest)
        return await self._advance(ctx, exposed, execution_id, problem=problem, confirmed=confirmed)

    async def _decline(
        self, execution_id: str, action: str, asked: list[str], text: str = ""
    ) -> types.CallToolResult:
        """The user declined (or cancelled) what was asked: recorded, and nothing runs."""
        word = "declined" if action == "decline" else "cancelled"
        await _db(
            gateway_services.gateway_decline,
            execution_id=execution_id,
            action=action,
            asked=asked,
            principal=self.principal,
            actor=self._actor(),
        )
        text = text or f"The user {word}; nothing was executed."
        return _text(text, error=True, record=self._summary(execution_id, word))

    # ---- one verdict at a time ---------------------------------------------------------------------

    async def _advance(
        self,
        ctx: Any,
        exposed: Exposed,
        execution_id: str,
        *,
        problem: str = "",
        confirmed: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Act on the latest verdict. On 2026-07-28 a question ends this request (the client answers and
        retries); on 2025-11-25 the question is asked here and the loop goes on."""
        waited = 0.0
        # Every verdict but `measure` returns; `measure` polls until MEASURE_WAIT_S.
        while True:
            latest = await _db(_record, execution_id=execution_id)
            verdict = latest["verdict"]
            summary = self._summary(execution_id, verdict)
            if verdict == "measure":
                if waited >= MEASURE_WAIT_S:
                    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        step = Round("wait", confirmed=confirmed)
                        return self._input_required(execution_id, step, None)
                    return _text("Lookups are still running; call again shortly.", error=True, record=summary)
                await anyio.sleep(0.1)
                waited += 0.1
                continue
            if verdict == "execute":
                if self._destructive(exposed, latest) and confirmed != latest.get("payload_digest"):
                    ask = self._confirm_form(exposed, latest)
                    step = Round("confirm", (CONFIRM_FIELD,), True, confirmed, latest.get("payload_digest"))
                    if not Caps.of(ctx).form:
                        return _text(
                            "This call changes things irreversibly and needs the user's confirmation, but"
                            " this client declared no form elicitation capability.",
                            error=True,
                            record=summary,
                        )
                    return await self._ask(ctx, exposed, execution_id, step, ask)
                return await self._run(exposed, execution_id, latest)
            if verdict == "ask":
                form = self._form(exposed, latest, problem=problem)
                problem = ""
                if not form.fields:
                    return await self._by_url(ctx, exposed, execution_id, latest, confirmed=confirmed)
                if not Caps.of(ctx).form:
                    asked = ", ".join(q.get("text") or q["slot"] for q in latest.get("questions") or [])
                    return _text(
                        f"This call needs answers from the user ({asked}), but this client declared no form"
                        " elicitation capability, so nothing was executed.",
                        error=True,
                        record=summary,
                    )
                with_confirm = CONFIRM_FIELD in form.requested_schema["properties"]
                step = Round("form", tuple(f.slot for f in form.fields), with_confirm, confirmed)
                return await self._ask(ctx, exposed, execution_id, step, form)
            if verdict == "hold":
                return await self._by_url(ctx, exposed, execution_id, latest, confirmed=confirmed)
            if verdict == "block":
                unmet = ", ".join(u["id"] for u in latest.get("unmet") or []) or "a prohibiting condition"
                reasons = "; ".join(latest.get("reasons") or [])
                return _text(
                    f"Blocked, nothing was executed: {unmet} is not met. {reasons}".strip(),
                    error=True,
                    record=summary,
                )
            if verdict == "deferred":
                return self._deferred(execution_id, latest)
            return _text(f"Unexpected verdict {verdict!r}; nothing was executed.", error=True, record=summary)

    async def _ask(
        self, ctx: Any, exposed: Exposed, execution_id: str, step: Round, form: elicitation.Form
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Ask a form: on 2026-07-28 in the result (the client answers and retries), else during the call."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            ask = types.ElicitRequestFormParams(message=form.message, requested_schema=form.requested_schema)
            return self._input_required(execution_id, step, ask)
        result = await ctx.session.elicit_form(
            form.message, form.requested_schema, related_request_id=ctx.request_id
        )
        return await self._take(ctx, exposed, execution_id, step, result)

    async def _by_url(
        self,
        ctx: Any,
        exposed: Exposed,
        execution_id: str,
        latest: Mapping[str, Any],
        *,
        confirmed: str | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        # Questions (verdict `ask`) go to the requester's own answer page; a hold to the review page.
        questions = latest["verdict"] == "ask"
        url = self.public_url + latest["console_url"] + ("answers/" if questions else "")
        summary = self._summary(execution_id, latest["verdict"])
        what = (
            "This call needs answers a form cannot carry"
            if questions
            else "This call is held for review by an approver"
        )
        if not Caps.of(ctx).url:
            return _text(
                f"{what}: {url} — this client declared no URL elicitation capability; open the page there."
                " Nothing was executed.",
                error=True,
                record=summary,
            )
        message = f"{what}. Open {url}, and accept here once it is done."
        step = Round("url", ("url",), confirmed=confirmed, seq=latest.get("seq"))
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self._input_required(
                execution_id, step, types.ElicitRequestURLParams(message=message, url=url)
            )
        result = await ctx.session.elicit_url(
            message,
            url,
            elicitation_id=f"{execution_id}:{latest.get('seq')}",
            related_request_id=ctx.request_id,
        )
        if result.action != "accept":
            return await self._take(ctx, exposed, execution_id, step, result)
        after = await _db(_record, execution_id=execution_id)
        if after.get("seq") == latest.get("seq"):
            return _unchanged(url, summary)
        return await self._advance(ctx, exposed, execution_id, confirmed=confirmed)

    # ---- pieces ----------------------------------------------------------------------------------

    def _input_required(
        self, execution_id: str, step: Round, ask: types.ElicitRequestParams | None
    ) -> types.InputRequiredResult:
        """End the request with the round's question (None: none, call again). The state is the execution and
        the round: the boundary binds it, sealed, to the tool, its arguments and the caller, so nothing of
        those needs carrying."""
        return types.InputRequiredResult(
            input_requests={INPUT_KEY: types.ElicitRequest(params=ask)} if ask is not None else None,
            request_state=json.dumps({"e": execution_id, **asdict(step)}, separators=(",", ":")),
        )

    def _target(self, exposed: Exposed, latest: Mapping[str, Any]) -> Exposed:
        """The tool the record is for: the called one, or the one the intended change settled on."""
        chosen = self.tools.get(str(latest.get("tool") or ""))
        if chosen is not None and chosen.upstream.server == latest.get("server"):
            return chosen
        return exposed

    def _destructive(self, exposed: Exposed, latest: Mapping[str, Any]) -> bool:
        target = self._target(exposed, latest)
        annotations = target.definition.get("annotations") or {}
        return target.trusted and annotations.get("destructiveHint") is True

    def _form(self, exposed: Exposed, latest: Mapping[str, Any], *, problem: str = "") -> elicitation.Form:
        candidates = {
            s["key"]: s["candidate"]["value"]
            for s in latest.get("slots") or []
            if isinstance(s.get("candidate"), Mapping)
        }
        form = elicitation.build_form(
            latest.get("questions") or [],
            candidates=candidates,
            # Before the action is chosen no tool is named (its name is the provider's, not the user's words).
            intro=f"To {_tool_words(self._target(exposed, latest))}, please answer:"
            if latest.get("tool")
            else "To do what you asked, please answer:",
            problem=problem,
        )
        if form.fields and self._destructive(exposed, latest):
            settled = _settled(latest)
            if settled:
                given = "; ".join(f"{k[4:]}: {json.dumps(v, ensure_ascii=False)}" for k, v in settled.items())
                form = replace(form, message=f"{form.message}\nAlready given: {given}")
            prop = {"type": "boolean", "title": "Yes, do this with these values", "default": False}
            form.requested_schema["properties"][CONFIRM_FIELD] = prop
            form.requested_schema["required"].append(CONFIRM_FIELD)
        return form

    def _confirm_form(self, exposed: Exposed, latest: Mapping[str, Any]) -> elicitation.Form:
        payload = json.dumps(latest.get("payload"), sort_keys=True, ensure_ascii=False)
        words = _tool_words(self._target(exposed, latest))
        message = f"Confirm: {words} with {payload}. This cannot be undone."
        schema = {
            "type": "object",
            "properties": {CONFIRM_FIELD: {"type": "boolean", "title": "Yes, do this", "default": False}},
            "required": [CONFIRM_FIELD],
        }
        return elicitation.Form(message, (), (), schema)

    async def _run(
        self, exposed: Exposed, execution_id: str, latest: Mapping[str, Any]
    ) -> types.CallToolResult:
        exposed = self._target(exposed, latest)
        # What runs: the called tool, or the one an intended change settled on.
        summary = {**self._summary(execution_id, "execute"), "tool": f"{latest['server']}/{latest['tool']}"}
        # The token may have been revoked while the user answered: checked again before anything runs.
        await self._authorize()
        token = latest.get("grant")
        if token is None:
            try:
                await _db(grant_issue, execution_id=execution_id)
            except ServiceError as exc:
                return _text(f"{exc.code}: {exc.detail}", error=True, record=summary)
            token = (await _db(_record, execution_id=execution_id)).get("grant")
        pinned_digest = latest.get("contract_digest")

        def forward(
            connector: Any, server: str, tool: str, payload: Mapping[str, Any], *, timeout_s: float
        ) -> Any:
            return anyio.from_thread.run(
                self._forward, exposed, tool, dict(payload), timeout_s, pinned_digest
            )

        try:
            outcome = await _db(
                execution_run,
                execution_id=execution_id,
                token=token,
                actor=self._actor(),
                call_tool=forward,
            )
        except ServiceError as exc:
            return _text(f"{exc.code}: {exc.detail}", error=True, record=summary)
        summary = {**summary, "outcome": outcome.outcome}
        if outcome.outcome == "executed" or (
            isinstance(outcome.result, Mapping) and "content" in outcome.result
        ):
            return types.CallToolResult.model_validate({**outcome.result, "_meta": {META_RECORD: summary}})
        word = "may or may not have acted (not retried)" if outcome.outcome == "outcome_unknown" else "failed"
        return _text(f"The call {word}: {outcome.detail}", error=True, record=summary)

    async def _forward(
        self, exposed: Exposed, tool: str, payload: dict[str, Any], timeout_s: float, pinned_digest: Any
    ) -> Any:
        """Send the granted payload, once, if the live definition is still the one the grant names."""
        digest, when = self._checked.get((exposed.upstream.server, tool), ("", -RECHECK_AFTER_S))
        if digest != pinned_digest or time.monotonic() - when > RECHECK_AFTER_S:
            contract, _, live_digest = await self._live(exposed, tool)
            if contract is None or contract.digest != pinned_digest or live_digest != pinned_digest:
                raise connectors.ToolCallFailed(
                    f"{tool!r}: the upstream definition changed; nothing was sent"
                )
        result = await exposed.upstream.call(tool, payload, timeout_s)
        if result.get("isError"):
            raise connectors.ToolCallFailed(
                f"{tool!r} reported an error: {connector_tools.first_text(result)}", result=result
            )
        return result

    async def _live(
        self, exposed: Exposed, tool: str
    ) -> tuple[models.ToolContract | None, dict[str, Any] | None, str | None]:
        """The pinned contract, the live definition and the digest it would have as that contract (its trust
        and side-car kept); None for what is missing."""
        contract = await _db(gateway_services.pinned_contract, server=exposed.upstream.server, tool=tool)
        live = next((t for t in await exposed.upstream.list_tools() if t.get("name") == tool), None)
        if contract is None or live is None:
            return contract, live, None
        live_digest = gateway_services.live_digest(
            exposed.upstream.server,
            live,
            annotations_trusted=contract.annotations_trusted,
            sidecar=contract.definition.get("x-preflight"),
        )
        return contract, live, live_digest

    async def _confirm(self, execution_id: str, latest: Mapping[str, Any]) -> str | None:
        await _db(
            gateway_services.gateway_confirm,
            execution_id=execution_id,
            payload=latest.get("payload"),
            principal=self.principal,
            actor=self._actor(),
        )
        digest = latest.get("payload_digest")
        return str(digest) if digest else None

    def _deferred(self, execution_id: str, latest: Mapping[str, Any]) -> types.CallToolResult:
        """Not an error: the user asked for a later time. Nothing ran now; it is preflighted afresh then."""
        at = latest.get("timing_at")
        api = f"{self.public_url}/api/v1/executions/{execution_id}"
        summary = {**self._summary(execution_id, "deferred"), "timing_at": at, "api_url": api}
        text = (
            f"Deferred, nothing ran now: the user asked for this at {at}. Preflight checks the call again"
            " then (every lookup and condition afresh). Check it with GET"
            f" {api} and this agent token (once its verdict is execute, POST its grant to {api}/run),"
            f" or on the console at {summary['console_url']}."
        )
        return _text(text, error=False, record=summary)

    def _summary(self, execution_id: str, verdict: str) -> dict[str, Any]:
        return {
            "id": execution_id,
            "verdict": verdict,
            "console_url": f"{self.public_url}/executions/{execution_id}/",
        }


_MISSING = object()


def _fingerprint(raw: str | None) -> str:
    return hashlib.sha256((raw or "").encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _unchanged(url: str, summary: Mapping[str, Any]) -> types.CallToolResult:
    """The user came back from the page and nothing there has changed yet (no review, no answer)."""
    held = summary.get("verdict") == "hold"
    what = "Still held for review" if held else "Still waiting for the answers"
    return _text(f"{what} at {url}; nothing was executed yet.", error=True, record=summary)


def _settled(latest: Mapping[str, Any]) -> dict[str, Any]:
    """The argument values the record already holds (settled from a verified source)."""
    return {
        s["key"]: s["value"]
        for s in latest.get("slots") or []
        if s["key"].startswith("arg:") and s.get("status") == "known"
    }


def _tool_words(exposed: Exposed) -> str:
    title = exposed.definition.get("title") or (exposed.definition.get("annotations") or {}).get("title")
    return f"run {title or exposed.definition['name']}"


def _record(*, execution_id: str) -> dict[str, Any]:
    return storage.record_answer(models.Execution.objects.get(pk=execution_id))


def _pinned_definitions(*, server: str) -> dict[str, tuple[dict[str, Any], bool, frozenset[str]]]:
    """The current, valid contracts of a server as the client sees them: the upstream's Tool objects, without
    the `x-preflight` that import merged in (the gate reads it; the client never did), with whether its
    annotations are trusted and the effects its contract declares."""
    rows = models.ToolContract.objects.filter(server__name=server, current=True, valid=True).order_by("pk")
    out: dict[str, tuple[dict[str, Any], bool, frozenset[str]]] = {}
    for row in rows:
        definition = {k: v for k, v in row.definition.items() if k != "x-preflight"}
        effects = frozenset(storage.engine_contract(row).extension.effects)
        out[row.name] = (definition, row.annotations_trusted, effects)
    return out
