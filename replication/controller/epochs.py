"""Where a returning replica's log and its new master's agree (RocketMQ's
EpochFileCache.findConsistentPoint), sans-IO: a broker becoming a slave cuts its CommitLog and
every derived store there (``MessageStore.truncate``) before it replicates.

Each side's epochs say where each master epoch began; an epoch ends where the next begins, the
last at the log's end. Walking this replica's epochs from the newest, the first one the master
also has, starting at the same offset, is where they last agreed: its end on the shorter side.
"""

from __future__ import annotations

from formats.epoch_file import EpochEntry


def epoch_ends(entries: list[EpochEntry], log_end: int) -> dict[int, tuple[int, int]]:
    """epoch -> (start, end) of each epoch of a log ending at ``log_end``."""
    ends = [e.start_offset for e in entries[1:]] + [log_end]
    return {e.epoch: (e.start_offset, end) for e, end in zip(entries, ends)}


def consistent_point(local: list[EpochEntry], local_end: int, master: list[EpochEntry],
                     master_end: int) -> int | None:
    """The offset to cut this replica's log at before it follows ``master``; ``local_end`` when
    this replica has no epochs yet or an empty log (nothing to compare: nothing cut); None when
    the two share no epoch (the replica cannot follow this master without being emptied)."""
    if not local or local_end == 0:
        return local_end
    mine, theirs = epoch_ends(local, local_end), epoch_ends(master, master_end)
    for epoch in sorted(mine, reverse=True):
        if epoch in theirs and theirs[epoch][0] == mine[epoch][0]:
            return min(mine[epoch][1], theirs[epoch][1])
    return None
