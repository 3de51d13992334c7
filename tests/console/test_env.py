from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.env import env_bool, env_command_lines, env_int, env_list, env_path, env_str


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
