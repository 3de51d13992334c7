from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_assignments,
    env_bool,
    env_command_lines,
    env_hosts,
    env_int,
    env_list,
    env_path,
    env_str,
)
from console.egress import AllowedHost


def test_an_integer_variable_is_read_as_an_int(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_INT", " 42 ")

    assert env_int("PREFLIGHT_TEST_INT", 7) == 42


def test_a_malformed_integer_fails_loudly_naming_variable_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_INT", "sixty")

    with pytest.raises(ImproperlyConfigured, match=r"PREFLIGHT_TEST_INT='sixty' is not an integer"):
        env_int("PREFLIGHT_TEST_INT", 7)


def test_an_integer_below_its_minimum_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_INT", "0")

    with pytest.raises(ImproperlyConfigured, match=r"PREFLIGHT_TEST_INT='0' is not an integer of at least 1"):
        env_int("PREFLIGHT_TEST_INT", 7, minimum=1)
    monkeypatch.setenv("PREFLIGHT_TEST_INT", "1")
    assert env_int("PREFLIGHT_TEST_INT", 7, minimum=1) == 1


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("YES", True), ("1", True), ("off", False)])
def test_a_boolean_variable_accepts_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_BOOL", raw)

    assert env_bool("PREFLIGHT_TEST_BOOL", not expected) is expected


def test_a_malformed_boolean_fails_loudly_naming_variable_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_BOOL", "maybe")

    with pytest.raises(ImproperlyConfigured, match=r"PREFLIGHT_TEST_BOOL='maybe' is not a boolean"):
        env_bool("PREFLIGHT_TEST_BOOL", False)


def test_an_unset_or_empty_variable_takes_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFLIGHT_TEST_UNSET", raising=False)
    monkeypatch.setenv("PREFLIGHT_TEST_EMPTY", "")

    assert env_int("PREFLIGHT_TEST_UNSET", 7) == 7
    assert env_bool("PREFLIGHT_TEST_EMPTY", True) is True


def test_a_required_string_without_default_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFLIGHT_TEST_REQUIRED", raising=False)

    with pytest.raises(ImproperlyConfigured, match="PREFLIGHT_TEST_REQUIRED must be set"):
        env_str("PREFLIGHT_TEST_REQUIRED")


def test_a_list_is_split_on_commas_and_rejects_empty_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_LIST", "a.example, b.example")
    assert env_list("PREFLIGHT_TEST_LIST", []) == ["a.example", "b.example"]

    monkeypatch.setenv("PREFLIGHT_TEST_LIST", "a.example,,b.example")
    with pytest.raises(ImproperlyConfigured, match="PREFLIGHT_TEST_LIST"):
        env_list("PREFLIGHT_TEST_LIST", [])


def test_command_lines_are_split_shell_style_and_bad_quoting_fails_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_COMMANDS", "npx -y '@scope/server one', /opt/mcp/bin/git-mcp")
    assert env_command_lines("PREFLIGHT_TEST_COMMANDS", []) == [
        ["npx", "-y", "@scope/server one"],
        ["/opt/mcp/bin/git-mcp"],
    ]
    assert env_command_lines("PREFLIGHT_UNSET_COMMANDS", ["python -m x"]) == [["python", "-m", "x"]]

    monkeypatch.setenv("PREFLIGHT_TEST_COMMANDS", "npx 'unclosed")
    with pytest.raises(ImproperlyConfigured, match=r"PREFLIGHT_TEST_COMMANDS=.*shell-quoted"):
        env_command_lines("PREFLIGHT_TEST_COMMANDS", [])


def test_a_relative_path_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_PATH", "var/key.pem")

    expected = r"PREFLIGHT_TEST_PATH='var/key.pem' is not an absolute path"
    with pytest.raises(ImproperlyConfigured, match=expected):
        env_path("PREFLIGHT_TEST_PATH", Path("/unused"))


def test_an_http_allow_list_is_read_as_hosts_with_optional_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_HOSTS", "api.example.com, 10.0.0.5:8443,[::1]:9")

    assert env_hosts("PREFLIGHT_TEST_HOSTS", []) == (
        AllowedHost("api.example.com", None),
        AllowedHost("10.0.0.5", 8443),
        AllowedHost("::1", 9),
    )


def test_an_http_allow_list_of_none_allows_no_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_HOSTS", "none")

    assert env_hosts("PREFLIGHT_TEST_HOSTS", ["127.0.0.1:8765"]) == ()


def test_a_malformed_http_allow_list_fails_loudly_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_HOSTS", "http://api.example.com")

    with pytest.raises(ImproperlyConfigured, match=r"PREFLIGHT_TEST_HOSTS='http://api.example.com'"):
        env_hosts("PREFLIGHT_TEST_HOSTS", [])


def test_the_default_http_allow_list_is_the_demos_loopback_servers_only() -> None:
    import subprocess
    import sys

    code = (
        "import django; django.setup(); from django.conf import settings;"
        " print(sorted(map(str, settings.PREFLIGHT_HTTP_ALLOW)))"
    )
    env = {"DJANGO_SETTINGS_MODULE": "config.settings", "PREFLIGHT_DEBUG": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout

    assert out.strip() == str(["127.0.0.1:8765", "127.0.0.1:8766", "localhost:8765", "localhost:8766"])


def test_a_stdio_environment_is_name_value_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_TEST_ENV", "PATH=/usr/bin:/bin,LANG=C.UTF-8")

    assert env_assignments("PREFLIGHT_TEST_ENV", {}) == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    monkeypatch.setenv("PREFLIGHT_TEST_ENV", "PATH")
    with pytest.raises(ImproperlyConfigured, match="PREFLIGHT_TEST_ENV"):
        env_assignments("PREFLIGHT_TEST_ENV", {})
