"""Java's value rules that RocketMQ's SQL92 evaluator inherits: the typed values it compares,
how it turns a property's text into a number (``Integer/Long/Double.valueOf``) or a boolean,
and how two values of different types are compared (``ComparisonExpression.__compare``).

A value is ``str``, ``bool``, :class:`JInt` (Java Integer), :class:`JLong` (Long) or ``float``
(Double); ``None`` is SQL's unknown. Integer and Long are told apart because the other side of a
comparison is parsed as the same type: ``a = 5`` reads ``a`` with ``Integer.valueOf``, so
``a = '3000000000'`` fails where ``a = 3000000000`` (a Long literal) works.
"""

from __future__ import annotations

import math
import re
import struct
from types import MappingProxyType

from core.errors import SelectorEvalError

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class JInt(int):
    """A Java Integer."""

    __slots__ = ()


class JLong(int):
    """A Java Long."""

    __slots__ = ()


Value = str | bool | JInt | JLong | float

# Java's parseInt/parseLong: one optional sign, then decimal digits (any Unicode Nd digit, as
# Character.digit accepts), nothing else: no spaces, no underscores (Python's int() takes both).
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# Java's FloatingDecimal after String.trim(): ASCII digits only, an optional f/F/d/D suffix.
_JAVA_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?", re.ASCII)
_JAVA_HEX = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+)[fFdD]?", re.ASCII)
_JAVA_SPECIAL = MappingProxyType({"NaN": math.nan, "+NaN": math.nan, "-NaN": math.nan, "Infinity": math.inf,
                 "+Infinity": math.inf, "-Infinity": -math.inf})


def java_integer(text: str, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """``Integer.valueOf(text)`` (``Long.valueOf`` with the long bounds); raises SelectorEvalError."""
    if _JAVA_INTEGER.fullmatch(text):
        value = int(text)
        if low <= value <= high:
            return value
    raise SelectorEvalError(f"{text[:40]!r} is not a {'Long' if high == LONG_MAX else 'Integer'}")


def java_double(text: str) -> float:
    """``Double.valueOf(text)``; raises SelectorEvalError."""
    trimmed = _java_trim(text)
    if trimmed in _JAVA_SPECIAL:
        return _JAVA_SPECIAL[trimmed]
    if _JAVA_DECIMAL.fullmatch(trimmed):
        return float(trimmed.rstrip("fFdD"))
    hex_float = _JAVA_HEX.fullmatch(trimmed)
    if hex_float:
        magnitude = float.fromhex("0x" + hex_float.group(2))
        return -magnitude if hex_float.group(1) == "-" else magnitude
    raise SelectorEvalError(f"{text[:40]!r} is not a Double")


def _java_trim(text: str) -> str:
    """String.trim(): drops characters <= U+0020 at both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def java_boolean(text: str) -> bool:
    """``Boolean.valueOf(text)``: true for "true" in any case, false for anything else."""
    return text.lower() == "true"


_BITS = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")


def double_bits(value: float) -> int:
    """``Double.doubleToLongBits``: one canonical NaN."""
    return _BITS.unpack(_DOUBLE.pack(math.nan if math.isnan(value) else value))[0]


def compare_doubles(a: float, b: float) -> int:
    """``Double.compare``: -0.0 < 0.0, NaN above everything and equal to itself."""
    if a < b:
        return -1
    if a > b:
        return 1
    bits_a, bits_b = double_bits(a), double_bits(b)
    return (bits_a > bits_b) - (bits_a < bits_b)


def java_equals(a: Value, b: Value) -> bool:
    """``a.equals(b)``: same type and value; Doubles by their bits."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return double_bits(a) == double_bits(b)  # type: ignore[arg-type]
    return a == b


def compare(left: Value, right: Value) -> int:
    """``ComparisonExpression.__compare(left, right, true)``: converts one side to the other's
    type where Java does; -1 for types it cannot compare; raises SelectorEvalError where Java
    throws (a text that is not a number of the other side's type, a Boolean on the left of a text)."""
    lt, rt = type(left), type(right)
    if lt is rt:
        if lt is float:
            return compare_doubles(left, right)  # type: ignore[arg-type]
        return (left > right) - (left < right)  # type: ignore[operator]
    if lt is bool:
        if rt is str:  # Java casts the Boolean to String here: a ClassCastException
            raise SelectorEvalError("a Boolean cannot be compared with a text on its right")
        return -1
    if lt is str:
        if rt is bool:
            return _ordered(java_boolean(left), right)  # type: ignore[arg-type]
        if rt is JInt:
            return _ordered(java_integer(left), right)  # type: ignore[arg-type]
        if rt is JLong:
            return _ordered(java_integer(left, LONG_MIN, LONG_MAX), right)  # type: ignore[arg-type]
        return compare_doubles(java_double(left), right)  # type: ignore[arg-type]
    # left is a number
    if rt is bool:
        return -1
    if rt is str:
        if lt is JInt:
            return _ordered(left, java_integer(right))  # type: ignore[arg-type]
        if lt is JLong:
            return _ordered(left, java_integer(right, LONG_MIN, LONG_MAX))  # type: ignore[arg-type]
        return compare_doubles(left, java_double(right))  # type: ignore[arg-type]
    if lt is float or rt is float:  # a Long widened to double rounds to nearest, in both languages
        return compare_doubles(float(left), float(right))
    return _ordered(left, right)  # type: ignore[arg-type]


def _ordered(a: int | bool, b: int | bool) -> int:
    return (a > b) - (a < b)
