"""RocketMQ's permission bits as ``plain_acl.yml`` spells them, and how a group is named as a
resource (its retry topic, ``%RETRY%<group>``, as RocketMQ's ACL names it)."""

from __future__ import annotations

from types import MappingProxyType

DENY, ANY, PUB, SUB = 1, 2, 4, 8  # RocketMQ's Permission
RETRY_PREFIX = "%RETRY%"
_PERM_NAMES = MappingProxyType({"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB})


def parse_perm(text: str | None) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB`` or ``DENY``; anything else is DENY (as RocketMQ reads it)."""
    return _PERM_NAMES.get((text or "").strip().upper().replace(" ", ""), DENY)


def perm_text(perm: int) -> str:
    return "DENY" if perm & DENY else "|".join(n for n, b in (("PUB", PUB), ("SUB", SUB)) if perm & b) or "DENY"


def group_resource(group: str) -> str:
    """A consumer group as an ACL resource."""
    return RETRY_PREFIX + group
