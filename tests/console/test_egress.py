"""The deployment's allow-lists: a URL reaches only listed hosts, as spelled and as resolved."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from console import connectors, egress
from console.connectors import MeasureFailed, ToolCallFailed, transport
from console.egress import EgressRefused, parse_allowed_hosts

ALLOW = ["127.0.0.1:8765", "localhost:8765", "api.example.com", "[::1]:8765"]


@pytest.fixture(autouse=True)
def _allow(settings: Any) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(ALLOW)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8765/mcp",
        "http://localhost:8765/",
        "http://LOCALHOST:8765/",
        "https://api.example.com/lookup?x=1",
        "http://api.example.com:9000/",  # a host listed without a port: any port
        "http://[::1]:8765/",
    ],
)
def test_a_listed_host_is_allowed(url: str) -> None:
    egress.check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8766/",  # another port
        "http://127.0.0.1/",  # the default port is a port too
        "http://2130706433:8765/",  # decimal
        "http://0x7f000001:8765/",  # hexadecimal
        "http://0177.0.0.1:8765/",  # octal
        "http://127.1:8765/",  # short form
        "http://127.0.0.1.:8765/",
        "http://api.example.com./",
        "http://[::ffff:127.0.0.1]:8765/",  # IPv4-mapped IPv6
        "http://[::ffff:7f00:1]:8765/",
        "http://[0:0:0:0:0:ffff:127.0.0.1]:8765/",
        "http://user@127.0.0.1:8765/",  # user info
        "http://127.0.0.1:8765@evil.example/",
        "http://127.0.0.1:8765:@evil.example/",
        "http://evil.example#@127.0.0.1:8765/",
        "http://evil.example\\@127.0.0.1:8765/",
        "http://127.0.0.1:8765\\@evil.example/",
        "http://127.0.0.1%3a8765/",
        "http://127.0.0.1%2e:8765/",
        "http://127.0.0.1 :8765/",
        "http://127.0.0.1:8765\t/",
        "http://127.0.0.1:8765\r\nHost: evil/",
        "http://api.example.com.evil.example/",
        "http://evil.example/?next=http://127.0.0.1:8765/",
        "http://xn--pi-example-com/",
        "http://äpi.example.com/",
        "http://[::1]:8766/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:8765/",
        "http://:8765/",
        "http:///127.0.0.1:8765/",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:-1/",
    ],
)
def test_a_host_spelled_any_other_way_is_refused(url: str) -> None:
    with pytest.raises(EgressRefused) as refused:
        egress.check_url(url)
    assert refused.value.code == "host_not_allowed"


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1:8765/", "file:///etc/passwd", "gopher://127.0.0.1:8765/", "//127.0.0.1:8765/", ""],
)
def test_a_url_that_is_not_http_is_an_invalid_connector(url: str) -> None:
    with pytest.raises(EgressRefused) as refused:
        egress.check_url(url)
    assert refused.value.code == "invalid_connector"


def info(address: str) -> tuple[Any, ...]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return (family, socket.SOCK_STREAM, 6, "", (address, 80))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.53",
        "::1",
        "169.254.169.254",
        "::ffff:169.254.169.254",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "fe80::1",
        "224.0.0.1",
        "fd00:ec2::254",  # AWS's IPv6 metadata endpoint
        "100.100.100.200",  # Alibaba's metadata endpoint
        "2002:a9fe:a9fe::1",  # 6to4 carrying 169.254.169.254
        "2002:7f00:1::1",  # 6to4 carrying 127.0.0.1
        "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo carrying 169.254.169.254 (bits inverted)
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    ],
)
def test_a_listed_name_may_not_resolve_to_loopback_link_local_or_unspecified(address: str) -> None:
    with pytest.raises(EgressRefused, match="resolved to"):
        egress.check_addresses("api.example.com", 443, [info(address)])


def test_one_bad_address_among_good_ones_refuses_the_name() -> None:
    with pytest.raises(EgressRefused):
        egress.check_addresses("api.example.com", 443, [info("93.184.216.34"), info("127.0.0.1")])


def test_a_listed_name_may_resolve_to_public_and_private_addresses() -> None:
    infos = [
        info("93.184.216.34"),
        info("10.0.0.7"),
        info("2001:db8::1"),
        info("100.64.0.1"),
        info("fd00::1"),
    ]
    assert egress.check_addresses("api.example.com", 443, infos) == infos


def test_localhost_may_resolve_to_loopback_and_an_ip_literal_only_to_itself() -> None:
    egress.check_addresses("localhost", 8765, [info("127.0.0.1"), info("::1")])
    egress.check_addresses("127.0.0.1", 8765, [info("127.0.0.1")])
    with pytest.raises(EgressRefused):
        egress.check_addresses("127.0.0.1", 8765, [info("10.0.0.1")])


@pytest.mark.parametrize(
    "entry", ["127.0.0.1:0", "127.0.0.1:70000", "http://x", "x y", "[::ffff:127.0.0.1]", "a:b"]
)
def test_a_malformed_allow_list_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        parse_allowed_hosts([entry])


class Listener:
    """A TCP port that counts the connections made to it and answers nothing."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """`rebind.example` is listed, and its DNS answers with the loopback address (rebinding)."""
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["rebind.example"])
    real, real_async = socket.getaddrinfo, anyio.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port)))]
        return real(host, port, *args, **kwargs)

    async def fake_async(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example":
            return fake(host, port)
        return await real_async(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    monkeypatch.setattr(anyio, "getaddrinfo", fake_async)


def test_an_http_lookup_to_a_name_that_resolves_to_loopback_connects_to_nothing(
    rebinding: None, listener: Listener
) -> None:
    measure = {"name": "m", "kind": "http", "url": f"http://rebind.example:{listener.port}/", "timeout_s": 2}

    with pytest.raises(MeasureFailed, match=r"host_not_allowed|resolved to 127\.0\.0\.1"):
        connectors.start_measure(measure, {}).result()

    assert listener.accepted == 0


def test_an_mcp_http_connector_to_a_name_that_resolves_to_loopback_connects_to_nothing(
    rebinding: None, listener: Listener
) -> None:
    connector = {
        "kind": "mcp_http",
        "url": f"http://rebind.example:{listener.port}/mcp",
        "connect_timeout_s": 3,
    }

    with pytest.raises(ToolCallFailed, match=r"resolved to 127\.0\.0\.1"):
        connectors.list_tools(connector, timeout_s=3)
    with pytest.raises(ToolCallFailed, match=r"resolved to 127\.0\.0\.1"):
        connectors.call_tool(connector, "s", "t", {}, timeout_s=3)

    assert listener.accepted == 0


def test_an_mcp_http_connector_to_an_unlisted_port_connects_to_nothing(
    settings: Any, listener: Listener
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["127.0.0.1:1"])
    connector = {"kind": "mcp_http", "url": f"http://127.0.0.1:{listener.port}/mcp"}

    with pytest.raises(ToolCallFailed, match="host_not_allowed"):
        connectors.call_tool(connector, "s", "t", {}, timeout_s=3)

    assert listener.accepted == 0


def test_an_mcp_http_connector_does_not_follow_a_redirect(settings: Any, listener: Listener) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{listener.port}/mcp")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # Both listed: the redirect is refused for being a redirect, not for where it points.
        settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["127.0.0.1"])
        connector = {"kind": "mcp_http", "url": f"http://127.0.0.1:{server.server_address[1]}/mcp"}
        with pytest.raises(ToolCallFailed):
            connectors.list_tools(connector, timeout_s=3)
    finally:
        server.shutdown()
        thread.join()

    assert listener.accepted == 0


def test_an_http_lookup_to_an_unlisted_port_connects_to_nothing(settings: Any, listener: Listener) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["127.0.0.1:1"])
    measure = {"name": "m", "kind": "http", "url": f"http://127.0.0.1:{listener.port}/", "timeout_s": 2}

    with pytest.raises(MeasureFailed, match="host_not_allowed"):
        connectors.start_measure(measure, {}).result()

    assert listener.accepted == 0


def test_an_http_lookup_through_a_proxy_to_an_unlisted_host_never_reaches_the_proxy(
    settings: Any, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{listener.port}")
    monkeypatch.delenv("no_proxy", raising=False)
    transport.http_lookups.forget_client()
    try:
        measure = {"name": "m", "kind": "http", "url": "http://internal.example/", "timeout_s": 2}
        with pytest.raises(MeasureFailed, match="host_not_allowed"):
            connectors.start_measure(measure, {}).result()
    finally:
        monkeypatch.undo()
        transport.http_lookups.forget_client()

    assert listener.accepted == 0
