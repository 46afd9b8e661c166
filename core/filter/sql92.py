"""RocketMQ's SQL92 message selector: parse once, then evaluate per message with no re-parsing.

``compile_selector("region = 'eu' AND amount > 100")`` gives a :class:`Selector` whose
``matches(properties)`` says whether a message with those properties is delivered. The tree
from :mod:`core.filter.sql92_parser` is turned into nested closures once; a message costs one
call per node.

Semantics are RocketMQ's (its filter module, adapted from ActiveMQ's selectors):

- three-valued logic: a missing property is unknown (``None``), ``x = y`` with one side unknown
  is unknown, AND/OR skip their right side when the left decides, and only a true result
  delivers the message;
- properties are text; compared with a number they are read as that number's Java type
  (``a > 5`` reads ``a`` with ``Integer.valueOf``, ``a > 5.0`` with ``Double.valueOf``); two
  properties compared with ``<``/``>`` are both read as Doubles; a property that does not read
  is an error, and an error anywhere makes the whole selector fail for that message (no match);
- see :mod:`core.filter.java_values` for the conversions and :mod:`core.filter.sql92_parser` for
  the grammar and the two places where we are stricter or kinder than RocketMQ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from types import MappingProxyType

from core.errors import SelectorEvalError, SelectorSyntaxError
from core.filter.java_values import Value, compare, java_double, java_equals
from core.filter.sql92_parser import (
    Cast,
    Condition,
    Const,
    Equal,
    In,
    Logic,
    Neg,
    Node,
    Not,
    Order,
    Prop,
    Text,
    parse,
)

__all__ = ["EXPRESSION_LENGTH_MAX", "Selector", "SelectorEvalError", "SelectorSyntaxError", "compile_selector"]

Properties = Mapping[str, str]
Eval = Callable[[Properties], "Value | None"]

EXPRESSION_LENGTH_MAX = 8192  # a selector is a few clauses; a longer one is refused before parsing
# conditions inside conditions, at most: evaluation recurses once per level, on the broker's
# own stack, so a deeper tree is refused when it arrives rather than failing at each pull
DEPTH_MAX = 200


class Selector:
    """A parsed selector, safe to share: evaluating keeps no state."""

    __slots__ = ("_evaluate", "expression")

    def __init__(self, expression: str, tree: Condition) -> None:
        self.expression = expression
        self._evaluate = _compile(tree)

    def evaluate(self, properties: Properties) -> bool | None:
        """True, False or None (unknown); raises SelectorEvalError where RocketMQ's evaluator throws."""
        return self._evaluate(properties)  # type: ignore[return-value]

    def matches(self, properties: Properties) -> bool:
        """Whether a message with ``properties`` is delivered: only a true result is; an error is not."""
        try:
            return self._evaluate(properties) is True
        except SelectorEvalError:
            return False

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


@lru_cache(maxsize=256)
def compile_selector(expression: str) -> Selector:
    """Parse ``expression`` (cached by its text); raises SelectorSyntaxError naming where it fails."""
    if len(expression) > EXPRESSION_LENGTH_MAX:
        raise SelectorSyntaxError(f"the selector is {len(expression)} characters long, more than "
                                  f"{EXPRESSION_LENGTH_MAX}", EXPRESSION_LENGTH_MAX)
    try:
        tree = parse(expression)
    except RecursionError:
        raise SelectorSyntaxError(f"the selector nests more than {DEPTH_MAX} levels deep", 0) from None
    if _depth(tree) > DEPTH_MAX:
        raise SelectorSyntaxError(f"the selector nests more than {DEPTH_MAX} levels deep", 0)
    return Selector(expression, tree)


def _depth(tree: Node) -> int:
    """The tree's depth, without recursion (a long AND/OR chain is a deep left spine)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(node, (Logic, Equal, Order)):
            todo += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, (Not, Neg, Cast, In, Text)):
            todo.append((node.operand, depth + 1))
    return deepest


def _compile(node: Node) -> Eval:
    if isinstance(node, Prop):
        name = node.name
        return lambda props: props.get(name)
    if isinstance(node, Const):
        value = node.value
        return lambda _props: value
    if isinstance(node, Neg):
        return _neg(_compile(node.operand))
    if isinstance(node, Cast):
        name = node.operand.name
        # a property is text, never a Boolean: false when present, unknown when missing
        return lambda props: None if props.get(name) is None else False
    if isinstance(node, Not):
        return _not(_compile(node.operand))
    if isinstance(node, Logic):
        return (_and if node.op == "AND" else _or)(_compile(node.left), _compile(node.right))
    if isinstance(node, Equal):
        if isinstance(node.left, Prop) and isinstance(node.right, Const) and type(node.right.value) is str:
            return _property_is(node.left.name, node.right.value)
        return _equal(_compile(node.left), _compile(node.right))
    if isinstance(node, Order):
        return _order(node.op, _compile(node.left), _compile(node.right))
    if isinstance(node, In):
        return _in(node.operand.name, node.values, node.negated)
    return _text(node)


def _neg(operand: Eval) -> Eval:
    def evaluate(props: Properties) -> None:
        operand(props)  # for its failure only: minus of a condition is unknown
    return evaluate


def _not(operand: Eval) -> Eval:
    def evaluate(props: Properties) -> bool | None:
        value = operand(props)
        return None if value is None else not value
    return evaluate


def _and(left: Eval, right: Eval) -> Eval:
    def evaluate(props: Properties) -> bool | None:
        lv = left(props)
        if lv is False:
            return False
        rv = right(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    return evaluate


def _or(left: Eval, right: Eval) -> Eval:
    def evaluate(props: Properties) -> bool | None:
        lv = left(props)
        if lv is True:
            return True
        rv = right(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    return evaluate


def _equal(left: Eval, right: Eval) -> Eval:
    def evaluate(props: Properties) -> bool | None:
        lv, rv = left(props), right(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True  # RocketMQ: null equals null (this is what IS NULL is made of)
            return None if lv is None else False
        if java_equals(lv, rv):
            return True
        return compare(lv, rv) == 0
    return evaluate


def _property_is(name: str, text: str) -> Eval:
    """``name = 'text'``, the common case, without the general conversions (two texts are
    equal exactly when they are the same text)."""
    def evaluate(props: Properties) -> bool | None:
        value = props.get(name)
        return None if value is None else value == text
    return evaluate


_ORDER_TESTS: Mapping[str, Callable[[int], bool]] = MappingProxyType({
    "<": lambda c: c < 0, "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0})


def _order(op: str, left: Eval, right: Eval) -> Eval:
    test = _ORDER_TESTS[op]

    def evaluate(props: Properties) -> bool | None:
        lv = left(props)
        if lv is None:
            return None
        rv = right(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # two texts are ordered as Doubles
            return test(compare(java_double(lv), java_double(rv)))
        return test(compare(lv, rv))
    return evaluate


def _in(name: str, values: frozenset[str], negated: bool) -> Eval:
    def evaluate(props: Properties) -> bool | None:
        value = props.get(name)
        if value is None:
            return None
        return (value in values) is not negated
    return evaluate


def _text(node: Text) -> Eval:
    operand, search, negated = _compile(node.operand), node.search, node.negated
    found: Callable[[str], bool] = {"CONTAINS": lambda v: search in v, "STARTSWITH": lambda v: v.startswith(search),
                                    "ENDSWITH": lambda v: v.endswith(search)}[node.op]

    def evaluate(props: Properties) -> bool | None:
        if not search:
            return False
        value = operand(props)
        if type(value) is not str:  # unknown, a number or a Boolean: false, both ways
            return False
        return found(value) is not negated
    return evaluate
