"""The revive ledger: which POPed messages come back, when, and how far progress may move."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.broker.pop.ledger import ReviveLedger
from formats.pop import Ack, CheckPoint


def ck(start: int, deltas: list[int], pop_time: int = 1000, invisible: int = 30_000, queue: int = 0) -> CheckPoint:
    return CheckPoint("T", "G", queue, start, pop_time, invisible, "broker-a", deltas)


def ack(start: int, offsets: tuple[int, ...], pop_time: int = 1000, queue: int = 0) -> Ack:
    return Ack("T", "G", queue, start, pop_time, "broker-a", offsets)


def test_an_unacked_message_comes_back_at_its_revive_time_and_an_acked_one_never():
    ledger = ReviveLedger()
    ledger.feed_checkpoint(0, ck(10, [0, 1, 2]))
    ledger.feed_ack(1, ack(10, (10,)))
    ledger.feed_ack(2, ack(10, (12,)))
    assert ledger.due(30_999) == [] and ledger.committable() == -1
    [back] = ledger.due(31_000)
    assert back.unacked_offsets() == [11]
    assert ledger.committable() == 2 and len(ledger) == 0


def test_a_fully_acked_checkpoint_leaves_at_once_and_progress_stops_at_the_oldest_waiting_one():
    ledger = ReviveLedger()
    ledger.feed_checkpoint(0, ck(0, [0, 1]))
    ledger.feed_checkpoint(1, ck(2, [0], pop_time=2000))
    ledger.feed_ack(2, Ack("T", "G", 0, 0, 1000, "broker-a", (0, 1)))
    assert len(ledger) == 1 and ledger.committable() == 0  # only the second one still waits
    ledger.feed_ack(3, ack(2, (2,), pop_time=2000))
    assert len(ledger) == 0 and ledger.committable() == 3


def test_an_ack_read_before_its_checkpoint_still_counts():
    ledger = ReviveLedger()
    ledger.feed_ack(0, ack(5, (5,)))
    ledger.feed_checkpoint(1, ck(5, [0]))
    assert len(ledger) == 0 and ledger.committable() == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sets(st.integers(0, 3))), min_size=1, max_size=12),
       st.integers(0, 40))
def test_replaying_from_the_committed_progress_ends_in_the_same_state(pops, stop_at):
    """A restart (or a new leader) re-reads the revive queue from the committed progress: the
    messages that come back afterwards are the same as without the restart."""
    records: list[CheckPoint | Ack] = []
    for i, (count, acked) in enumerate(pops):
        start = 100 * i
        records.append(ck(start, list(range(count)), pop_time=1000 + i))
        records += [ack(start, (start + a,), pop_time=1000 + i) for a in sorted(acked) if a < count]

    def feed(ledger: ReviveLedger, upto: int, first: int = 0) -> None:
        for offset in range(first, upto):
            rec = records[offset]
            if isinstance(rec, CheckPoint):
                ledger.feed_checkpoint(offset, CheckPoint.from_json(rec.to_json()))
            else:
                ledger.feed_ack(offset, rec)

    never_down = ReviveLedger()
    feed(never_down, len(records))
    expected = sorted((c.start_offset, tuple(c.unacked_offsets())) for c in never_down.due(10**9))

    stop = min(stop_at, len(records))
    before = ReviveLedger()
    feed(before, stop)
    committed = before.committable()
    restarted = ReviveLedger()
    restarted.read_to = committed
    feed(restarted, len(records), committed + 1)
    assert sorted((c.start_offset, tuple(c.unacked_offsets())) for c in restarted.due(10**9)) == expected
