"""Typed readers for settings that come from the environment.

A typo in a deployment variable must stop the process at start-up, naming the variable and the value,
rather than silently fall back to a default that would run the gate in a different mode.
"""

import os
import shlex
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    # An exported-but-empty variable is treated as unset, so `FOO= make demo` means "use the default".
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _bad(name: str, value: str, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name}={value!r} is not {expected}")


def env_str(name: str, default: str | None = None) -> str:
    value = _raw(name)
    if value is not None:
        return value
    if default is None:
        raise ImproperlyConfigured(f"{name} must be set")
    return default


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise _bad(name, value, "an integer") from None
    if minimum is not None and number < minimum:
        raise _bad(name, value, f"an integer of at least {minimum}")
    return number


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _bad(name, value, f"a boolean (one of {sorted(_TRUE | _FALSE)})")


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(item == "" for item in items):
        raise _bad(name, value, "a comma-separated list without empty items")
    return items


def env_command_lines(name: str, default: list[str]) -> list[list[str]]:
    """A comma-separated list of shell-quoted command lines, each split into its argv."""
    value = _raw(name)
    lines = default if value is None else env_list(name, default)
    out = []
    for line in lines:
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise _bad(name, value or line, f"shell-quoted command lines ({exc})") from None
        if not argv:
            raise _bad(name, value or line, "non-empty command lines")
        out.append(argv)
    return out


def env_path(name: str, default: Path) -> Path:
    value = _raw(name)
    if value is None:
        return default
    path = Path(value).expanduser()
    if not path.is_absolute():
        # A relative path would depend on the directory the server happened to start in.
        raise _bad(name, value, "an absolute path")
    return path


def env_hosts(name: str, default: list[str]) -> tuple[Any, ...]:
    """A comma-separated list of `host` or `host:port` (IPv6 in brackets), as console.egress.AllowedHost.
    `none`: no host at all (empty means unset, the default, as for every variable here)."""
    from console.egress import parse_allowed_hosts

    if (_raw(name) or "").lower() == "none":
        return ()
    try:
        return parse_allowed_hosts(env_list(name, default))
    except ValueError as exc:
        raise _bad(name, _raw(name) or ",".join(default), f"host or host:port entries ({exc})") from None


def env_assignments(name: str, default: dict[str, str]) -> dict[str, str]:
    """A comma-separated list of NAME=value."""
    value = _raw(name)
    if value is None:
        return dict(default)
    out = {}
    for item in env_list(name, []):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise _bad(name, value, "NAME=value entries")
        out[key.strip()] = val
    return out
