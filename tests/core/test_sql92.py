"""RocketMQ's SQL92 selector: grammar, parse-time rules and the semantics table (missing
properties, type mismatches, Java conversions), as RocketMQ's filter module defines them.

Each expected value below was read from RocketMQ's Java sources (SelectorParser.jj,
ComparisonExpression, UnaryExpression, LogicExpression, ExpressionTest); "error" is where the
Java evaluator throws, which RocketMQ's broker counts as no match."""

from __future__ import annotations

import math

import pytest

from core.errors import SelectorEvalError, SelectorSyntaxError
from core.filter.java_values import JInt, JLong, compare, java_double, java_integer
from core.filter.sql92 import EXPRESSION_LENGTH_MAX, compile_selector
from core.filter.sql92_lexer import Kind, tokenize

ERROR = "error"


def outcome(expression: str, props: dict[str, str]) -> bool | None | str:
    try:
        return compile_selector(expression).evaluate(props)
    except SelectorEvalError:
        return ERROR


# ------------------------------------------------------------------------------------ tokens


def test_keywords_are_any_case_and_lose_ties_to_longer_identifiers():
    kinds = [(t.kind, t.text) for t in tokenize("not NOTE Between betweenx is NULL nulls $x _y a1")]
    assert kinds[:-1] == [(Kind.KEYWORD, "NOT"), (Kind.IDENT, "NOTE"), (Kind.KEYWORD, "BETWEEN"),
                          (Kind.IDENT, "betweenx"), (Kind.KEYWORD, "IS"), (Kind.KEYWORD, "NULL"),
                          (Kind.IDENT, "nulls"), (Kind.IDENT, "$x"), (Kind.IDENT, "_y"), (Kind.IDENT, "a1")]
    assert kinds[-1][0] is Kind.END


@pytest.mark.parametrize(("text", "tokens"), [
    ("0", [(Kind.INTEGER, "0")]),
    ("07", [(Kind.INTEGER, "0"), (Kind.INTEGER, "7")]),  # JavaCC: "0" is a whole literal
    ("5L 5l", [(Kind.INTEGER, "5L"), (Kind.INTEGER, "5l")]),
    ("5. 5.5 .5 5E10 5.5e-3 5.E+2", [(Kind.DECIMAL, x) for x in ("5.", "5.5", ".5", "5E10", "5.5e-3", "5.E+2")]),
    ("5e", [(Kind.INTEGER, "5"), (Kind.IDENT, "e")]),  # an exponent needs digits
    ("'it''s' ''", [(Kind.STRING, "it's"), (Kind.STRING, "")]),
    ("'a\nb'", [(Kind.STRING, "a\nb")]),
    ("<><=>=<>=", [(Kind.OP, "<>"), (Kind.OP, "<="), (Kind.OP, ">="), (Kind.OP, "<>"), (Kind.OP, "=")]),
    ("a -- note\n= /* x\n y */ 1 -- to the end", [(Kind.IDENT, "a"), (Kind.OP, "="), (Kind.INTEGER, "1")]),
])
def test_tokens(text, tokens):
    assert [(t.kind, t.text) for t in tokenize(text)][:-1] == tokens


@pytest.mark.parametrize(("text", "column", "words"), [
    ("a = 'open", 5, "not closed"),
    ("a = 1 /* open", 7, "not closed"),
    ("a != 1", 3, "unexpected character '!'"),
    ("a = 1 # x", 7, "unexpected character '#'"),
    ("a.b = 1", 2, "unexpected character '.'"),  # RocketMQ's identifiers have no dots
    ("région = 'x'", 2, "unexpected character 'é'"),
    ("a =\v1", 4, "unexpected character"),  # \v is not one of RocketMQ's blanks
])
def test_lexical_errors_name_their_column(text, column, words):
    with pytest.raises(SelectorSyntaxError, match=words) as caught:
        compile_selector(text)
    assert caught.value.position == column - 1
    assert f"(at column {column})" in str(caught.value)


# ------------------------------------------------------------------------------------ grammar


@pytest.mark.parametrize("text", [
    "a=3 and b<>4 And c>5 AND d<=4", "a=3 or b<>4 Or c>5 OR d<=4", "a in ('3', '4', '5')",
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))", "(a between 2 and 10) AND (b not between 6 and 9)",
    "a is null", "a is not null", "a <= now", "a=3 and b contains 'xxx' and c not contains 'xxx'",
    "a startswith 'x' or b not endswith 'y'", "TRUE", "FALSE", "NULL", "a", "NOT a", "NOT (a > 1)",
    "a = TRUE", "5 = TRUE", "'5' = 5", "a > -5", "a > +5", "-5 < a", "a between -5 and -10", "a > b",
    "(a = 'x') = TRUE", "a = 1 = TRUE", "5 between 1 and 10", "(((a > 1)))", "a = -NULL", "a > -'x'",
    "a between 1 and 1", "a between 1 and 1.5", "a = 0.0", "a > 9223372036854775807", "a > 5L",
])
def test_rocketmq_grammar_accepts(text):
    assert compile_selector(text).expression == text


@pytest.mark.parametrize(("text", "column", "words"), [
    ("a and between 2 and 10", 7, "expected a property, a literal or \\("),  # RocketMQ's ParserTest
    (" a between 10 and 0", 12, "lower bound of BETWEEN \\(10\\) is above the upper \\(0\\)"),
    ("a between 'b' and 'a'", 11, "lower bound"),
    ("a between 1 and 'x'", 17, "cannot be compared"),
    ("a between NULL and 1", 3, "cannot be NULL"),
    ("a between 1 and NULL", 3, "cannot be NULL"),
    ("a between TRUE and TRUE", 11, "TRUE cannot be compared with >="),
    ("a > 'x'", 5, "'x' cannot be compared with >"),
    ("a < TRUE", 5, "TRUE cannot be compared with <"),
    ("a >= NULL", 6, "NULL cannot be compared"),
    ("(a > 1) > 0", 2, "a condition cannot be compared"),
    ("a <= (b = 1)", 7, "a condition cannot be compared"),
    ("a = NULL", 5, "use IS NULL"),
    ("NULL <> a", 1, "use IS NULL"),
    ("TRUE = 5", 8, "TRUE cannot be compared with a non-boolean literal"),
    ("FALSE = 'false'", 9, "FALSE cannot be compared"),
    ("5", 1, "the selector needs a condition"),
    ("'x'", 1, "the selector needs a condition"),
    ("-a", 1, "the selector needs a condition"),
    ("a > 1 AND 5", 11, "AND needs a condition"),
    ("'x' OR a > 1", 1, "OR needs a condition"),
    ("NOT 5", 5, "NOT needs a condition"),
    ("-a IN ('x')", 4, "IN needs a property"),
    ("'a' IN ('x')", 5, "IN needs a property"),
    ("a IN ()", 7, "a string literal"),
    ("a IN (1, 2)", 7, "a string literal"),
    ("a IN ('x' 'y')", 11, "\\) or ,"),
    ("a contains x", 12, "a string literal"),  # RocketMQ's ExpressionTest
    ("a not contains 123", 16, "a string literal"),
    ("'axb' contains ", 16, "a string literal"),
    ("a is 5", 6, "NULL or NOT NULL after IS"),
    ("a is not 5", 6, "NULL or NOT NULL after IS"),
    ("(a > 1", 7, "\\) to close"),
    ("a > 1)", 6, "unexpected '\\)' after a complete expression"),
    ("a = 1 AN b = 2", 7, "unexpected 'AN'"),  # RocketMQ silently selects a = 1
    ("a = 07", 6, "unexpected '7'"),  # RocketMQ silently selects a = 0
    ("a = 0L", 6, "unexpected 'L'"),
    ("a > 100000000000000000000000", 5, "larger than a Long"),  # RocketMQ's ParserTest
    ("a > 9223372036854775808", 5, "larger than a Long"),
    ("a > 1e400", 5, "larger than a Double"),
    ("", 1, "expected a property"),
    ("a > ", 5, "expected a property"),
])
def test_rocketmq_grammar_refuses_with_the_column(text, column, words):
    with pytest.raises(SelectorSyntaxError, match=words) as caught:
        compile_selector(text)
    assert caught.value.position == column - 1, str(caught.value)


def test_a_selector_longer_than_the_limit_or_nested_too_deeply_is_refused_cleanly():
    with pytest.raises(SelectorSyntaxError, match="characters long"):
        compile_selector("a = 1 OR " * (EXPRESSION_LENGTH_MAX // 9) + "a = 1")
    with pytest.raises(SelectorSyntaxError, match="nests more than 200 levels"):
        compile_selector("(" * 4000 + "a = 1" + ")" * 4000)
    with pytest.raises(SelectorSyntaxError, match="nests more than 200 levels"):
        compile_selector(" OR ".join(["a = 1"] * 800))  # parsed in a loop, but a deep tree
    assert compile_selector(" OR ".join(["a = 1"] * 150)).matches({"a": "1"})


def test_parsing_happens_once_per_text():
    assert compile_selector("region = 'eu'") is compile_selector("region = 'eu'")


# ------------------------------------------------------------------------------------ semantics

MISSING: dict[str, str] = {}

SEMANTICS = [
    # three-valued logic: a missing property is unknown, and only true delivers
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "y"}, False),
    ("a = 'x'", MISSING, None),
    ("a <> 'x'", MISSING, None),
    ("'x' = a", MISSING, False),  # RocketMQ: a known left and an unknown right is false, not unknown
    ("a = b", MISSING, True),  # two unknowns are equal (IS NULL is made of this)
    ("a = b", {"a": "1"}, False),
    ("a = b", {"b": "1"}, None),
    ("a IS NULL", MISSING, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("NOT a = 'x'", MISSING, None),
    ("a = 'x' AND b = 'y'", {"b": "z"}, False),  # false wins over unknown
    ("a = 'x' AND b = 'y'", {"b": "y"}, None),
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),  # true wins over unknown
    ("a = 'x' OR b = 'y'", {"b": "z"}, None),
    ("TRUE", MISSING, True),
    ("FALSE OR NULL", MISSING, None),
    ("a", {"a": "true"}, False),  # a bare property is text, never a Boolean
    ("a", MISSING, None),
    ("NOT a", {"a": "true"}, True),
    # numbers: the property is read as the literal's Java type
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "+6"}, True),
    ("a > 5", {"a": "٦"}, True),  # Integer.valueOf takes any Unicode digit
    ("a > 5", {"a": "5.5"}, ERROR),  # Integer.valueOf("5.5") throws
    ("a > 5", {"a": " 6"}, ERROR),
    ("a > 5", {"a": "1_000"}, ERROR),
    ("a > 5", {"a": "3000000000"}, ERROR),  # not an Integer
    ("a > 5", {"a": "abc"}, ERROR),
    ("a > 2147483648", {"a": "3000000000"}, True),  # a Long literal reads a Long
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.0", {"a": " 6d "}, True),  # Double.valueOf trims and takes a type suffix
    ("a > 5.0", {"a": "0x1.8p3"}, True),  # and hex
    ("a > 5.0", {"a": "Infinity"}, True),
    ("a > 5.0", {"a": "NaN"}, True),  # NaN sorts above everything
    ("a < 5.0", {"a": "NaN"}, False),
    ("a = 0.0", {"a": "-0"}, False),  # Double.compare: -0.0 < 0.0
    ("a < 0.0", {"a": "-0.0"}, True),
    ("a > 5.0", {"a": "nan"}, ERROR),  # only Java's spelling
    ("a > 5.0", {"a": "inf"}, ERROR),
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a = 5", {"a": "5.0"}, ERROR),
    ("a = 5.0", {"a": "5"}, True),
    ("5 = a", {"a": "5"}, True),
    ("a = -5", {"a": "-5"}, True),
    ("-a = 5", {"a": "-5"}, None),  # minus of a property is unknown
    ("-(a = 0) IS NULL", {"a": "0"}, True),  # minus of a condition too, but the condition is evaluated
    ("-(a = 0) IS NULL", {"a": "2147483648"}, ERROR),  # and its failure fails the selector
    ("a > b", {"a": "5.5", "b": "1"}, True),  # two properties: both as Doubles
    ("a > b", {"a": "x", "b": "1"}, ERROR),
    ("a = b", {"a": "3.14", "b": "3.14"}, True),  # equal texts
    ("a <> b", {"a": "3.14", "b": "3.141"}, True),
    ("a = '5'", {"a": "5.0"}, False),  # two texts are compared as texts by =
    ("'5' = 5", MISSING, True),
    ("5 = 5.0", MISSING, True),
    ("5 = 5L", MISSING, True),
    ("2147483648 = 2147483648.0", MISSING, True),
    # booleans
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "yes"}, True),  # Boolean.valueOf: anything but "true" is false
    ("TRUE = a", {"a": "true"}, ERROR),  # Java casts the Boolean to String: ClassCastException
    ("5 = TRUE", MISSING, False),
    ("(a = 'x') = TRUE", {"a": "x"}, True),
    ("(a = 'x') = 5", {"a": "x"}, False),
    ("(a = 'x') = TRUE", MISSING, None),
    # an error anywhere evaluated fails the whole selector; a decided AND/OR skips its right side
    ("a > 5 OR b = 'y'", {"a": "x", "b": "y"}, ERROR),
    ("b = 'y' OR a > 5", {"a": "x", "b": "y"}, True),
    ("b = 'y' AND a > 5", {"a": "x", "b": "n"}, False),
    ("b = 'y' AND a > 5", {"a": "x", "b": "y"}, ERROR),
    # BETWEEN is >= AND <=; NOT BETWEEN is < OR >
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a BETWEEN 1 AND 3", MISSING, None),
    ("a BETWEEN 0 AND 100", {"a": "abc"}, ERROR),  # RocketMQ's ExpressionTest
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
    ("a BETWEEN b AND c", {"a": "2", "b": "1"}, None),
    ("a BETWEEN -5 AND -10", {"a": "-7"}, False),  # negated bounds are not checked for order
    # IN: texts only, a missing property is unknown
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x')", MISSING, None),
    ("a NOT IN ('x')", {"a": "z"}, True),
    ("a NOT IN ('x')", MISSING, None),
    ("a IN ('1')", {"a": "01"}, False),
    ("TAGS IN ('TagA', 'TagB')", {"TAGS": "TagB"}, True),  # system properties are properties too
    # CONTAINS / STARTSWITH / ENDSWITH: false (never unknown) when missing or not text
    ("a CONTAINS 'x'", {"a": "axb"}, True),
    ("a STARTSWITH 'ax'", {"a": "axb"}, True),
    ("a ENDSWITH 'xb'", {"a": "axb"}, True),
    ("a CONTAINS 'u'", {"a": "axb"}, False),
    ("a NOT CONTAINS 'u'", {"a": "axb"}, True),
    ("a CONTAINS 'x'", MISSING, False),
    ("a NOT CONTAINS 'x'", MISSING, False),
    ("a CONTAINS ''", {"a": "axb"}, False),
    ("a NOT CONTAINS ''", {"a": "axb"}, False),
    ("' ' CONTAINS ' '", MISSING, True),
    ("5 CONTAINS '5'", MISSING, False),
    ("(a = 'x') NOT STARTSWITH 't'", {"a": "x"}, False),
    ("'s' ENDSWITH '\\'", MISSING, False),
]


@pytest.mark.parametrize(("expression", "props", "expected"), SEMANTICS)
def test_rocketmq_semantics(expression, props, expected):
    assert outcome(expression, props) == expected


def test_matches_delivers_only_a_true_result():
    selector = compile_selector("region = 'eu' AND amount > 100")
    assert selector.matches({"region": "eu", "amount": "150"})
    assert not selector.matches({"region": "eu", "amount": "50"})
    assert not selector.matches({"region": "eu"})  # unknown
    assert not selector.matches({"region": "eu", "amount": "150.5"})  # an error


# ------------------------------------------------------------------------------------ Java values


@pytest.mark.parametrize(("text", "value"), [("7", 7), ("-7", -7), ("+7", 7), ("0007", 7), ("٣", 3),
                                             ("2147483647", 2147483647), ("-2147483648", -2147483648)])
def test_integer_value_of(text, value):
    assert java_integer(text) == value


@pytest.mark.parametrize("text", ["", "+", "-", " 7", "7 ", "1_0", "2147483648", "7.0", "0x7", "++7"])
def test_integer_value_of_refuses(text):
    with pytest.raises(SelectorEvalError):
        java_integer(text)


@pytest.mark.parametrize(("text", "value"), [("1", 1.0), ("1.", 1.0), (".5", 0.5), ("1e3", 1000.0), ("1.5f", 1.5),
                                             ("\t2D\n", 2.0), ("-Infinity", -math.inf), ("0x10p0", 16.0),
                                             ("1e400", math.inf)])
def test_double_value_of(text, value):
    assert java_double(text) == value


@pytest.mark.parametrize("text", ["", ".", "e3", "inf", "infinity", "NAN", "1_0", "٣", "0x10", "1.5ff", "1e"])
def test_double_value_of_refuses(text):
    with pytest.raises(SelectorEvalError):
        java_double(text)


def test_compare_converts_like_java():
    assert compare(JInt(5), JLong(5)) == 0
    assert compare(JLong(3_000_000_000), 2.5) == 1
    assert compare("5", JInt(6)) == -1
    assert compare(JInt(5), True) == -1  # incomparable types answer -1
    assert compare(1.0, math.nan) == -1 and compare(math.nan, math.nan) == 0
    with pytest.raises(SelectorEvalError):
        compare(True, "true")


def test_the_evaluator_is_sans_io_with_no_broker_imports():
    """core/filter imports the standard library, itself and the kernel's errors: no broker,
    store, remoting, trio or client, so a proxy or a tool can evaluate selectors as they are."""
    import ast
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "core" / "filter").glob("*.py")) + [root / "core" / "errors.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name == "core.errors" or name.startswith("core.filter"), \
                    f"{path.relative_to(root)} imports {name}"
