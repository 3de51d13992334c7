from __future__ import annotations

import pytest

from preflight.labels import Label, LabelProblem, ParsedLabels, parse_labels

PATHS = frozenset({"from_account", "to_account", "amount", "memo", "payee", "payee.iban"})


def only_problem(description: str) -> LabelProblem:
    parsed = parse_labels(description, PATHS)
    assert parsed.labels == ()
    assert len(parsed.problems) == 1
    return parsed.problems[0]


def test_required_label_names_a_top_level_argument_and_keeps_its_reason() -> None:
    parsed = parse_labels("[required:memo] The bank rejects transfers without a memo.", PATHS)
    assert parsed == ParsedLabels(
        (Label("required", "memo", "The bank rejects transfers without a memo.", 1),), ()
    )


def test_required_label_may_name_a_nested_argument_by_dotted_path() -> None:
    parsed = parse_labels("[required:payee.iban]", PATHS)
    assert parsed.labels == (Label("required", "payee.iban", "", 1),)
    assert parsed.problems == ()


def test_confirm_label_with_a_target_asks_to_confirm_that_argument() -> None:
    parsed = parse_labels("[confirm:to_account] The recipient must be confirmed.", PATHS)
    assert parsed.labels == (Label("confirm", "to_account", "The recipient must be confirmed.", 1),)


def test_confirm_label_without_a_target_asks_to_confirm_the_whole_execution() -> None:
    parsed = parse_labels("[confirm] The recipient must be confirmed by the account holder.", PATHS)
    assert parsed.labels == (
        Label("confirm", None, "The recipient must be confirmed by the account holder.", 1),
    )


def test_notice_label_carries_its_text() -> None:
    parsed = parse_labels("  [notice]   Transfers cannot be recalled.  ", PATHS)
    assert parsed.labels == (Label("notice", None, "Transfers cannot be recalled.", 1),)


def test_labels_carry_their_one_based_line_numbers_among_prose() -> None:
    description = (
        "Move money between accounts.\n\n[confirm] Confirm the recipient.\r\nMore prose.\n[notice] No recall."
    )
    parsed = parse_labels(description, PATHS)
    assert [(label.tag, label.line) for label in parsed.labels] == [("confirm", 3), ("notice", 5)]
    assert parsed.problems == ()


def test_no_description_has_no_labels() -> None:
    assert parse_labels(None, PATHS) == ParsedLabels((), ())
    assert parse_labels("", PATHS) == ParsedLabels((), ())


@pytest.mark.parametrize(
    "line",
    [
        "Move money between accounts. [required:memo] is mentioned mid-line, so it is prose.",
        "[1] first footnote",
        "[link](http://example.com) to the docs",
        "[notice](http://example.com) is a link whose text happens to be a tag",
        "[docs][1] reference-style link",
        "[docs]: https://example.com/transfer",
        "[ ] an unchecked task",
        "- [x] a checked task",
        "[]",
    ],
)
def test_ordinary_prose_and_markdown_produce_neither_labels_nor_problems(line: str) -> None:
    assert parse_labels(f"Some tool.\n{line}", PATHS) == ParsedLabels((), ())


def test_required_without_a_target_is_a_problem() -> None:
    problem = only_problem("intro\n[required] Always needed.")
    assert problem == LabelProblem(
        2, "[required] Always needed.", "required needs a target argument: write [required:argument]"
    )


def test_unknown_target_argument_is_a_problem_for_required_and_confirm() -> None:
    assert "unknown target argument 'nope'" in only_problem("[required:nope]").reason
    assert "unknown target argument 'payee.bic'" in only_problem("[confirm:payee.bic] check it").reason


def test_unknown_tag_is_a_problem() -> None:
    problem = only_problem("[warning] This moves real money.")
    assert problem.line == 1
    assert problem.text == "[warning] This moves real money."
    assert "unknown tag 'warning'" in problem.reason


@pytest.mark.parametrize("line", ["[Required:memo] because", "[NOTICE] Shouting.", "[Confirm] it"])
def test_capitalised_known_tag_is_a_problem_saying_tags_are_lowercase(line: str) -> None:
    assert "tags are lowercase" in only_problem(line).reason


def test_notice_without_text_is_a_problem() -> None:
    assert only_problem("[notice]   ").reason == "notice needs text to show"


def test_confirm_without_target_or_text_is_a_problem() -> None:
    assert "needs text" in only_problem("[confirm]").reason


def test_notice_with_a_target_is_a_problem() -> None:
    assert "notice takes no target" in only_problem("[notice:memo] Memo is public.").reason


@pytest.mark.parametrize(
    ("line", "reason_part"),
    [
        ("[required:memo reason", "not closed"),
        ("   [confirm:to_account", "not closed"),
        ("[required: memo] a space after the colon", "malformed label"),
        ("[required:memo-x] a dash in the target", "malformed label"),
        ("[Notice no bracket", "not closed"),
    ],
)
def test_unclosed_or_malformed_label_is_a_problem_with_the_stripped_line(line: str, reason_part: str) -> None:
    problem = only_problem(line)
    assert problem.text == line.strip()
    assert reason_part in problem.reason


def test_each_bad_line_is_reported_and_good_labels_on_other_lines_still_count() -> None:
    description = "[required:memo]\n[required:ghost]\n[notice] ok\n[notice:memo] no"
    parsed = parse_labels(description, PATHS)
    assert [label.line for label in parsed.labels] == [1, 3]
    assert [problem.line for problem in parsed.problems] == [2, 4]


def test_values_are_immutable() -> None:
    label = Label("notice", None, "x", 1)
    with pytest.raises(AttributeError):
        label.text = "y"  # type: ignore[misc]
