"""How connector calls run: egress-checked httpx transports, daemon threads with a deadline, and the one
event loop per process that runs every HTTP lookup on one pooled client."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import http.cookiejar
import json
import logging
import math
import os
import queue
import socket
import ssl
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio

from console import egress

if TYPE_CHECKING:
    import httpx2

logger = logging.getLogger(__name__)


MAX_MEASURE_BODY_BYTES = 1 << 20


# Set by an HTTP lookup before each attempt, in its task: a connection opened for it says so here (the
# attempt's own, not a kept one). httpcore's trace would say it too, at the cost of a dozen awaits a request.
_CONNECTING: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("connecting", default=None)


class _AllowListedBackend:
    """httpcore's AnyIO network backend, connecting only to addresses the allow-list admits: the host is
    resolved once here, each address checked, and the socket opened to a checked address (never a second
    resolution a rebinding DNS server could answer differently). TLS still verifies the URL's host name."""

    def __init__(self) -> None:
        import httpcore2

        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        connecting = _CONNECTING.get()
        if connecting is not None:
            connecting[0] = True
        name = egress._normal_host(host.strip("[]")) or host
        if not any(e.host == name and e.port in (None, port) for e in egress.allowed_hosts()):
            raise egress.EgressRefused("host_not_allowed", f"{host}:{port} is not in PREFLIGHT_HTTP_ALLOW")
        infos: Sequence[tuple[object, ...]]  # socket's and anyio's answers: the same shape, typed apart
        if egress._ip(name) is not None:  # taken as it is: no wait on DNS, no hop to a resolver thread
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        else:
            infos = await anyio.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        failure: Exception | None = None
        # Each checked address in turn, in the order DNS gave them, as httpcore itself would not.
        for info in egress.check_addresses(name, port, infos):
            try:
                stream = await self._backend.connect_tcp(
                    str(info[4][0]),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
                return _Stream(stream)
            except Exception as exc:
                failure = exc
        assert failure is not None  # check_addresses refuses an empty answer
        raise failure

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        raise egress.EgressRefused("host_not_allowed", "unix sockets are not reachable from a connector")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _Stream:
    """httpcore's AnyIO stream, less three costs of each request. The pool asks every idle connection whether
    its socket is readable each time it assigns a request or takes a connection back, and AnyIO builds a dict
    of the socket's attributes (asking the kernel for the peer's address) to hand the socket over: here it is
    kept. A read or write without a timeout skips AnyIO's cancel scope, which would have nothing to bound. And
    httpcore writes a request's head and its body apart: held until the read that waits for the answer, they
    leave in one send."""

    def __init__(self, stream: Any) -> None:
        self._inner = stream
        self._anyio = stream._stream  # the AnyIO byte stream httpcore's wraps
        self._socket = stream.get_extra_info("socket")
        self._unsent = b""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._unsent:
            unsent, self._unsent = self._unsent, b""
            await self._send(unsent)
        if timeout is not None:
            return await self._inner.read(max_bytes, timeout)  # type: ignore[no-any-return]
        try:
            return await self._anyio.receive(max_bytes)  # type: ignore[no-any-return]
        except anyio.EndOfStream:
            return b""
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise _httpcore().ReadError(exc) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if timeout is None:
            self._unsent += buffer
            return None
        buffer, self._unsent = self._unsent + buffer, b""
        return await self._inner.write(buffer, timeout)  # type: ignore[no-any-return]

    async def _send(self, buffer: bytes) -> None:
        try:
            await self._anyio.send(buffer)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
            raise _httpcore().WriteError(exc) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> _Stream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _httpcore()._utils.is_socket_readable(self._socket)
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


@functools.cache
def _httpcore() -> Any:
    import httpcore2
    import httpcore2._utils

    return httpcore2


def checked_transport(
    ssl_context: ssl.SSLContext, limits: httpx2.Limits | None = None
) -> httpx2.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through `_AllowListedBackend`; without `limits`,
    httpcore's own."""
    import httpcore2
    import httpx2

    transport = httpx2.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
    # httpx builds its pool without a way to pass a network backend; this pool is the one it would build,
    # with ours. tests/console/test_egress.py proves a rebinding name reaches nothing through it.
    pool_limits = {} if limits is None else dataclasses.asdict(limits)
    # Duck-typed, as a subclass of httpcore's backend would import httpcore with this module.
    backend = cast("httpcore2.AsyncNetworkBackend", _AllowListedBackend())
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=ssl_context, network_backend=backend, **pool_limits
    )
    return transport


def allow_listed_http_client() -> Any:
    """An httpx client for MCP over HTTP: no proxies from the environment (the allow-list is about where the
    bytes go), no redirects, connections only through `_AllowListedBackend`."""
    import httpx2

    transport = checked_transport(httpx2.create_ssl_context(trust_env=False))
    # Per-operation limits as generous as the SDK's default client: the cancel scope around the whole
    # exchange is what bounds it.
    return httpx2.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False, timeout=httpx2.Timeout(30.0, read=300.0)
    )


@functools.cache
def tls_context() -> ssl.SSLContext:
    # The system's trust store, as lookups have always used (not httpx's own default), built once per process:
    # loading the CA bundle is tens of ms of CPU under the GIL.
    return ssl.create_default_context()


# --------------------------------------------------------------------------------------------- plumbing


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


def run_with_deadline(fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout_s: float) -> Outcome:
    """Call ``fn(**kwargs)`` in a daemon thread, waiting for it ``timeout_s`` at most (`call_in_thread`)."""
    try:
        return call_in_thread(fn, kwargs).result(timeout_s)
    except TimeoutError:
        return Outcome(timed_out=True)


def call_in_thread(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Future[Outcome]:
    """``fn(**kwargs)`` running in a daemon thread from now on; its `Outcome` once it returns.

    Python cannot interrupt a running function, so a caller that stops waiting abandons the thread (daemon: it
    cannot keep the process alive). Django database connections opened by the call are closed when it ends,
    because nobody else can ever reuse or close them.
    """
    future: Future[Outcome] = Future()

    def target() -> None:
        outcome = Outcome()
        try:
            outcome.value = fn(**kwargs)
        except BaseException as exc:
            outcome.error = exc
        finally:
            _close_thread_db_connections()
            future.set_result(outcome)

    _runners.run(target)
    return future


class _Runners:
    """Daemon threads for connector calls, kept between calls: a thread started per call costs three times
    the CPU under the worker's GIL, ten of them per frontier of lookups. A call takes an idle thread or starts
    one; a thread whose call never returns is abandoned with it, and only threads whose call returned are
    handed another. Not a ThreadPoolExecutor: it joins its threads at exit, and a hung call would hold it."""

    MAX_IDLE = 32  # more idle than that end: a burst of calls leaves no crowd behind

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        # A forked child has none of its parent's threads: their queues would take calls nobody runs.
        os.register_at_fork(after_in_child=self._idle.clear)

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            serve = threading.Thread(
                target=self._serve, args=(jobs,), name="preflight-connector", daemon=True
            )
            serve.start()
        jobs.put(job)

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            jobs.get()()  # the job catches what its call raises
            with self._lock:
                if len(self._idle) >= self.MAX_IDLE:
                    return
                self._idle.append(jobs)


_runners = _Runners()


# --------------------------------------------------------------------------------------------- HTTP lookups

HTTP_LOOP_GRACE_S = 0.005  # how long past its deadline a waiter gives the loop to report the timeout itself
# Connections kept open after an answer: a frontier's lookups of one measure service reuse them, without a TCP
# (and TLS) handshake each. Closed after a while idle, before common servers time them out (gunicorn: 2 s).
_KEPT_CONNECTIONS = 32
_IDLE_MAX_S = 1.5
# What lookups have always sent: no compression (the body limit is on the bytes that come), JSON both ways.
_LOOKUP_HEADERS = {
    "User-Agent": f"Python-urllib/{sys.version_info[0]}.{sys.version_info[1]}",
    "Accept-Encoding": "identity",
    "Content-Type": "application/json",
    "Accept": "application/json",
}

_Lookup = tuple["Future[Outcome]", str, bytes, float]


class _HttpLookups:
    """The process's HTTP lookups: one event loop thread, one pooled httpx client on it.

    Both are made on first use, and anew in a forked child (Celery prefork, gunicorn): the parent's loop
    thread is not there, and two processes on one connection would mix their answers.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx2.AsyncClient | None = None  # loop thread only
        self._tasks: set[asyncio.Task[Any]] = set()  # loop thread only
        self._held = threading.local()  # the lookups this thread's `together` block holds back

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Lookups this thread starts inside the block go to the loop when it ends, in one wake-up of the
        loop thread, not one each (each a write to its wake-up pipe, and a hand-over of the GIL: woken at the
        first, the loop thread sent it while the rest were still being started)."""
        if getattr(self._held, "lookups", None) is not None:
            yield  # inside an outer block, which sends them
            return
        lookups: list[_Lookup] = []
        self._held.lookups = lookups
        try:
            yield
        finally:
            self._held.lookups = None
            if lookups:
                self._call_soon(self._spawn_all, lookups)

    def start(self, url: str, body: bytes, timeout_s: float) -> Future[Outcome]:
        """The lookup's `Outcome` once the loop has it, timed out after ``timeout_s`` at the latest."""
        future: Future[Outcome] = Future()
        held = getattr(self._held, "lookups", None)
        if held is None:
            self._call_soon(self._spawn_all, [(future, url, body, timeout_s)])
        else:
            held.append((future, url, body, timeout_s))
        return future

    def in_flight(self) -> int:
        """How many lookups the loop holds (none once all have ended)."""
        return len(self._tasks)

    def forget_client(self) -> None:
        """The next lookup gets a new client: the environment's proxies and `tls_context` are read anew."""
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._drop_client)

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="preflight-http", daemon=True).start()
            self._loop.call_soon_threadsafe(fn, *args)

    def _spawn_all(self, lookups: Sequence[_Lookup]) -> None:
        for future, url, body, timeout_s in lookups:
            self._spawn(self._exchange(url, body, timeout_s), future)

    def _spawn(self, work: Coroutine[Any, Any, Any], future: Future[Outcome] | None = None) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # the loop keeps only a weak reference to a task

        def ended(task: asyncio.Task[Any]) -> None:
            self._tasks.discard(task)  # before the waiter wakes: it may count what is in flight
            if future is not None:
                future.set_result(task.result())

        task.add_done_callback(ended)

    def _drop_client(self) -> None:
        if self._client is not None:
            self._spawn(self._client.aclose())
            self._client = None

    async def _exchange(self, url: str, body: bytes, timeout_s: float) -> Outcome:
        import httpx2

        try:
            if self._client is None:
                self._client = _lookup_client()
            return Outcome(value=await _post(self._client, url, body, timeout_s))
        except (TimeoutError, httpx2.TimeoutException):
            return Outcome(timed_out=True)
        except Exception as exc:
            return Outcome(error=exc)


http_lookups = _HttpLookups()


def _lookup_client() -> httpx2.AsyncClient:
    """No redirects (one would re-send the lookup's arguments to a place nobody configured), no cookies kept
    between lookups, proxies from the environment. Without a proxy, connections go only to addresses the
    allow-list admits (`checked_transport`); through one, the proxy resolves the name `check_url`
    admitted."""
    import httpx2

    limits = httpx2.Limits(
        max_connections=None, max_keepalive_connections=_KEPT_CONNECTIONS, keepalive_expiry=_IDLE_MAX_S
    )
    client = httpx2.AsyncClient(
        verify=tls_context(),
        limits=limits,
        follow_redirects=False,
        trust_env=True,
        headers=_LOOKUP_HEADERS,
        cookies=http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
    )
    del client.headers["Connection"]  # HTTP/1.1 keeps the connection without being told
    # Set after the fact: given a transport, httpx would read no proxies from the environment.
    client._transport = checked_transport(tls_context(), limits)
    return client


async def _post(client: httpx2.AsyncClient, url: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
    """``(status, body)``: the status only unless 2xx, at most one byte of the body past the limit."""
    import httpx2

    if client.is_closed:
        raise RuntimeError("Cannot send a request, as the client has been closed.")
    target = _parsed_url(url)
    # Straight to the transport the client would pick (its proxies were read from the environment when it was
    # made), with the request it would build: its headers, no cookies (its jar keeps none), no credentials
    # (`egress.check_url` refuses user info), and no redirect to follow. Its layers around that were about a
    # tenth of a lookup's CPU on the loop thread.
    transport = client._transport_for_url(target)
    # The whole exchange, as httpx's own timeouts are per read: a server dripping its answer is cut off too.
    # httpx's are off: inside this one they could never end the exchange first.
    async with asyncio.timeout(timeout_s):
        while True:
            connected = [False]  # whether this attempt opened a connection of its own
            extensions: dict[str, Any] = {"timeout": _NO_TIMEOUTS}
            if transport is client._transport:
                _CONNECTING.set(connected)  # `_AllowListedBackend` opens each of its connections
            else:  # through a proxy: httpcore's trace says when it connects
                extensions["trace"] = _connect_trace(connected)
            request = httpx2.Request(
                "POST", target, headers=client.headers, content=body, extensions=extensions
            )
            try:
                response = await transport.handle_async_request(request)
            except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError):
                if connected[0]:
                    raise
                # A kept connection the server closed meanwhile (it may, between two requests): nothing of an
                # answer came, so the lookup, which reads and changes nothing, goes again on a new one.
                continue
            try:
                if not 200 <= response.status_code < 300:
                    return response.status_code, b""
                raw = bytearray()
                async for chunk in response.aiter_raw():
                    raw += chunk
                    if len(raw) > MAX_MEASURE_BODY_BYTES:
                        break
                return response.status_code, bytes(raw[: MAX_MEASURE_BODY_BYTES + 1])
            finally:
                await response.aclose()


def _connect_trace(connected: list[bool]) -> Callable[[str, Mapping[str, Any]], Awaitable[None]]:
    async def trace(event: str, info: Mapping[str, Any]) -> None:
        connected[0] = connected[0] or event.startswith("connection.connect_tcp")

    return trace


_NO_TIMEOUTS = {"connect": None, "read": None, "write": None, "pool": None}


@functools.lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx2.URL:
    """A measure's URL parsed once, not at each of its lookups (an httpx URL does not change)."""
    import httpx2

    return httpx2.URL(url)


def _close_thread_db_connections() -> None:
    if "django.db" not in sys.modules:
        return
    try:
        from django.db import connections

        connections.close_all()
    except Exception:
        logger.debug("closing a connector thread's database connections failed", exc_info=True)


def run_async[T](fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run an async function to completion from synchronous code, in any thread.

    A thread that already runs an event loop (an async view, some test runners) cannot start another one, so
    the call then moves to a fresh worker thread and this thread blocks on it, as a sync API must.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn, *args)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="preflight-connector") as pool:
        return pool.submit(anyio.run, fn, *args).result()


def check_timeout(timeout_s: Any, error: type[Exception]) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise error(f"timeout_s must be a positive number, not {timeout_s!r}")
    if math.isinf(timeout_s):
        raise error("timeout_s must be finite")


def as_json(value: Any) -> Any:
    """Round-trip through JSON so callers hold exactly what a JSON column gives back (tuples become lists)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from exc
