"""What retention may delete from a raft member's log, the one rule the broker's store and the
simulator share: entries that are committed, on this member's disk, and applied (dispatched to
the ConsumeQueues), so nothing a later leader could still cut or a consumer could still need
from the log itself is deleted. (Age and file boundaries come on top, in the store.)"""

from __future__ import annotations


def deletable_through(commit_index: int, durable_index: int, applied_index: int) -> int:
    """The last raft index retention may delete (-1: none)."""
    return min(commit_index, durable_index, applied_index)
