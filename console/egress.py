"""Where the gate may connect: the deployment's allow-lists for HTTP hosts and MCP stdio commands.

A connector or a measure is data an operator sets, and still never a way to reach the host's other services or
to run code. HTTP: the URL's host must be listed in PREFLIGHT_HTTP_ALLOW (`host` = any port, `host:port`),
spelled as listed (no decimal or octal IPs, no IPv4-mapped IPv6, no user info), and the addresses it resolves
to are checked after resolution and are the only ones connected to, so a name that re-resolves elsewhere
(DNS rebinding) reaches nothing. Stdio: the command must equal one of PREFLIGHT_MCP_STDIO_ALLOW exactly.

Used at configuration time (a clear 4xx) and again at call time (defence in depth: a row written before the
lists changed, or by hand, is refused just the same).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# What an authority may look like: a DNS name or a bracketed IPv6 literal, then an optional decimal port.
# Anything else (user info, backslashes, percent-escapes, spaces) is where URL parsers disagree: refused.
_AUTHORITY = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")


class EgressRefused(Exception):
    """A connection the deployment does not allow. `code` is the API's error code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AllowedHost:
    host: str  # lower-case DNS name, or an IP literal in its compressed form
    port: int | None  # None: any port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def parse_allowed_hosts(entries: Iterable[str]) -> tuple[AllowedHost, ...]:
    """`host` or `host:port` entries (IPv6 in brackets) as AllowedHost; ValueError names a bad one."""
    out = []
    for entry in entries:
        match = _AUTHORITY.fullmatch(entry.strip())
        if match is None:
            raise ValueError(f"{entry!r} is not host or host:port")
        host = _normal_host(match["v6"] or match["name"])
        if host is None or _mapped(host):
            raise ValueError(f"{entry!r} names no usable host (an IPv4 address is written as IPv4)")
        port = _port(match["port"])
        if match["port"] is not None and port is None:
            raise ValueError(f"{entry!r} has a port outside 1-65535")
        out.append(AllowedHost(host, port))
    return tuple(out)


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _mapped(host: str) -> bool:
    address = _ip(host)
    return isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None


def _normal_host(host: str) -> str | None:
    host = host.lower()  # a trailing dot is not stripped: "127.0.0.1." is refused, not guessed at
    if not host:
        return None
    address = _ip(host)
    if address is not None:
        return address.compressed
    if ":" in host or not re.fullmatch(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*", host):
        return None
    # All-digit labels as a host ("2130706433", "127.1", "0x7f.1") are IPs to some resolvers: never a name.
    if re.fullmatch(r"[0-9.]+|0x[0-9a-f.x]*", host) or host.split(".")[-1].isdigit():
        return None
    return host


def allowed_hosts() -> tuple[AllowedHost, ...]:
    hosts: tuple[AllowedHost, ...] = settings.PREFLIGHT_HTTP_ALLOW
    return hosts


def check_url(url: Any, *, what: str = "url") -> tuple[str, int]:
    """The (host, port) of an http(s) URL whose host is allow-listed, as the allow-list spells it; otherwise
    EgressRefused. Text only: the addresses it resolves to are `check_addresses`'s question."""
    if not isinstance(url, str) or not url:
        raise EgressRefused("invalid_connector", f"{what}: an http:// or https:// URL")
    if _UNSAFE.search(url):
        raise EgressRefused(
            "host_not_allowed", f"{what}: a URL with spaces, control characters or backslashes"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise EgressRefused("invalid_connector", f"{what}: an http:// or https:// URL")
    match = _AUTHORITY.fullmatch(parts.netloc)
    if match is None:
        raise EgressRefused(
            "host_not_allowed",
            f"{what}: the authority {parts.netloc!r} is not a plain host[:port] (no user info)",
        )
    host = _normal_host(match["v6"] or match["name"])
    port = _port(match["port"]) if match["port"] is not None else (443 if parts.scheme == "https" else 80)
    if host is None or port is None:
        raise EgressRefused(
            "host_not_allowed", f"{what}: {parts.netloc!r} is not a host this deployment allows"
        )
    if _mapped(host):
        raise EgressRefused("host_not_allowed", f"{what}: write an IPv4 address as IPv4, not {host!r}")
    if not any(entry.host == host and entry.port in (None, port) for entry in allowed_hosts()):
        raise EgressRefused(
            "host_not_allowed",
            f"{what}: {parts.netloc} is not in this deployment's PREFLIGHT_HTTP_ALLOW",
        )
    return host, port


# Cloud metadata services outside link-local: AWS's IPv6 endpoint (a unique-local address) and Alibaba's
# (in the shared 100.64/10 space, which deployments use for other things, so only this address is refused).
_METADATA = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200"))


def _blocked_for_a_name(address: IPAddress, host: str) -> bool:
    """Addresses a listed DNS name may not resolve to: a name is not a way to reach this host's loopback
    services (unless it is `localhost`), cloud metadata (link-local, or a known metadata address) or the
    unspecified address, nor such an IPv4 address carried inside an IPv6 one (6to4, Teredo). An operator
    who means such an address lists it as an IP literal."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None and _blocked_for_a_name(embedded, host):
            return True
    if address in _METADATA:
        return True
    if address.is_loopback:
        return host != "localhost"
    return address.is_link_local or address.is_unspecified or address.is_multicast or address.is_reserved


def normal_address(raw: str) -> IPAddress:
    address = ipaddress.ip_address(raw.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def check_addresses(host: str, port: int, infos: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The getaddrinfo results for an allow-listed (host, port) that may be connected to; EgressRefused when
    any is not (one bad answer taints the name: fail closed rather than pick)."""
    literal = _ip(host)
    if not infos:
        raise EgressRefused("host_not_allowed", f"{host} resolved to no address")
    for info in infos:
        address = normal_address(str(info[4][0]))
        ok = address == literal if literal is not None else not _blocked_for_a_name(address, host)
        if not ok:
            raise EgressRefused(
                "host_not_allowed",
                f"{host}:{port} resolved to {address}, which this deployment does not allow",
            )
    return list(infos)


def resolve_checked(host: str, port: int) -> list[tuple[Any, ...]]:
    """Resolve an allow-listed host once and check what it resolved to; connect to these, never re-resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise EgressRefused("host_not_allowed", f"{host} did not resolve: {exc}") from exc
    return check_addresses(host, port, infos)


# ---- stdio commands


def check_command(command: Any, *, what: str = "command") -> list[str]:
    """The argv of an MCP stdio command that equals one of PREFLIGHT_MCP_STDIO_ALLOW exactly (no extra
    arguments: an interpreter's `-c`, a server's `--config` are code); otherwise EgressRefused."""
    if (
        not isinstance(command, list | tuple)
        or not command
        or not all(isinstance(part, str) and part for part in command)
    ):
        raise EgressRefused("invalid_connector", f"{what}: a non-empty list of non-empty strings (argv)")
    argv = list(command)
    allowed: list[list[str]] = settings.PREFLIGHT_MCP_STDIO_ALLOW
    if argv not in allowed:
        raise EgressRefused(
            "command_not_allowed",
            f"{what}: {argv!r} is not one of this deployment's PREFLIGHT_MCP_STDIO_ALLOW command lines",
        )
    return argv
