"""RocketMQ's SQL92 selector grammar, parsed to a small tree with RocketMQ's parse-time rules.

```
selector    := or END
or          := and (OR and)*
and         := equality (AND equality)*
equality    := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
comparison  := unary ( ('>'|'>='|'<'|'<=') unary
                     | [NOT] BETWEEN unary AND unary
                     | [NOT] IN '(' string (',' string)* ')'
                     | [NOT] (CONTAINS|STARTSWITH|ENDSWITH) string )*
unary       := '+' unary | '-' unary | NOT unary | primary
primary     := literal | identifier | '(' or ')'
literal     := string | integer | decimal | TRUE | FALSE | NULL
```

The rules RocketMQ checks while it parses (``ComparisonExpression.check*``, ``asBooleanExpression``,
``createBetween``, ``createInFilter``) are checked here too, each refusal naming the column.

Where RocketMQ is wrong, this parser is stricter or kinder, never silently different:

- RocketMQ stops at the end of the first complete expression and ignores the rest, so
  ``a = 1 AN b = 2`` selects ``a = 1`` and ``a = 07`` selects ``a = 0``. Here anything left over
  is refused.
- RocketMQ refuses every decimal literal below ``Double.MIN_VALUE``, ``0.0`` included (it
  compares with the smallest *positive* double). Here ``0.0`` is a number like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import SelectorEvalError, SelectorSyntaxError
from core.filter.java_values import INT_MAX, INT_MIN, LONG_MAX, JInt, JLong, Value, compare
from core.filter.sql92_lexer import Kind, Token, tokenize


@dataclass(frozen=True, slots=True)
class Prop:
    name: str
    position: int


@dataclass(frozen=True, slots=True)
class Const:
    value: Value | None
    position: int
    literal: bool = True  # False: the result of a unary minus, which RocketMQ's checks let through


@dataclass(frozen=True, slots=True)
class Neg:
    """A minus before a condition: unknown, but the condition is still evaluated (and may fail)."""

    operand: Node


@dataclass(frozen=True, slots=True)
class Cast:
    """A bare property where a condition belongs: unknown when missing, else false (a
    property is text, never a Boolean)."""

    operand: Prop


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class Logic:
    op: str  # AND | OR
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Equal:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Order:
    op: str  # < <= > >=
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class In:
    operand: Prop
    values: frozenset[str]
    negated: bool


@dataclass(frozen=True, slots=True)
class Text:
    op: str  # CONTAINS | STARTSWITH | ENDSWITH
    operand: Node
    search: str
    negated: bool


Node = Prop | Const | Neg | Cast | Not | Logic | Equal | Order | In | Text
Condition = Cast | Not | Logic | Equal | Order | In | Text | Const
NULL_CHECK = Const(None, -1)  # the right side of IS NULL


def is_condition(node: Node) -> bool:
    """RocketMQ's BooleanExpression: what may stand where a condition belongs."""
    if isinstance(node, Const):
        return node.literal and (node.value is None or isinstance(node.value, bool))
    return not isinstance(node, (Prop, Neg))


def position_of(node: Node) -> int:
    while not isinstance(node, (Prop, Const)):
        node = node.left if isinstance(node, (Logic, Equal, Order)) else node.operand
    return node.position


def parse(text: str) -> Condition:
    """The selector ``text`` as a tree; raises SelectorSyntaxError naming where it fails."""
    return _Parser(text).selector()


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.at = 0

    # ------------------------------------------------------------------ token helpers

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def _next(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def _is(self, kind: Kind, text: str, ahead: int = 0) -> bool:
        token = self.tokens[min(self.at + ahead, len(self.tokens) - 1)]
        return token.kind is kind and token.text == text

    def _keyword(self, word: str, ahead: int = 0) -> bool:
        return self._is(Kind.KEYWORD, word, ahead)

    def _op(self, op: str) -> bool:
        return self._is(Kind.OP, op)

    def _expect(self, kind: Kind, text: str | None, what: str) -> Token:
        token = self.token
        if token.kind is not kind or (text is not None and token.text != text):
            raise SelectorSyntaxError(f"expected {what}, found {token.shown()}", token.position)
        return self._next()

    def _string(self, after: str) -> str:
        return self._expect(Kind.STRING, None, f"a string literal in single quotes after {after}").text

    # ------------------------------------------------------------------ grammar

    def selector(self) -> Condition:
        node = self._or()
        if self.token.kind is not Kind.END:
            raise SelectorSyntaxError(f"unexpected {self.token.shown()} after a complete expression",
                                      self.token.position)
        return _condition(node, "the selector")

    def _or(self) -> Node:
        left = self._and()
        while self._keyword("OR"):
            self._next()
            left = Logic("OR", _condition(left, "OR"), _condition(self._and(), "OR"))
        return left

    def _and(self) -> Node:
        left = self._equality()
        while self._keyword("AND"):
            self._next()
            left = Logic("AND", _condition(left, "AND"), _condition(self._equality(), "AND"))
        return left

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            if self._op("=") or self._op("<>"):
                op = self._next().text
                right = self._comparison()
                equal = _equal(left, right, op)
                left = equal if op == "=" else Not(equal)
            elif self._keyword("IS") and self._keyword("NULL", 1):
                self.at += 2
                left = Equal(left, NULL_CHECK)
            elif self._keyword("IS") and self._keyword("NOT", 1) and self._keyword("NULL", 2):
                self.at += 3
                left = Not(Equal(left, NULL_CHECK))
            elif self._keyword("IS"):
                raise SelectorSyntaxError(f"expected NULL or NOT NULL after IS, found {self.tokens[self.at + 1].shown()}",
                                          self.tokens[self.at + 1].position)
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            token = self.token
            if token.kind is Kind.OP and token.text in ("<", "<=", ">", ">="):
                self._next()
                left = _order(token.text, left, self._unary())
                continue
            negated = self._keyword("NOT") and self.tokens[self.at + 1].kind is Kind.KEYWORD and \
                self.tokens[self.at + 1].text in ("BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH")
            word = self.tokens[self.at + 1 if negated else self.at]
            if word.kind is not Kind.KEYWORD or word.text not in ("BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"):
                return left
            self.at += 2 if negated else 1
            if word.text == "BETWEEN":
                low = self._unary()
                self._expect(Kind.KEYWORD, "AND", "AND between the two bounds of BETWEEN")
                left = _between(left, low, self._unary(), negated, word.position)
            elif word.text == "IN":
                left = In(_in_operand(left, word.position), self._in_list(), negated)
            else:
                left = Text(word.text, left, self._string(word.text), negated)

    def _in_list(self) -> frozenset[str]:
        self._expect(Kind.OP, "(", "( after IN")
        values = [self._string("IN (")]
        while self._op(","):
            self._next()
            values.append(self._string(","))
        self._expect(Kind.OP, ")", ") or , in the IN list")
        return frozenset(values)

    def _unary(self) -> Node:
        token = self.token
        if token.kind is Kind.OP and token.text == "+":
            self._next()
            return self._unary()
        if token.kind is Kind.OP and token.text == "-":
            self._next()
            return _negate(self._unary(), token.position)
        if token.kind is Kind.KEYWORD and token.text == "NOT":
            self._next()
            return Not(_condition(self._unary(), "NOT"))
        return self._primary()

    def _primary(self) -> Node:
        token = self._next()
        if token.kind is Kind.IDENT:
            return Prop(token.text, token.position)
        if token.kind is Kind.STRING:
            return Const(token.text, token.position)
        if token.kind is Kind.INTEGER:
            return Const(_integer(token), token.position)
        if token.kind is Kind.DECIMAL:
            return Const(_decimal(token), token.position)
        if token.kind is Kind.KEYWORD and token.text in ("TRUE", "FALSE", "NULL"):
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[token.text], token.position)
        if token.kind is Kind.OP and token.text == "(":
            inner = self._or()
            self._expect(Kind.OP, ")", ") to close the (")
            return inner
        raise SelectorSyntaxError(f"expected a property, a literal or (, found {token.shown()}", token.position)


def _integer(token: Token) -> JInt | JLong:
    value = int(token.text.rstrip("lL"))
    if value > LONG_MAX:
        raise SelectorSyntaxError(f"{token.text[:40]} is larger than a Long", token.position)
    return JInt(value) if INT_MIN <= value <= INT_MAX else JLong(value)


def _decimal(token: Token) -> float:
    value = float(token.text)
    if value == float("inf"):
        raise SelectorSyntaxError(f"{token.text[:40]} is larger than a Double", token.position)
    return value


def _negate(node: Node, position: int) -> Const | Neg:
    """RocketMQ's unary minus: a number keeps its type; anything else is unknown (a condition
    is still evaluated: its failure fails the selector, as in RocketMQ)."""
    if isinstance(node, Const):
        value = node.value
        if type(value) is JInt:
            return Const(JInt(-value), position, literal=False)
        if type(value) is JLong:
            return Const(JLong(-value), position, literal=False)
        if type(value) is float:
            return Const(-value, position, literal=False)
    if isinstance(node, (Prop, Const)):
        return Const(None, position, literal=False)
    return Neg(node)


def _condition(node: Node, where: str) -> Condition:
    if isinstance(node, Prop):
        return Cast(node)
    if not is_condition(node):
        raise SelectorSyntaxError(f"{where} needs a condition, not a value", position_of(node))
    return node  # type: ignore[return-value]


def _literal(node: Node) -> Const | None:
    return node if isinstance(node, Const) and node.literal else None


def _equal(left: Node, right: Node, op: str) -> Equal:
    for side in (left, right):
        literal = _literal(side)
        if literal is not None and literal.value is None:
            raise SelectorSyntaxError(f"NULL cannot be compared with {op}; use IS NULL or IS NOT NULL",
                                      literal.position)
    lit_left, lit_right = _literal(left), _literal(right)
    if lit_left is not None and lit_right is not None and isinstance(lit_left.value, bool) \
            and not isinstance(lit_right.value, bool):
        raise SelectorSyntaxError(f"{'TRUE' if lit_left.value else 'FALSE'} cannot be compared with a non-boolean "
                                  f"literal", lit_right.position)
    return Equal(left, right)


def _order(op: str, left: Node, right: Node) -> Order:
    for side in (left, right):
        literal = _literal(side)
        if literal is not None and type(literal.value) not in (JInt, JLong, float):
            raise SelectorSyntaxError(f"{_shown(literal)} cannot be compared with {op}: only numbers and "
                                      f"properties can", literal.position)
        if literal is None and is_condition(side):
            raise SelectorSyntaxError(f"a condition cannot be compared with {op}", position_of(side))
    return Order(op, left, right)


def _between(value: Node, low: Node, high: Node, negated: bool, position: int) -> Node:
    if negated:
        return Logic("OR", _order("<", value, low), _order(">", value, high))
    lit_low, lit_high = _literal(low), _literal(high)
    if lit_low is not None and lit_high is not None:
        if lit_low.value is None or lit_high.value is None:
            raise SelectorSyntaxError("the bounds of BETWEEN cannot be NULL", position)
        try:
            ordered = compare(lit_high.value, lit_low.value) >= 0
        except SelectorEvalError as exc:
            raise SelectorSyntaxError(f"the bounds of BETWEEN cannot be compared: {exc}", lit_high.position) from None
        if not ordered:
            raise SelectorSyntaxError(f"the lower bound of BETWEEN ({_shown(lit_low)}) is above the upper "
                                      f"({_shown(lit_high)})", lit_low.position)
    return Logic("AND", _order(">=", value, low), _order("<=", value, high))


def _in_operand(node: Node, position: int) -> Prop:
    if not isinstance(node, Prop):
        raise SelectorSyntaxError("IN needs a property on its left", position)
    return node


def _shown(node: Const) -> str:
    value = node.value
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''")[:40] + "'"
    return repr(value) if isinstance(value, float) else str(int(value))
