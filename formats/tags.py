"""tagsCode: the int64 a ConsumeQueue entry stores for tag filtering.

It is Java's ``String.hashCode()`` of the TAGS property (31*h + UTF-16 code unit, wrapped to
int32, sign-extended), or 0 when the message has no tag.
"""

from __future__ import annotations

import functools
import operator

_MASK32 = 0xFFFFFFFF
_POWERS_LEN = 512
# 31**k mod 2**32, highest power first, so the last n entries weight a string of length n.
_POWERS = tuple(pow(31, k, 1 << 32) for k in range(_POWERS_LEN - 1, -1, -1))


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()`` of ``text`` as a signed int32.

    h = sum(unit[i] * 31**(n-1-i)) mod 2**32, computed as one C-level dot product.
    """
    if text.isascii():
        units: bytes | list[int] = text.encode("ascii")
    else:
        raw = text.encode("utf-16-be")
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)]
    n = len(units)
    if n <= _POWERS_LEN:
        h = sum(map(operator.mul, units, _POWERS[_POWERS_LEN - n:])) & _MASK32
    else:
        h = 0
        for unit in units:
            h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tagsCode for a TAGS value; 0 for no tag."""
    if not tags:
        return 0
    return java_string_hash(tags)


def subscription_codes(expression: str) -> set[int] | None:
    """tagsCodes matched by a TAG subscription ("TagA || TagB"); ``None`` means match all."""
    expr = expression.strip()
    if not expr or expr == "*":
        return None
    return {java_string_hash(t.strip()) for t in expr.split("||") if t.strip()}
