"""Connectors: tool calls and lookups against real local endpoints (http.server, the demo MCP servers)."""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from console import connectors
from console.connectors import MeasureFailed, OutcomeUnknown, ToolCallFailed, transport
from console.connectors import tools as connector_tools
from console.demo import bank, shop
from console.demo._server import build_server
from console.egress import EgressRefused, parse_allowed_hosts

REPO = Path(__file__).resolve().parents[3]
BOB = "DE02120300000000202051"
ALICE = "DE89370400440532013000"
BANK_STDIO = {"kind": "mcp_stdio", "command": [sys.executable, "-m", "console.demo.bank"]}


# ------------------------------------------------------------------------------------------ local endpoints


class _Server(ThreadingHTTPServer):
    # socketserver's backlog of 5 drops the sixth of ten simultaneous connects when the accepting thread is
    # slow (a loaded CI core), and the client's SYN retry costs a second: a real endpoint listens deeper.
    request_queue_size = 64
    daemon_threads = True


@dataclass
class MeasureEndpoint:
    url: str
    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0
    echo_args: bool = False  # answer each request with its own args as the value
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(
        self, status: int = 200, body: Any = None, *, raw: bytes | None = None, delay_s: float = 0.0
    ) -> None:
        self.status, self.delay_s = status, delay_s
        self.body = raw if raw is not None else json.dumps(body).encode()


@contextmanager
def json_server(answer: Callable[[str, dict[str, Any]], tuple[int, bytes]]) -> Iterator[int]:
    """A local HTTP server that answers each POST with `answer(path, its JSON body)` -> (status, body);
    yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            status, body = answer(self.path, json.loads(self.rfile.read(length)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def measure_server() -> Iterator[MeasureEndpoint]:
    endpoint = MeasureEndpoint(url="")

    def answer(path: str, request: dict[str, Any]) -> tuple[int, bytes]:
        endpoint.requests.append(request)
        time.sleep(endpoint.delay_s)
        if endpoint.echo_args:
            value = {"value": request["args"], "observed_at": datetime.now(UTC).isoformat()}
            return endpoint.status, json.dumps(value).encode()
        return endpoint.status, endpoint.body

    with json_server(answer) as port:
        endpoint.url = f"http://127.0.0.1:{port}/measure"
        yield endpoint


@pytest.fixture
def endpoint(measure_server: MeasureEndpoint) -> MeasureEndpoint:
    measure_server.requests.clear()
    measure_server.echo_args = False
    measure_server.answer(200, {"value": None, "observed_at": datetime.now(UTC).isoformat()})
    return measure_server


def http_measure(endpoint: MeasureEndpoint, timeout_s: float = 2.0) -> dict[str, Any]:
    return {"name": "bank.balance", "kind": "http", "url": endpoint.url, "timeout_s": timeout_s}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_http_server(module: str, *extra: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--transport", "http", "--port", str(port), *extra],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"{module} exited at start-up: {process.stderr.read().decode() if process.stderr else ''}"
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{module} did not listen on {port} within 30s")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


@pytest.fixture(scope="module")
def bank_http() -> Iterator[dict[str, Any]]:
    for url in start_http_server("console.demo.bank"):
        yield {"kind": "mcp_http", "url": url}


@pytest.fixture(scope="module")
def slow_bank_http() -> Iterator[dict[str, Any]]:
    for url in start_http_server("console.demo.bank", "--reply-delay-s", "3"):
        yield {"kind": "mcp_http", "url": url}


# ------------------------------------------------------------------------------------------ HTTP measures


def test_http_measure_returns_the_value_and_when_it_was_observed(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(200, {"value": {"balance": 812.5}, "observed_at": "2026-01-05T09:30:00+01:00"})

    value, observed_at = connectors.start_measure(http_measure(endpoint), {"account": BOB}).result()

    assert value == {"balance": 812.5}
    assert observed_at == datetime(2026, 1, 5, 8, 30, tzinfo=UTC)
    assert observed_at.tzinfo is not None


def test_http_measure_posts_its_name_and_args(endpoint: MeasureEndpoint) -> None:
    connectors.start_measure(http_measure(endpoint), {"account": BOB}).result()

    assert endpoint.requests == [{"measure": "bank.balance", "args": {"account": BOB}}]


def test_http_measure_fails_on_a_500_answer(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(500, {"value": 1, "observed_at": datetime.now(UTC).isoformat()})

    with pytest.raises(MeasureFailed, match="HTTP 500"):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_on_any_status_but_200(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(201, {"value": 1, "observed_at": datetime.now(UTC).isoformat()})

    with pytest.raises(MeasureFailed, match="HTTP 201"):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_when_the_endpoint_answers_after_the_timeout(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(200, {"value": 1, "observed_at": datetime.now(UTC).isoformat()}, delay_s=1.0)
    started = time.monotonic()

    with pytest.raises(MeasureFailed, match=r"within 0\.2s|timed out"):
        connectors.start_measure(http_measure(endpoint, timeout_s=0.2), {}).result()

    assert time.monotonic() - started < 0.9


def test_http_measure_fails_on_malformed_json(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(raw=b'{"value": 1, "observed_at": ')

    with pytest.raises(MeasureFailed, match="not JSON"):
        connectors.start_measure(http_measure(endpoint), {}).result()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([1, "2026-01-05T09:30:00+00:00"], "not a JSON object"),
        ({"observed_at": "2026-01-05T09:30:00+00:00"}, "lacks value"),
        ({"value": 1}, "lacks observed_at"),
        ({"value": 1, "observed_at": "yesterday"}, "not ISO 8601"),
    ],
)
def test_http_measure_fails_on_an_answer_of_the_wrong_shape(
    endpoint: MeasureEndpoint, body: Any, reason: str
) -> None:
    endpoint.answer(200, body)

    with pytest.raises(MeasureFailed, match=reason):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_on_a_nan_value(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(raw=b'{"value": NaN, "observed_at": "2026-01-05T09:30:00+00:00"}')

    with pytest.raises(MeasureFailed, match="not JSON"):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_on_an_observed_at_without_offset(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(200, {"value": 1, "observed_at": "2026-01-05T09:30:00"})

    with pytest.raises(MeasureFailed, match="no UTC offset"):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_on_an_observed_at_in_the_future(endpoint: MeasureEndpoint) -> None:
    endpoint.answer(200, {"value": 1, "observed_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()})

    with pytest.raises(MeasureFailed, match="in the future"):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_when_nothing_listens() -> None:
    measure = {
        "name": "bank.balance",
        "kind": "http",
        "url": f"http://127.0.0.1:{free_port()}/",
        "timeout_s": 2,
    }

    with pytest.raises(MeasureFailed, match="request failed"):
        connectors.start_measure(measure, {}).result()


def test_a_measure_of_unknown_kind_fails() -> None:
    with pytest.raises(MeasureFailed, match="unknown measure kind 'ftp'"):
        connectors.start_measure({"name": "x", "kind": "ftp", "timeout_s": 1}, {}).result()


# ------------------------------------------------------------------------------------------ HTTP on the wire


def answer_bytes(body: Any) -> bytes:
    raw = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw


def fresh_answer(value: Any = 1) -> dict[str, Any]:
    return {"value": value, "observed_at": datetime.now(UTC).isoformat()}


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length.group(1)):
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


class RawServer:
    """Reads one request per connection and answers ``reply`` verbatim, then closes. ``reply = None``: never
    answers, and sets ``client_closed`` once the client hangs up."""

    def __init__(
        self, *, tls: ssl.SSLContext | None = None, family: int = socket.AF_INET, host: str = "127.0.0.1"
    ) -> None:
        self.reply: bytes | None = b""
        self.requests: list[bytes] = []
        self.client_closed = threading.Event()
        self._tls = tls
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket(family)
        self._listener.bind((host, 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            self.requests.append(read_request(conn))
            if self.reply is None:
                while conn.recv(65536):
                    pass
                self.client_closed.set()
            else:
                conn.sendall(self.reply)
        except OSError:
            pass  # the client hung up, or refused our certificate
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()
        for thread in self._threads:
            thread.join(5)


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    server = RawServer()
    yield server
    server.close()


def raw_measure(url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    return {"name": "bank.balance", "kind": "http", "url": url, "timeout_s": timeout_s}


def test_ten_lookups_started_together_each_get_their_own_answer_at_the_same_time(
    endpoint: MeasureEndpoint,
) -> None:
    endpoint.echo_args, endpoint.delay_s = True, 0.3
    began = time.monotonic()

    started = [connectors.start_measure(http_measure(endpoint), {"n": n}) for n in range(10)]
    values = [lookup.result()[0] for lookup in started]

    assert values == [{"n": n} for n in range(10)]
    assert time.monotonic() - began < 5 * 0.3  # one after another would take 10 x 0.3 s
    assert transport.http_lookups.in_flight() == 0


def test_http_measure_sends_a_json_post_over_http_1_1(raw_server: RawServer) -> None:
    raw_server.reply = answer_bytes(fresh_answer())

    connectors.start_measure(
        raw_measure(f"http://127.0.0.1:{raw_server.port}/v1/measure?x=1#part"), {"a": 1}
    ).result()

    head, _, body = raw_server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}
    assert lines[0] == "POST /v1/measure?x=1 HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{raw_server.port}"
    assert headers["content-type"] == headers["accept"] == "application/json"
    assert "connection" not in headers  # HTTP/1.1: the connection may be kept for the next lookup
    assert int(headers["content-length"]) == len(body)
    assert json.loads(body) == {"measure": "bank.balance", "args": {"a": 1}}


class KeepAliveServer:
    """Answers every request of a connection in turn, as `script(connection number, request number on it)`
    says: the bytes to send, or None to close the connection without answering. Counts connections."""

    def __init__(self, script: Callable[[int, int], bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self.script, self._tls = script, tls
        self.connections = 0
        self.requests: list[tuple[int, int]] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            conn.settimeout(5)
            if self._tls is not None:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                except OSError:
                    return
            for n in itertools.count(1):
                try:
                    if not read_request(conn):
                        return
                except OSError:
                    return
                self.requests.append((number, n))
                reply = self.script(number, n)
                if reply is None:
                    return
                conn.sendall(reply)

    def close(self) -> None:
        self._listener.close()


@contextmanager
def keep_alive_server(
    script: Callable[[int, int], bytes | None], tls: ssl.SSLContext | None = None
) -> Iterator[KeepAliveServer]:
    server = KeepAliveServer(script, tls)
    yield server
    server.close()


def test_lookups_to_one_service_go_over_one_kept_connection() -> None:
    with keep_alive_server(lambda conn, n: answer_bytes(fresh_answer(n))) as server:
        url = f"http://127.0.0.1:{server.port}/m"

        values = [connectors.start_measure(raw_measure(url), {}).result()[0] for _ in range(3)]

        assert values == [1, 2, 3]
        assert server.connections == 1


def test_a_kept_connection_the_service_closes_unanswered_is_replaced_and_the_lookup_answered() -> None:
    # The service answers one request per connection and drops the next one it reads, as a server whose
    # keep-alive time ran out just as the request came.
    with keep_alive_server(lambda conn, n: answer_bytes(fresh_answer(conn)) if n == 1 else None) as server:
        url = f"http://127.0.0.1:{server.port}/m"

        first, _ = connectors.start_measure(raw_measure(url), {}).result()
        second, _ = connectors.start_measure(raw_measure(url), {}).result()

        assert (first, second) == (1, 2)
        assert server.requests == [(1, 1), (1, 2), (2, 1)]


@pytest.mark.parametrize(
    "status_line, headers",
    [(b"HTTP/1.1 200 OK", b"Connection: close\r\n"), (b"HTTP/1.0 200 OK", b"")],
    ids=["connection-close", "http-1.0"],
)
def test_an_answer_that_does_not_keep_its_connection_open_is_not_followed_on_it(
    status_line: bytes, headers: bytes
) -> None:
    reply = answer_bytes(fresh_answer()).replace(b"HTTP/1.1 200 OK\r\n", status_line + b"\r\n" + headers)
    with keep_alive_server(lambda conn, n: reply if n == 1 else None) as server:
        url = f"http://127.0.0.1:{server.port}/m"

        connectors.start_measure(raw_measure(url), {}).result()
        connectors.start_measure(raw_measure(url), {}).result()

        assert server.requests == [(1, 1), (2, 1)]  # a new connection each, none tried twice


def test_http_measure_reaches_an_ipv6_literal_host() -> None:
    try:
        server = RawServer(family=socket.AF_INET6, host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        server.reply = answer_bytes(fresh_answer(6))

        value, _ = connectors.start_measure(raw_measure(f"http://[::1]:{server.port}/m"), {}).result()

        assert value == 6
        assert f"\r\nHost: [::1]:{server.port}\r\n".encode() in server.requests[0]
    finally:
        server.close()


def test_http_measure_reads_a_chunked_answer(raw_server: RawServer) -> None:
    raw = json.dumps(fresh_answer({"balance": 812.5})).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (raw[:7], raw[7:20], raw[20:]))
    raw_server.reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"

    value, _ = connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()

    assert value == {"balance": 812.5}


@pytest.mark.parametrize(
    ("head", "refused"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", ""),
        (b"HTTP/1.0 200 OK\r\ncontent-length:%d\r\n\r\n", ""),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nTransfer-Encoding: identity\r\n\r\n",
            "Transfer-Encoding",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Length: 1\r\n\r\n", "Content-Length"),
    ],
    ids=["common", "http-1.0-lower-case", "transfer-encoding-identity", "two-lengths"],
)
def test_http_measure_reads_a_plain_answer_and_refuses_one_whose_framing_is_in_doubt(
    raw_server: RawServer, head: bytes, refused: str
) -> None:
    body = json.dumps(fresh_answer(5)).encode()
    raw_server.reply = head % len(body) + body
    measure = raw_measure(f"http://127.0.0.1:{raw_server.port}/")

    if refused:
        with pytest.raises(MeasureFailed, match=f"request failed: RemoteProtocolError: .*{refused}"):
            connectors.start_measure(measure, {}).result()
    else:
        assert connectors.start_measure(measure, {}).result()[0] == 5


def test_http_measure_fails_on_an_answer_cut_short_of_its_length(raw_server: RawServer) -> None:
    raw_server.reply = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + json.dumps(fresh_answer(3)).encode()
    )

    with pytest.raises(
        MeasureFailed, match="RemoteProtocolError: peer closed connection without sending complete"
    ):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()


def test_http_measure_reads_an_answer_without_length_until_the_server_closes(raw_server: RawServer) -> None:
    raw_server.reply = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + json.dumps(fresh_answer(3)).encode()

    value, _ = connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()

    assert value == 3


def test_http_measure_skips_an_informational_answer_before_the_real_one(raw_server: RawServer) -> None:
    raw_server.reply = b"HTTP/1.1 100 Continue\r\n\r\n" + answer_bytes(fresh_answer(4))

    value, _ = connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()

    assert value == 4


def test_http_measure_fails_on_an_answer_larger_than_the_limit(raw_server: RawServer) -> None:
    size = transport.MAX_MEASURE_BODY_BYTES + 100
    raw_server.reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b" " * size

    with pytest.raises(MeasureFailed, match=f"answer larger than {transport.MAX_MEASURE_BODY_BYTES} bytes"):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()


def test_http_measure_does_not_follow_a_redirect(raw_server: RawServer, endpoint: MeasureEndpoint) -> None:
    raw_server.reply = f"HTTP/1.1 302 Found\r\nLocation: {endpoint.url}\r\nContent-Length: 0\r\n\r\n".encode()

    with pytest.raises(MeasureFailed, match="answered HTTP 302"):
        connectors.start_measure(
            raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {"account": BOB}
        ).result()

    assert endpoint.requests == []


def test_http_measure_fails_on_a_garbled_answer(raw_server: RawServer) -> None:
    raw_server.reply = b"garbage\r\n\r\n"

    with pytest.raises(MeasureFailed, match="request failed: RemoteProtocolError: illegal status line"):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()


def test_http_measure_fails_when_the_server_hangs_up_without_answering(raw_server: RawServer) -> None:
    raw_server.reply = b""

    with pytest.raises(
        MeasureFailed, match="RemoteProtocolError: Server disconnected without sending a response"
    ):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()


def test_http_measure_refuses_a_url_with_a_space_before_sending_anything(raw_server: RawServer) -> None:
    with pytest.raises(MeasureFailed, match="a URL with spaces, control characters or backslashes"):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/a b"), {}).result()

    assert raw_server.requests == []


def test_http_measure_says_the_connection_was_refused() -> None:
    with pytest.raises(MeasureFailed, match=r"request failed: ConnectionRefusedError: \[Errno \d+\]"):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{free_port()}/"), {}).result()


def test_http_measure_that_gets_no_answer_hangs_up_at_its_timeout(raw_server: RawServer) -> None:
    raw_server.reply = None
    began = time.monotonic()

    with pytest.raises(MeasureFailed, match=r"no answer within 0\.3s"):
        connectors.start_measure(
            raw_measure(f"http://127.0.0.1:{raw_server.port}/", timeout_s=0.3), {}
        ).result()

    assert time.monotonic() - began < 1.0
    assert raw_server.client_closed.wait(2)  # the loop closed its socket: no connection left behind
    # The waiter gives up at its deadline; the loop ends its own task just after (later on a loaded core).
    ended_by = time.monotonic() + 2
    while transport.http_lookups.in_flight() and time.monotonic() < ended_by:
        time.sleep(0.01)
    assert transport.http_lookups.in_flight() == 0


def test_http_measure_resolves_a_host_name_off_the_loop_thread(
    endpoint: MeasureEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved_on: list[str] = []
    getaddrinfo = socket.getaddrinfo

    def recording(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("localhost", b"localhost"):
            resolved_on.append(threading.current_thread().name)
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    endpoint.answer(200, fresh_answer(5))
    port = endpoint.url.split(":")[2].split("/")[0]

    value, _ = connectors.start_measure(raw_measure(f"http://localhost:{port}/measure"), {}).result()

    assert value == 5
    assert resolved_on and "preflight-http" not in resolved_on  # DNS never holds up the loop thread


def test_http_measure_of_a_host_that_does_not_resolve_fails_with_the_resolver_error(settings: Any) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["preflight-lookup.invalid"])
    with pytest.raises(MeasureFailed, match="request failed: gaierror"):
        connectors.start_measure(raw_measure("http://preflight-lookup.invalid/"), {}).result()


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1, signed by its own key: (cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@pytest.fixture
def tls_server(self_signed: tuple[Path, Path]) -> Iterator[RawServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*self_signed)
    server = RawServer(tls=context)
    yield server
    server.close()


@pytest.fixture
def trusting_self_signed(self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Lookups trust the self-signed certificate for this test only (the client is built per trust store)."""
    trusting = ssl.create_default_context(cafile=str(self_signed[0]))
    monkeypatch.setattr(transport, "tls_context", lambda: trusting)
    transport.http_lookups.forget_client()
    yield
    monkeypatch.undo()
    transport.http_lookups.forget_client()


def test_https_measure_reads_the_answer_of_a_server_it_trusts(
    tls_server: RawServer, trusting_self_signed: None
) -> None:
    # Larger than a TLS record (16 KiB): the loop must drain what the TLS layer has already decrypted.
    tls_server.reply = answer_bytes(fresh_answer("x" * 200_000))

    value, _ = connectors.start_measure(
        raw_measure(f"https://localhost:{tls_server.port}/"), {"a": 1}
    ).result()

    assert value == "x" * 200_000
    assert json.loads(tls_server.requests[0].partition(b"\r\n\r\n")[2])["args"] == {"a": 1}


def test_https_lookups_to_one_service_go_over_one_kept_connection(
    self_signed: tuple[Path, Path], trusting_self_signed: None
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*self_signed)
    # Larger than a TLS record (16 KiB): a kept connection must not hold decrypted bytes of the last answer.
    with keep_alive_server(lambda conn, n: answer_bytes(fresh_answer(str(n) * 40_000)), context) as server:
        url = f"https://localhost:{server.port}/"

        values = [connectors.start_measure(raw_measure(url), {}).result()[0] for _ in range(3)]

        assert values == ["1" * 40_000, "2" * 40_000, "3" * 40_000]
        assert server.connections == 1


def test_https_measure_refuses_a_certificate_nobody_vouches_for(tls_server: RawServer) -> None:
    tls_server.reply = answer_bytes(fresh_answer())

    with pytest.raises(MeasureFailed, match=r"request failed: SSLCertVerificationError: .*verify failed"):
        connectors.start_measure(raw_measure(f"https://127.0.0.1:{tls_server.port}/"), {}).result()

    assert tls_server.requests == []


@dataclass
class FakeProxy:
    port: int
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@pytest.fixture
def fake_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProxy]:
    """An HTTP proxy (it answers every request itself) named by http_proxy for this test only."""

    def answer(path: str, request: dict[str, Any]) -> tuple[int, bytes]:
        proxy.requests.append((path, request))
        return 200, json.dumps(fresh_answer("via proxy")).encode()

    with json_server(answer) as port:
        proxy = FakeProxy(port=port)
        for name in ("http_proxy", "HTTP_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        # Proxy settings are read once per process: forget them now, and again once the environment is back.
        transport.http_lookups.forget_client()
        yield proxy
        transport.http_lookups.forget_client()


def test_http_measure_goes_through_the_proxy_the_environment_names(
    fake_proxy: FakeProxy, settings: Any
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["lookup.invalid"])
    value, _ = connectors.start_measure(
        raw_measure("http://lookup.invalid/measure"), {"account": BOB}
    ).result()

    assert value == "via proxy"
    assert fake_proxy.requests == [
        ("http://lookup.invalid/measure", {"measure": "bank.balance", "args": {"account": BOB}})
    ]


def test_http_measure_skips_the_proxy_for_a_host_in_no_proxy(
    fake_proxy: FakeProxy, endpoint: MeasureEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    endpoint.answer(200, fresh_answer("direct"))

    value, _ = connectors.start_measure(http_measure(endpoint), {}).result()

    assert value == "direct"
    assert fake_proxy.requests == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_http_lookups_on_a_loop_of_its_own(endpoint: MeasureEndpoint) -> None:
    endpoint.echo_args = True
    assert connectors.start_measure(http_measure(endpoint), {"who": "parent"}).result()[0] == {
        "who": "parent"
    }
    with warnings.catch_warnings():  # "multi-threaded, fork() may deadlock": the point of the test
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: the parent's loop thread is gone; a lookup must still be answered
        try:
            ok = connectors.start_measure(http_measure(endpoint), {"who": "child"}).result()[0] == {
                "who": "child"
            }
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert connectors.start_measure(http_measure(endpoint), {"who": "parent"}).result()[0] == {
        "who": "parent"
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_share_its_parents_kept_connections() -> None:
    with keep_alive_server(lambda conn, n: answer_bytes(fresh_answer(conn))) as server:
        url = f"http://127.0.0.1:{server.port}/m"
        assert connectors.start_measure(raw_measure(url), {}).result()[0] == 1  # its connection is kept
        with warnings.catch_warnings():  # "multi-threaded, fork() may deadlock": the point of the test
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child connects anew: two processes on one connection would mix their answers
            try:
                ok = connectors.start_measure(raw_measure(url), {}).result()[0] == 2
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)

        assert os.waitstatus_to_exitcode(status) == 0
        assert connectors.start_measure(raw_measure(url), {}).result()[0] == 1  # the parent's, still open
        assert server.connections == 2


# ------------------------------------------------------------------------------------------ python lookups


@connectors.register_lookup("test_connectors.balance")
def balance_lookup(account: str) -> dict[str, Any]:
    return {"account": account, "balance": 42.0}


@connectors.register_lookup("test_connectors.stamped")
def stamped_lookup() -> tuple[int, datetime]:
    return 7, datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


@connectors.register_lookup("test_connectors.naive")
def naive_lookup() -> tuple[int, datetime]:
    return 7, datetime(2026, 1, 5, 9, 30)


@connectors.register_lookup("test_connectors.broken")
def broken_lookup() -> None:
    raise ConnectionError("core banking is down")


@connectors.register_lookup("test_connectors.sleepy")
def sleepy_lookup() -> int:
    time.sleep(0.6)
    return 1


def python_measure(lookup: str, timeout_s: float = 2.0) -> dict[str, Any]:
    return {"name": lookup, "kind": "python", "timeout_s": timeout_s}


def test_python_lookup_is_called_with_the_args_and_stamped_with_the_call_time() -> None:
    before = datetime.now(UTC)

    value, observed_at = connectors.start_measure(
        python_measure("test_connectors.balance"), {"account": BOB}
    ).result()

    assert value == {"account": BOB, "balance": 42.0}
    assert before <= observed_at <= datetime.now(UTC)


def test_python_lookup_may_report_when_it_observed_the_value() -> None:
    value, observed_at = connectors.start_measure(python_measure("test_connectors.stamped"), {}).result()

    assert (value, observed_at) == (7, datetime(2026, 1, 5, 9, 30, tzinfo=UTC))


def test_python_lookup_with_a_naive_observation_time_fails() -> None:
    with pytest.raises(MeasureFailed, match="no UTC offset"):
        connectors.start_measure(python_measure("test_connectors.naive"), {}).result()


def test_python_lookup_that_raises_fails_with_the_reason() -> None:
    with pytest.raises(MeasureFailed, match="ConnectionError: core banking is down"):
        connectors.start_measure(python_measure("test_connectors.broken"), {}).result()


def test_python_lookup_slower_than_its_timeout_fails() -> None:
    with pytest.raises(MeasureFailed, match=r"did not return within 0\.1s"):
        connectors.start_measure(python_measure("test_connectors.sleepy", timeout_s=0.1), {}).result()


def test_python_lookup_that_was_never_registered_fails() -> None:
    with pytest.raises(MeasureFailed, match="no python lookup registered"):
        connectors.start_measure(python_measure("test_connectors.nobody"), {}).result()


def test_python_lookup_given_args_it_does_not_take_fails() -> None:
    with pytest.raises(MeasureFailed, match="TypeError"):
        connectors.start_measure(python_measure("test_connectors.balance"), {"acount": BOB}).result()


def test_a_started_lookup_returns_at_once_and_its_result_waits_for_the_answer() -> None:
    began = time.monotonic()
    started = connectors.start_measure(python_measure("test_connectors.sleepy"), {})

    assert time.monotonic() - began < 0.3  # the lookup sleeps 0.6 s in its own thread
    assert not started.wait(0)
    assert started.result()[0] == 1
    assert time.monotonic() - began >= 0.6
    assert started.wait(0)


def test_a_started_lookup_that_cannot_start_fails_only_when_its_result_is_asked_for() -> None:
    started = connectors.start_measure({"name": "x", "kind": "ftp", "timeout_s": 1}, {})

    assert started.wait(0)  # nothing to wait for
    with pytest.raises(MeasureFailed, match="x: unknown measure kind 'ftp'"):
        started.result()


def test_a_started_lookup_stops_waiting_at_its_timeout() -> None:
    began = time.monotonic()
    started = connectors.start_measure(python_measure("test_connectors.sleepy", timeout_s=0.1), {})

    assert started.wait()  # returns once its time is up, though the lookup still runs (0.6 s)
    assert time.monotonic() - began < 0.5
    with pytest.raises(MeasureFailed, match=r"did not return within 0\.1s"):
        started.result()


@connectors.register_lookup("test_connectors.napping")
def napping_lookup(s: float) -> float:
    time.sleep(s)
    return s


def test_waiting_for_all_returns_once_the_last_lookup_is_in() -> None:
    began = time.monotonic()
    started = [
        connectors.start_measure(python_measure("test_connectors.napping"), {"s": s}) for s in (0.05, 0.2)
    ]

    connectors.StartedMeasure.wait_all(started, 5.0)

    assert 0.2 <= time.monotonic() - began < 1.0
    assert all(lookup.wait(0) for lookup in started)
    assert [lookup.result()[0] for lookup in started] == [0.05, 0.2]


def test_waiting_for_all_stops_at_a_lookups_timeout_and_at_its_own() -> None:
    hung = connectors.start_measure(python_measure("test_connectors.sleepy", timeout_s=0.1), {})
    began = time.monotonic()
    connectors.StartedMeasure.wait_all([hung], 0.02)  # its own timeout first
    assert time.monotonic() - began < 0.08
    assert not hung.wait(0)

    connectors.StartedMeasure.wait_all([hung], 5.0)  # the lookup's, 0.1 s from its start

    assert time.monotonic() - began < 0.5  # it still sleeps (0.6 s)
    assert hung.wait(0)
    with pytest.raises(MeasureFailed, match=r"did not return within 0\.1s"):
        hung.result()


def test_connector_calls_reuse_the_threads_of_calls_that_returned() -> None:
    threads: list[threading.Thread] = []  # kept alive, so no two of them can share an id
    for _ in range(5):
        transport.run_with_deadline(lambda: threads.append(threading.current_thread()), {}, 1.0)
        time.sleep(0.01)  # the thread goes back to idle right after its call's result is set

    assert len({id(thread) for thread in threads}) == 1


def test_a_connector_call_that_never_returns_does_not_hold_up_the_next() -> None:
    stuck = threading.Event()
    hung = transport.run_with_deadline(stuck.wait, {}, 0.1)
    assert hung.timed_out

    began = time.monotonic()
    assert transport.run_with_deadline(lambda: 7, {}, 1.0).value == 7
    assert time.monotonic() - began < 0.5
    stuck.set()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_connector_calls_on_threads_of_its_own() -> None:
    transport.run_with_deadline(lambda: None, {}, 1.0)  # the parent has an idle connector thread now
    time.sleep(0.01)
    with warnings.catch_warnings():  # "multi-threaded, fork() may deadlock": the point of the test
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: the parent's threads are gone; a call must still run
        ok = transport.run_with_deadline(lambda: 42, {}, 2.0).value == 42
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ------------------------------------------------------------------------------------------ python tools

python_tool_calls: list[dict[str, Any]] = []


@connectors.register_tool("test_connectors", "transfer")
def transfer_tool(
    from_account: str, to_account: str, amount: float, memo: str | None = None
) -> dict[str, Any]:
    python_tool_calls.append({"from": from_account, "to": to_account, "amount": amount, "memo": memo})
    return {"transfer_id": "T1", "amount": amount}


@connectors.register_tool("test_connectors", "refuse")
def refusing_tool() -> None:
    raise ToolCallFailed("account frozen")


@connectors.register_tool("test_connectors", "crash")
def crashing_tool() -> None:
    raise RuntimeError("disk full after debit")


@connectors.register_tool("test_connectors", "slow")
def slow_tool() -> None:
    time.sleep(0.6)


PYTHON = {"kind": "python"}


def test_python_tool_is_called_once_with_the_arguments_as_keywords() -> None:
    python_tool_calls.clear()

    result = connectors.call_tool(
        PYTHON,
        "test_connectors",
        "transfer",
        {"from_account": ALICE, "to_account": BOB, "amount": 5},
        timeout_s=2,
    )

    assert result == {"transfer_id": "T1", "amount": 5}
    assert python_tool_calls == [{"from": ALICE, "to": BOB, "amount": 5, "memo": None}]


def test_python_tool_given_arguments_it_does_not_take_fails_without_running() -> None:
    python_tool_calls.clear()

    with pytest.raises(ToolCallFailed, match="does not accept these arguments"):
        connectors.call_tool(
            PYTHON, "test_connectors", "transfer", {"to_account": BOB, "amount": 5}, timeout_s=2
        )

    assert python_tool_calls == []


def test_python_tool_that_refuses_is_a_failed_call() -> None:
    with pytest.raises(ToolCallFailed, match="account frozen"):
        connectors.call_tool(PYTHON, "test_connectors", "refuse", {}, timeout_s=2)


def test_python_tool_that_crashes_has_an_unknown_outcome() -> None:
    with pytest.raises(OutcomeUnknown, match="RuntimeError: disk full after debit"):
        connectors.call_tool(PYTHON, "test_connectors", "crash", {}, timeout_s=2)


def test_python_tool_slower_than_its_timeout_has_an_unknown_outcome() -> None:
    with pytest.raises(OutcomeUnknown, match=r"did not return within 0\.1s"):
        connectors.call_tool(PYTHON, "test_connectors", "slow", {}, timeout_s=0.1)


def test_python_tool_that_was_never_registered_fails() -> None:
    with pytest.raises(ToolCallFailed, match="no python tool registered as test_connectors/nothing"):
        connectors.call_tool(PYTHON, "test_connectors", "nothing", {}, timeout_s=2)


def test_a_connector_of_unknown_kind_fails() -> None:
    with pytest.raises(ToolCallFailed, match="unknown connector kind 'smtp'"):
        connectors.call_tool({"kind": "smtp"}, "bank", "transfer_funds", {}, timeout_s=2)


@pytest.mark.parametrize("timeout_s", [0, -1, float("inf"), True])
def test_a_call_needs_a_positive_finite_timeout(timeout_s: float) -> None:
    with pytest.raises(ToolCallFailed, match="timeout_s must be"):
        connectors.call_tool(PYTHON, "test_connectors", "transfer", {}, timeout_s=timeout_s)


# ------------------------------------------------------------------------------------------ MCP over stdio


def test_stdio_list_tools_returns_the_bank_tools_as_mcp_tool_dicts() -> None:
    tools = {tool["name"]: tool for tool in connectors.list_tools(BANK_STDIO, timeout_s=20)}

    assert set(tools) == {"transfer_funds", "get_balance"}
    assert tools["transfer_funds"]["inputSchema"] == bank.TOOL_SPECS["transfer_funds"]["inputSchema"]
    assert tools["transfer_funds"]["_meta"]["x-preflight"] == bank.EXTENSIONS["transfer_funds"]
    assert tools["get_balance"]["annotations"]["readOnlyHint"] is True


def test_stdio_call_tool_returns_the_mcp_result() -> None:
    result = connectors.call_tool(BANK_STDIO, "bank", "get_balance", {"account": BOB}, timeout_s=20)

    assert result["isError"] is False
    assert result["structuredContent"] == {"account": BOB, "balance": 300.0, "currency": "EUR"}
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


def test_a_stdio_command_the_host_does_not_allow_is_refused_without_being_started(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]

    with pytest.raises(ToolCallFailed, match="command_not_allowed"):
        connectors.call_tool({"kind": "mcp_stdio", "command": command}, "x", "y", {}, timeout_s=5)
    with pytest.raises(ToolCallFailed, match="command_not_allowed"):
        connectors.list_tools({"kind": "mcp_stdio", "command": command}, timeout_s=5)
    measure = {
        "name": "m",
        "kind": "mcp",
        "config": {"connector": {"kind": "mcp_stdio", "command": command}, "tool": "t"},
    }
    with pytest.raises(MeasureFailed, match="command_not_allowed"):
        connectors.start_measure(measure, {}).result()
    assert not marker.exists()


def test_an_allowed_command_admits_no_extra_arguments_and_no_other_program(settings: Any) -> None:
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [["/opt/mcp/server"]]

    def stdio(command: list[str]) -> dict[str, Any]:
        return connectors.checked_connector({"kind": "mcp_stdio", "command": command})

    assert stdio(["/opt/mcp/server"]) == {"kind": "mcp_stdio", "command": ["/opt/mcp/server"]}
    for refused in (
        ["/opt/mcp/server", "--readonly"],
        ["/opt/mcp/server-evil"],
        ["sh", "-c", "/opt/mcp/server"],
    ):
        with pytest.raises(EgressRefused, match="command_not_allowed"):
            stdio(refused)


def test_stdio_server_that_cannot_start_fails_and_says_why(settings: Any) -> None:
    broken = {"kind": "mcp_stdio", "command": [sys.executable, "-m", "console.demo.no_such_server"]}
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [broken["command"]]

    with pytest.raises(ToolCallFailed, match=r"No module named console\.demo\.no_such_server"):
        connectors.call_tool(broken, "bank", "get_balance", {"account": BOB}, timeout_s=20)


def test_stdio_command_that_does_not_exist_fails(settings: Any) -> None:
    missing = {"kind": "mcp_stdio", "command": [str(REPO / "no-such-binary")]}
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [missing["command"]]

    with pytest.raises(ToolCallFailed, match="FileNotFoundError"):
        connectors.call_tool(missing, "bank", "get_balance", {"account": BOB}, timeout_s=5)


# ------------------------------------------------------------------------------------------ MCP over HTTP


def test_http_call_tool_moves_money_on_the_running_server(bank_http: dict[str, Any]) -> None:
    before = connectors.call_tool(bank_http, "bank", "get_balance", {"account": ALICE}, timeout_s=10)

    result = connectors.call_tool(
        bank_http,
        "bank",
        "transfer_funds",
        {"from_account": ALICE, "to_account": BOB, "amount": 20},
        timeout_s=10,
    )

    after = connectors.call_tool(bank_http, "bank", "get_balance", {"account": ALICE}, timeout_s=10)
    assert result["structuredContent"]["amount"] == 20
    assert after["structuredContent"]["balance"] == before["structuredContent"]["balance"] - 20


def test_http_tool_error_result_is_a_failed_call_carrying_that_result(bank_http: dict[str, Any]) -> None:
    arguments = {"from_account": BOB, "to_account": ALICE, "amount": 1_000_000}

    with pytest.raises(ToolCallFailed, match="insufficient funds") as failure:
        connectors.call_tool(bank_http, "bank", "transfer_funds", arguments, timeout_s=10)

    assert failure.value.result["isError"] is True


def test_http_call_of_a_tool_the_server_does_not_list_fails(bank_http: dict[str, Any]) -> None:
    with pytest.raises(ToolCallFailed, match="does not list a tool named 'close_account'"):
        connectors.call_tool(bank_http, "bank", "close_account", {"account": BOB}, timeout_s=10)


def test_http_list_tools_matches_the_demo_definitions(bank_http: dict[str, Any]) -> None:
    tools = connectors.list_tools(bank_http, timeout_s=10)

    assert [tool["name"] for tool in tools] == ["transfer_funds", "get_balance"]
    assert tools[1]["outputSchema"] == bank.TOOL_SPECS["get_balance"]["outputSchema"]


def test_http_connection_refused_is_a_failed_call() -> None:
    refused = {"kind": "mcp_http", "url": f"http://127.0.0.1:{free_port()}/mcp"}

    with pytest.raises(ToolCallFailed, match="ConnectError"):
        connectors.call_tool(refused, "bank", "transfer_funds", {}, timeout_s=5)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections the kernel accepts but nobody ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


def test_http_server_that_never_answers_the_handshake_fails_at_the_connect_timeout(silent_port: int) -> None:
    silent = {"kind": "mcp_http", "url": f"http://127.0.0.1:{silent_port}/mcp", "connect_timeout_s": 0.3}

    with pytest.raises(ToolCallFailed, match=r"could not connect within 0\.3s"):
        connectors.call_tool(silent, "bank", "transfer_funds", {}, timeout_s=5)


def test_list_tools_from_a_server_that_never_answers_fails_at_its_timeout(silent_port: int) -> None:
    silent = {"kind": "mcp_http", "url": f"http://127.0.0.1:{silent_port}/mcp"}

    with pytest.raises(ToolCallFailed, match=r"no tools/list answer within 0\.3s"):
        connectors.list_tools(silent, timeout_s=0.3)


def test_http_reply_slower_than_the_timeout_is_unknown_and_the_money_did_move(
    slow_bank_http: dict[str, Any],
) -> None:
    arguments = {"from_account": BOB, "to_account": ALICE, "amount": 12.5}
    started = time.monotonic()

    with pytest.raises(OutcomeUnknown, match="timed out"):
        connectors.call_tool(slow_bank_http, "bank", "transfer_funds", arguments, timeout_s=0.5)

    assert time.monotonic() - started < 2.5
    balance = connectors.call_tool(slow_bank_http, "bank", "get_balance", {"account": BOB}, timeout_s=10)
    assert balance["structuredContent"]["balance"] == 300.0 - 12.5


def test_a_call_from_inside_a_running_event_loop_still_works(bank_http: dict[str, Any]) -> None:
    async def from_async_code() -> list[dict[str, Any]]:
        return connectors.list_tools(bank_http, timeout_s=10)

    tools = asyncio.run(from_async_code())

    assert {tool["name"] for tool in tools} == {"transfer_funds", "get_balance"}


# ------------------------------------------------------------------------------------------ MCP measures


def mcp_measure(connector: dict[str, Any], tool: str, **config: Any) -> dict[str, Any]:
    return {
        "name": "bank.balance",
        "kind": "mcp",
        "timeout_s": 10,
        "config": {"connector": connector, "tool": tool, **config},
    }


def test_mcp_measure_reads_a_field_of_get_balance(bank_http: dict[str, Any]) -> None:
    before = datetime.now(UTC)

    value, observed_at = connectors.start_measure(
        mcp_measure(bank_http, "get_balance", field="currency"), {"account": BOB}
    ).result()

    assert value == "EUR"
    assert before <= observed_at <= datetime.now(UTC)


def test_mcp_measure_without_a_field_is_the_whole_structured_content(bank_http: dict[str, Any]) -> None:
    value, _ = connectors.start_measure(mcp_measure(bank_http, "get_balance"), {"account": BOB}).result()

    assert set(value) == {"account", "balance", "currency"}


def test_mcp_measure_refuses_a_tool_not_annotated_read_only(bank_http: dict[str, Any]) -> None:
    arguments = {"from_account": ALICE, "to_account": BOB, "amount": 1}

    with pytest.raises(MeasureFailed, match="not annotated readOnlyHint"):
        connectors.start_measure(mcp_measure(bank_http, "transfer_funds"), arguments).result()


def test_mcp_measure_of_an_unknown_account_fails(bank_http: dict[str, Any]) -> None:
    with pytest.raises(MeasureFailed, match="unknown account NOPE"):
        connectors.start_measure(mcp_measure(bank_http, "get_balance"), {"account": "NOPE"}).result()


# ------------------------------------------------------------------------------------------ demo servers


def call_in_process(make_tools: Any, tool: str, arguments: dict[str, Any]) -> Any:
    async def run() -> Any:
        async with Client(build_server("demo", make_tools()), cache=None) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(run)


def test_shop_place_order_offers_card_or_invoice_as_one_of_two_branches() -> None:
    schema = shop.TOOL_SPECS["place_order"]["inputSchema"]

    assert schema["oneOf"] == [{"required": ["card_token"]}, {"required": ["invoice_ref"]}]
    assert schema["properties"]["shipping"]["required"] == ["address", "city", "country"]


def test_shop_refuses_an_order_naming_both_payment_methods() -> None:
    order = {
        "sku": "MUG-001",
        "quantity": 1,
        "shipping": {"address": "Hauptstr. 1", "city": "Berlin", "country": "DE"},
        "card_token": "tok_1",
        "invoice_ref": "INV-1",
    }

    result = call_in_process(shop.make_tools, "place_order", order)

    assert result.is_error is True
    assert "invalid_arguments" in result.content[0].text


def test_shop_places_an_order_paid_by_invoice() -> None:
    order = {
        "sku": "MUG-001",
        "quantity": 2,
        "shipping": {"address": "Hauptstr. 1", "city": "Berlin", "country": "DE"},
        "invoice_ref": "INV-1",
    }

    result = call_in_process(shop.make_tools, "place_order", order)

    assert result.structured_content == {
        "order_id": "O0001",
        "sku": "MUG-001",
        "quantity": 2,
        "payment": "invoice",
        "status": "placed",
    }


def test_bank_refuses_a_transfer_to_the_same_account() -> None:
    result = call_in_process(
        bank.make_tools, "transfer_funds", {"from_account": BOB, "to_account": BOB, "amount": 1}
    )

    assert result.is_error is True
    assert "same account" in result.content[0].text


# ------------------------------------------------------------------------------------------ embedded demo


def test_in_process_bank_transfer_shows_in_the_balance_lookup() -> None:
    from console.demo import inprocess

    inprocess.register()
    lookup = {"name": "bank.balance", "kind": "python", "timeout_s": 2}
    before, _ = connectors.start_measure(lookup, {"account": ALICE}).result()

    connectors.call_tool(
        PYTHON,
        "bank",
        "transfer_funds",
        {"from_account": ALICE, "to_account": BOB, "amount": 100},
        timeout_s=2,
    )

    after, _ = connectors.start_measure(lookup, {"account": ALICE}).result()
    assert after == before - 100


def test_in_process_bank_refuses_arguments_its_schema_rejects() -> None:
    from console.demo import inprocess

    inprocess.register()
    with pytest.raises(ToolCallFailed, match="-5 is less than or equal to the minimum of 0"):
        connectors.call_tool(
            PYTHON,
            "bank",
            "transfer_funds",
            {"from_account": ALICE, "to_account": BOB, "amount": -5},
            timeout_s=2,
        )


def test_in_process_tool_definitions_are_what_the_server_lists(bank_http: dict[str, Any]) -> None:
    from console.demo import inprocess

    assert inprocess.tool_definitions("bank") == connectors.list_tools(bank_http, timeout_s=10)


def test_an_mcp_lookup_answer_larger_than_the_bound_is_a_failed_lookup(
    bank_http: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "MAX_MEASURE_BODY_BYTES", 40)  # get_balance's answer is longer

    with pytest.raises(MeasureFailed, match="more than 40 bytes"):
        connectors.start_measure(mcp_measure(bank_http, "get_balance"), {"account": BOB}).result()


def test_a_tool_answer_larger_than_the_bound_is_kept_as_its_size_and_digest(
    bank_http: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connector_tools, "MAX_TOOL_RESULT_BYTES", 40)

    result = connectors.call_tool(bank_http, "bank", "get_balance", {"account": BOB}, timeout_s=10)

    assert result["structuredContent"] is None and result["isError"] is False
    (note,) = result["content"]
    assert "more than the 40 bytes kept" in note["text"] and "sha256" in note["text"]


def test_a_tools_list_larger_than_the_bound_is_refused(
    bank_http: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connector_tools, "MAX_TOOLS_LIST_BYTES", 100)

    with pytest.raises(ToolCallFailed, match="more than 100 bytes"):
        connectors.list_tools(bank_http, timeout_s=10)


@pytest.mark.parametrize(
    "raw_value",
    ['"a\\u0000b"', '{"k\\u0000": 1}', '"\\ud800"', "1" + "0" * 30, "[" * 100 + "]" * 100],
    ids=["nul", "nul-key", "surrogate", "huge-int", "deep"],
)
def test_a_lookup_answer_that_cannot_be_recorded_is_a_failed_lookup(
    endpoint: MeasureEndpoint, raw_value: str
) -> None:
    observed = datetime.now(UTC).isoformat()
    endpoint.body = f'{{"value": {raw_value}, "observed_at": "{observed}"}}'.encode()

    with pytest.raises(MeasureFailed):
        connectors.start_measure(http_measure(endpoint), {}).result()


def test_http_measure_fails_on_a_head_that_never_ends(raw_server: RawServer) -> None:
    raw_server.reply = b"HTTP/1.1 200 OK\r\nX-Filler: " + b"a" * (4 << 20)

    with pytest.raises(MeasureFailed):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()


def test_http_measure_fails_on_a_chunked_answer_larger_than_the_limit(raw_server: RawServer) -> None:
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
    count = transport.MAX_MEASURE_BODY_BYTES // (1 << 16) + 2
    raw_server.reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * count + b"0\r\n\r\n"

    with pytest.raises(MeasureFailed, match="larger than"):
        connectors.start_measure(raw_measure(f"http://127.0.0.1:{raw_server.port}/"), {}).result()


def test_http_measure_dripping_its_answer_is_cut_off_at_the_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    stop = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        read_request(conn)
        with suppress(OSError):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while not stop.is_set():
                conn.sendall(b" ")
                time.sleep(0.05)
        conn.close()

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    measure = {"name": "m", "kind": "http", "url": f"http://127.0.0.1:{port}/", "timeout_s": 0.5}
    started = time.monotonic()
    try:
        with pytest.raises(MeasureFailed, match="no answer within"):
            connectors.start_measure(measure, {}).result()
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_an_mcp_http_connector_ignores_every_proxy_the_environment_names(
    bank_http: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = socket.create_server(("127.0.0.1", 0))
    proxy.settimeout(0.1)
    address = f"http://127.0.0.1:{proxy.getsockname()[1]}"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, address)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    try:
        tools = connectors.list_tools(bank_http, timeout_s=10)
        with pytest.raises(TimeoutError):
            proxy.accept()  # nobody came
    finally:
        proxy.close()

    assert {tool["name"] for tool in tools} == {"transfer_funds", "get_balance"}
