"""The chaos drill's verdict on hand-made histories, and its seeded fault schedule."""

from __future__ import annotations

import itertools

import pytest

from mqctl.chaos.history import Delivery, FaultSpan, SendAttempt, check_history, unavailability
from mqctl.chaos.reasons import why_not_acknowledged
from mqctl.chaos.report import throughput
from mqctl.chaos.schedule import DRAIN_SECONDS, WARMUP_SECONDS, parse_faults, plan_faults
from mqctl.chaos.timeline import timeline


def ok(key: str, at: float, queue: str = "broker-a/0", offset: int = 0) -> SendAttempt:
    return SendAttempt(key, at - 0.01, at, "ok", queue, offset)


def got(key: str, offset: int, at: float = 100.0, queue: str = "broker-a/0", consumer: str = "c0") -> Delivery:
    return Delivery(key, queue, offset, at, consumer)


def test_a_clean_history_breaks_no_promise():
    sends = [ok(f"k{i}", i, offset=i) for i in range(5)]
    verdict = check_history(sends, [got(f"k{i}", i) for i in range(5)])
    assert verdict.broken_promises(loss_allowed=False) == []
    assert (verdict.acknowledged, verdict.delivered, verdict.lost, verdict.windows) == (5, 5, [], [])


def test_lost_messages_fail_sync_and_dledger_and_give_async_a_loss_window():
    sends = [ok("a", 1.0, offset=0), ok("b", 2.0, offset=1), ok("c", 3.0, offset=2), ok("d", 4.0, offset=3)]
    verdict = check_history(sends, [got("a", 0), got("d", 3)])
    assert verdict.lost == ["b", "c"] and verdict.loss_window == (2.0, 3.0)
    assert verdict.broken_promises(loss_allowed=False) == ["2 acknowledged message(s) lost"]
    assert verdict.broken_promises(loss_allowed=True) == []


def test_unknown_and_failed_sends_may_be_delivered_or_not_but_nothing_unsent_may_appear():
    sends = [ok("a", 1.0), SendAttempt("b", 1.0, 4.0, "unknown"), SendAttempt("c", 4.0, 4.1, "failed")]
    verdict = check_history(sends, [got("a", 0), got("b", 1), got("ghost", 2)])
    assert verdict.lost == [] and verdict.phantom == ["ghost"]
    assert verdict.broken_promises(loss_allowed=True) == ["1 message(s) delivered that were never sent"]


def test_a_message_at_another_offset_than_acknowledged_is_moved():
    verdict = check_history([ok("a", 1.0, offset=5)], [got("a", 6)])
    assert verdict.moved == ["a"] and verdict.lost == []
    assert verdict.broken_promises(loss_allowed=False) == ["1 message(s) delivered only away from their acknowledged queue offset"]
    assert verdict.broken_promises(loss_allowed=True) == []  # async: the acknowledged copy may go
    # an unknown first attempt stored at 4, the retry acknowledged at 5: a duplicate, not moved
    retried = check_history([SendAttempt("a", 0.0, 1.0, "unknown"), ok("a", 2.0, offset=5)], [got("a", 4), got("a", 5)])
    assert retried.moved == [] and retried.duplicated == ["a"] and retried.lost == []


def test_redelivery_after_a_rewind_is_duplication_not_reordering_but_a_skipped_message_is_reordered():
    sends = [ok(f"k{i}", i, offset=i) for i in range(4)]
    rewind = [got("k0", 0), got("k1", 1), got("k2", 2), got("k1", 1), got("k2", 2), got("k3", 3)]
    verdict = check_history(sends, rewind)
    assert verdict.duplicated == ["k1", "k2"] and verdict.reordered == []
    skipped = check_history(sends, [got("k0", 0), got("k2", 2), got("k1", 1), got("k3", 3)])
    assert skipped.reordered == ["k1"] and skipped.duplicated == []
    other_queue = check_history([ok("x", 1.0, "broker-a/1", 0), *sends], [got("k3", 3), got("x", 0, queue="broker-a/1")])
    assert other_queue.reordered == []


def test_unavailability_windows_and_recovery_after_a_heal():
    sends = [ok("a", 1.0), SendAttempt("b", 2.0, 5.0, "unknown"), SendAttempt("c", 5.0, 5.5, "failed"),
             ok("d", 7.0), SendAttempt("e", 8.0, 9.0, "failed")]
    windows = unavailability(sends)
    assert [(w.started, w.ended, w.attempts) for w in windows] == [(2.0, 7.0, 2), (8.0, None, 1)]
    assert windows[0].length == 5.0 and windows[1].length is None
    verdict = check_history(sends, [got("a", 0), got("d", 1)], [FaultSpan("kill", "broker-a-0", 1.5, 6.0),
                                                                 FaultSpan("pause", "broker-a-0", 7.5, 8.5)])
    assert [r.first_ack_after_heal for r in verdict.recoveries] == [1.0, None]
    assert [r.acked_during for r in verdict.recoveries] == [0, 0]
    during = check_history([ok("a", 2.0), ok("b", 3.0)], [], [FaultSpan("pause", "broker-a-1", 1.0, 4.0)])
    assert during.recoveries[0].acked_during == 2
    summary = verdict.summary()
    assert summary["moved"]["count"] == 1 and summary["recoveries"][0]["first_ack_after_heal_s"] == 1.0


def test_the_acknowledged_rate_counts_acknowledged_sends_a_second_after_the_warm_up_only():
    """The report's throughput.acked_per_s (what test_chaos_lab's floors judge): acknowledged
    sends a second over the drill's seconds after the warm-up; unanswered sends, the warm-up
    and answers after the drill's end count for nothing."""
    assert WARMUP_SECONDS == 3.0
    acked_a_second = {s: 50 if s < 3 else 5 if s in (7, 8, 9) else 20 for s in range(13)}
    sends = [ok(f"k{s}-{i}", s + 0.5) for s, n in acked_a_second.items() for i in range(n)]
    sends += [SendAttempt(f"u{s}-{i}", s + 0.1, s + 0.6, "unknown") for s in range(13) for i in range(30)]
    sends.append(ok("late", 13.5))
    figures = throughput(timeline(sends, 13), [FaultSpan("kill", "broker-a-0", 8.0, 9.5)], 13)
    assert figures == {"acked_per_s": (7 * 20 + 3 * 5) / 10, "acked_per_s_between_faults": 20.0,
                       "acked_per_s_during_faults": 5.0}


def test_what_unacknowledged_sends_were_told_is_counted_per_window_and_in_all():
    sends = [ok("a", 1.0), SendAttempt("b", 2.0, 3.0, "unknown", why="timeout"),
             SendAttempt("c", 3.0, 4.0, "unknown", why="no route"), SendAttempt("d", 4.0, 5.0, "unknown", why="no route"),
             ok("e", 6.0), SendAttempt("f", 7.0, 8.0, "unknown", why="timeout"), SendAttempt("g", 8.0, 9.0, "unknown")]
    verdict = check_history(sends, [])
    assert [w.reasons for w in verdict.windows] == [(("no route", 2), ("timeout", 1)),
                                                    (("timeout", 1), ("not recorded", 1))]
    assert verdict.reasons == (("timeout", 2), ("no route", 2), ("not recorded", 1))
    summary = verdict.summary()
    assert summary["reasons"] == {"timeout": 2, "no route": 2, "not recorded": 1}
    assert summary["unavailable"][0]["reasons"] == {"no route": 2, "timeout": 1}


def test_a_send_error_is_told_by_its_last_telling_failure_without_the_time_left():
    closed = ("sending to T failed: broker-a: connection to 127.0.0.11:4000 closed during request 310 (127.0.0.11:4000); "
              "broker-a: connection to 127.0.0.11:4000 closed during request 310 (127.0.0.11:4000)")
    assert why_not_acknowledged(closed) == "broker-a: connection to 127.0.0.11:4000 closed during request 310"
    timed_out = ("sending to T failed: broker-a: code 14 disk full from 127.0.0.11:4000; "
                 "broker-a: no response from 127.0.0.11:4000 to request 310 within 1.2345s; send timeout spent")
    assert why_not_acknowledged(timed_out) == "broker-a: no response from 127.0.0.11:4000 to request 310"
    assert why_not_acknowledged("sending to T failed: send timeout spent") == "send timeout spent"
    no_route = "No route info of this topic: T (and no TBW102 to auto-create it)"
    assert why_not_acknowledged(no_route) == no_route


def test_a_seed_always_gives_the_same_schedule_within_the_drill():
    nodes = ["broker-a-0", "broker-a-1", "broker-a-2"]
    first = plan_faults(7, ["kill", "pause", "partition"], nodes, 60)
    assert first == plan_faults(7, ["kill", "pause", "partition"], nodes, 60)
    assert first != plan_faults(8, ["kill", "pause", "partition"], nodes, 60)
    assert first[0].at == WARMUP_SECONDS and len(first) >= 4
    assert all(f.heal_at <= 60 - DRAIN_SECONDS for f in first)
    assert all(b.at > a.heal_at for a, b in itertools.pairwise(first))  # one fault at a time
    assert {f.kind for f in first} <= {"kill", "pause", "partition"} and {f.target for f in first} <= set(nodes)
    assert plan_faults(7, ["kill"], nodes, 5) == []


def test_fault_kinds_are_checked():
    assert parse_faults("kill, pause") == ("kill", "pause")
    for bad in ("", "kill,flood"):
        with pytest.raises(ValueError, match="faults must be"):
            parse_faults(bad)


def test_fifo_streams_must_be_acknowledged_in_send_order_per_queue():
    q = "ChaosDrill@broker-a/3"
    sends = [SendAttempt("p.0.0", 1.0, 1.1, "ok", q, 10, producer="p"),
             SendAttempt("p.0.1", 1.1, 1.2, "ok", q, 11, producer="p"),
             SendAttempt("p.0.2", 1.2, 1.3, "unknown", producer="p"),  # not acknowledged: not judged
             SendAttempt("p.0.3", 1.3, 1.4, "ok", q, 9, producer="p"),  # below 11: out of send order
             SendAttempt("p.1.0", 1.0, 1.1, "ok", q, 12, producer="p"),  # another stream, its own order
             SendAttempt("b.b.0", 1.0, 1.1, "ok", q, 1, producer="b"),  # not a FIFO producer
             SendAttempt("b.b.1", 1.1, 1.2, "ok", q, 0, producer="b")]
    stored = sorted((a for a in sends if a.outcome == "ok"), key=lambda a: a.queue_offset)
    deliveries = [Delivery(a.key, q, a.queue_offset, 5.0) for a in stored]  # read back in queue order
    verdict = check_history(sends, deliveries, fifo_producers=["p"])
    assert verdict.fifo_broken == ["p.0.3"]
    assert verdict.broken_promises(loss_allowed=False) == ["1 FIFO message(s) acknowledged out of send order"]
    assert verdict.broken_promises(loss_allowed=True) == []


def test_order_is_judged_over_the_groups_orderly_consumers_in_time_and_counted_per_queue():
    q0, q1 = "T@broker-a/0", "T@broker-a/1"
    sends = [ok(f"k{i}", i, q0, i) for i in range(6)] + [ok("m0", 1, q1, 0)]
    deliveries = [Delivery("k0", q0, 0, 1, "a"), Delivery("k1", q0, 1, 2, "a"), Delivery("k2", q0, 2, 3, "a"),
                  # the queue moves to b, which starts from an older committed offset: redeliveries
                  Delivery("k1", q0, 1, 4, "b"), Delivery("k2", q0, 2, 5, "b"), Delivery("k3", q0, 3, 6, "b"),
                  Delivery("k5", q0, 5, 7, "b"),  # k4 skipped ...
                  Delivery("m0", q1, 0, 7.5, "b"),
                  Delivery("k4", q0, 4, 8, "a"),  # ... and delivered after k5: reordered
                  # a POP consumer promises no order; the journal's rows need not be in time order
                  Delivery("k3", q0, 3, 6.5, "p", ordered=False), Delivery("k0", q0, 0, 9, "p", ordered=False)]
    verdict = check_history(sends, deliveries[::-1])
    assert verdict.reordered == ["k4"]
    assert verdict.broken_promises(loss_allowed=False) == ["1 message(s) delivered out of queue order"]
    assert verdict.per_queue[q0] == {"acknowledged": 6, "delivered": 10, "duplicated": 4, "reordered": 1}
    assert verdict.per_queue[q1] == {"acknowledged": 1, "delivered": 1}


def test_a_send_is_acknowledged_during_a_fault_only_between_its_injection_and_the_start_of_its_heal():
    sends = [ok("before", 1.05), SendAttempt("during", 1.2, 1.5, "ok"), SendAttempt("healing", 2.6, 2.9, "ok")]
    verdict = check_history(sends, [], [FaultSpan("partition", "broker-a-1", 1.1, 3.0, heal_began=2.5)])
    assert verdict.recoveries[0].acked_during == 1 and verdict.recoveries[0].first_ack_after_heal is None


def test_a_send_whose_client_was_not_told_the_queue_is_judged_for_loss_not_for_its_place():
    sends = [SendAttempt("five.s0.0", 1.0, 1.1, "ok"), SendAttempt("five.s0.1", 1.1, 1.2, "ok")]
    verdict = check_history(sends, [Delivery("five.s0.0", "T5@broker-a/2", 7, 2.0, "c", ordered=False)])
    assert verdict.moved == [] and verdict.lost == ["five.s0.1"]
    assert verdict.per_queue["(not told)"] == {"acknowledged": 2, "lost": 1}


def test_a_failure_among_acknowledgements_is_no_unavailability_window():
    sends = [ok("a", 1.0), SendAttempt("b", 1.0, 1.05, "unknown", why="no route"), ok("c", 1.1),
             SendAttempt("d", 2.0, 3.0, "unknown", why="timeout"), ok("e", 3.5)]
    verdict = check_history(sends, [])
    assert [(w.started, w.ended) for w in verdict.windows] == [(2.0, 3.5)]
    assert dict(verdict.reasons) == {"no route": 1, "timeout": 1}


def test_a_timed_out_send_among_acknowledgements_opens_its_window_at_the_last_acknowledgement():
    """Only the time without acknowledgements counts: a send that waited 3 s for its answer
    while others were acknowledged is no 3-second window (these once added up to more
    unavailable seconds than a drill had)."""
    sends = [SendAttempt("slow", 1.0, 4.0, "unknown", why="timeout"), *(ok(f"k{i}", 1.0 + i / 10) for i in range(1, 33))]
    assert unavailability(sends) == []
    stalled = [ok("a", 1.0), SendAttempt("b", 0.5, 3.5, "unknown", why="timeout"), ok("c", 3.6)]
    assert [(w.started, w.ended) for w in unavailability(stalled)] == [(1.0, 3.6)]
