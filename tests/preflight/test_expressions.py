from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from preflight.errors import ExpressionError
from preflight.expressions import ROOTS, Expression, compile_expression, evaluate


def reads(source: str) -> frozenset[str]:
    return compile_expression(source).reads


def test_roots_are_the_four_the_design_names() -> None:
    assert ROOTS == ("arg", "measure", "principal", "env")


def test_reads_name_each_argument_and_measure_used() -> None:
    assert reads("measure.balance >= arg.amount") == {"measure:balance", "arg:amount"}


def test_reads_keep_the_full_dotted_path_of_nested_arguments() -> None:
    assert reads("arg.payee.iban.startsWith('DE') && arg.amount > 0") == {"arg:payee.iban", "arg:amount"}


def test_reads_of_a_measure_stop_at_the_measure_name() -> None:
    assert reads("measure.account.balance.cents > 0") == {"measure:account"}


def test_reads_of_principal_and_env() -> None:
    assert reads("principal == 'alice' && env.region == 'eu'") == {"principal", "env:region"}


def test_root_names_inside_string_literals_are_not_reads() -> None:
    assert reads("arg.memo != 'arg.secret' && arg.memo != \"measure.x\" && arg.memo != '''env.y'''") == {
        "arg:memo"
    }


def test_root_names_inside_raw_strings_with_a_trailing_backslash_are_not_reads() -> None:
    assert reads("arg.path != r'C:\\' && arg.note != 'measure.x'") == {"arg:path", "arg:note"}


def test_root_names_inside_comments_are_not_reads() -> None:
    assert reads("arg.amount > 0 // was measure.balance\n") == {"arg:amount"}


def test_a_root_used_as_a_whole_reads_everything_under_it() -> None:
    assert reads("size(arg) > 2") == {"arg:*"}
    assert reads('arg["amount"] > 2') == {"arg:*"}
    assert reads("arg.items[0] > 2 && size(measure) == 1") == {"arg:items", "measure:*"}


def test_comprehension_variables_are_allowed_and_their_fields_are_not_reads() -> None:
    expr = compile_expression("arg.lines.all(line, line.amount > 0)")
    assert expr.reads == {"arg:lines"}
    assert evaluate(expr, args={"lines": [{"amount": 1}, {"amount": 2}]}, measures={}) is True


def test_a_field_called_like_a_root_is_not_a_root() -> None:
    assert reads("arg.lines.exists(l, l.arg == 1)") == {"arg:lines"}


def test_unknown_root_is_rejected_at_compile_time_naming_it() -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_expression("user.role == 'admin' && arg.amount > 1")
    assert "'user'" in caught.value.reason
    assert caught.value.source == "user.role == 'admin' && arg.amount > 1"


def test_syntax_error_is_rejected_at_compile_time() -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_expression("arg.amount >")
    assert caught.value.reason.startswith("does not parse")


@pytest.mark.parametrize("source", ["", "   \n "])
def test_empty_source_is_rejected(source: str) -> None:
    with pytest.raises(ExpressionError):
        compile_expression(source)


def test_expressions_compare_by_source_not_program() -> None:
    assert compile_expression("arg.a > 1") == compile_expression("arg.a > 1")
    assert isinstance(compile_expression("arg.a > 1"), Expression)


def test_int_literal_compares_with_float_argument() -> None:
    expr = compile_expression("arg.amount > 1000")
    assert evaluate(expr, args={"amount": 1000.5}, measures={}) is True
    assert evaluate(expr, args={"amount": 999.5}, measures={}) is False
    assert evaluate(expr, args={"amount": 1001}, measures={}) is True


def test_measure_compares_with_argument_of_the_other_numeric_type() -> None:
    expr = compile_expression("measure.balance >= arg.amount")
    assert evaluate(expr, args={"amount": 50.25}, measures={"balance": 50}) is False
    assert evaluate(expr, args={"amount": 50}, measures={"balance": 50.0}) is True


def test_principal_and_env_are_visible() -> None:
    expr = compile_expression("principal == 'alice' && env.region == 'eu'")
    assert evaluate(expr, args={}, measures={}, principal="alice", env={"region": "eu"}) is True
    assert evaluate(expr, args={}, measures={}, principal="bob", env={"region": "eu"}) is False


def test_frozen_mappings_are_accepted_as_inputs() -> None:
    expr = compile_expression("arg.payee.iban == 'X'")
    args = MappingProxyType({"payee": MappingProxyType({"iban": "X"})})
    assert evaluate(expr, args=args, measures=MappingProxyType({})) is True


def test_a_type_error_raises_rather_than_returning_false() -> None:
    expr = compile_expression("arg.amount > 1000")
    with pytest.raises(ExpressionError) as caught:
        evaluate(expr, args={"amount": "lots"}, measures={})
    assert caught.value.reason.startswith("type mismatch")


def test_a_missing_value_raises_rather_than_returning_false() -> None:
    expr = compile_expression("measure.balance >= arg.amount")
    with pytest.raises(ExpressionError) as caught:
        evaluate(expr, args={"amount": 1}, measures={})
    assert "balance" in caught.value.reason


def test_arithmetic_overflow_raises() -> None:
    with pytest.raises(ExpressionError):
        evaluate(compile_expression("arg.n + 1 > 0"), args={"n": 9223372036854775807}, measures={})


def test_a_non_bool_result_raises() -> None:
    expr = compile_expression("arg.amount + 1")
    with pytest.raises(ExpressionError) as caught:
        evaluate(expr, args={"amount": 1}, measures={})
    assert "not a boolean" in caught.value.reason


def test_an_unknown_function_raises_at_evaluation() -> None:
    with pytest.raises(ExpressionError):
        evaluate(compile_expression("launch(arg.x)"), args={"x": 1}, measures={})


# --- list helpers ------------------------------------------------------------------------------------------


def _holds(source: str, **args: Any) -> bool:
    return evaluate(compile_expression(source), args=args, measures={})


def test_zip_compares_two_lists_position_by_position() -> None:
    check = "zip(arg.old, arg.new).all(p, p[0] != p[1])"
    assert _holds(check, old=["a", "b"], new=["c", "d"]) is True
    assert _holds(check, old=["a", "b"], new=["c", "b"]) is False


def test_zip_of_lists_of_different_lengths_has_no_answer() -> None:
    with pytest.raises(ExpressionError, match="zip"):
        _holds("zip(arg.old, arg.new).all(p, p[0] != p[1])", old=["a", "b"], new=["c"])


def test_indices_give_every_position_of_a_list() -> None:
    assert _holds("indices(arg.xs).all(i, arg.xs[i] <= arg.ys[i])", xs=[1, 2], ys=[1, 3]) is True
    assert _holds("indices(arg.xs) == [0, 1, 2]", xs=["a", "b", "c"]) is True


def test_distinct_drops_repeats_by_json_equality() -> None:
    assert _holds("size(distinct(arg.xs)) == size(arg.xs)", xs=["a", "b"]) is True
    assert _holds("size(distinct(arg.xs)) == size(arg.xs)", xs=["a", "b", "a"]) is False
    assert _holds("distinct(arg.xs) == [1, true]", xs=[1, True, 1]) is True


def test_index_of_finds_the_first_position_or_minus_one() -> None:
    assert _holds("index_of(arg.xs, 'b') == 1 && index_of(arg.xs, 'z') == -1", xs=["a", "b", "b"]) is True


def test_a_list_helper_given_something_else_than_a_list_has_no_answer() -> None:
    with pytest.raises(ExpressionError):
        _holds("size(distinct(arg.x)) == 1", x="abc")


def test_an_expression_reading_list_helpers_still_names_only_its_roots_as_reads() -> None:
    expr = compile_expression("zip(arg.a, measure.b).all(p, p[0] == p[1])")
    assert expr.reads == {"arg:a", "measure:b"}
