"""Queue selection, latency fault tolerance and the attempts of one send, on a fake clock (the
cores are sans-IO: every call is told the time)."""

from __future__ import annotations

import pytest

from core.client.fault import FaultSettings, LatencyFaultTable
from core.client.route import MessageQueue
from core.client.selection import RoundRobinSelector
from core.client.send_attempts import SendAttempts, Verdict
from core.plugin_markers import hookimpl
from core.remoting.codes import ResponseCode
from plugins import plugin_host

ON = FaultSettings(enabled=True)


def queues(topic: str = "T", brokers: tuple[str, ...] = ("a", "b"), per_broker: int = 2) -> list[MessageQueue]:
    return [MessageQueue(topic, b, i) for b in brokers for i in range(per_broker)]


# ---------------------------------------------------------------- the latency buckets


@pytest.mark.parametrize(("latency_ms", "isolated_ms"), [
    (0, 0), (49.9, 0), (50, 0), (99.9, 0), (100, 0), (549.9, 0), (550, 30_000), (999.9, 30_000),
    (1000, 60_000), (1999.9, 60_000), (2000, 120_000), (2999.9, 120_000), (3000, 180_000),
    (14_999.9, 180_000), (15_000, 600_000), (1e9, 600_000)])
def test_latency_bucket_edges_follow_rocketmq_tables(latency_ms, isolated_ms):
    assert FaultSettings().isolation_ms(latency_ms) == isolated_ms


def test_a_slow_broker_is_isolated_for_its_bucket_and_back_after_it():
    table = LatencyFaultTable(ON)
    table.record("a", 600, now=100.0)
    assert not table.is_available("a", 100.0)
    assert not table.is_available("a", 129.999)
    assert table.is_available("a", 130.0)
    assert table.is_available("never-seen", 100.0)


def test_a_failure_isolates_for_thirty_seconds_whatever_its_latency():
    table = LatencyFaultTable(ON)
    table.record("a", 3.0, now=10.0, failed=True)
    assert not table.is_available("a", 39.9)
    assert table.is_available("a", 40.0)
    table.record("a", 3.0, now=41.0, failed=True)
    assert [r.failures for r in table.rows(41.0)] == [2]
    table.record("a", 3.0, now=80.0)  # a fast answer clears the streak and the isolation
    assert table.is_available("a", 80.0)
    assert table.rows(80.0)[0].failures == 0


def test_least_bad_is_the_one_free_soonest_then_the_faster():
    table = LatencyFaultTable(ON)
    table.record("a", 20_000, now=0.0)  # 600 s
    table.record("b", 1_500, now=0.0)  # 60 s
    table.record("c", 1_200, now=0.0)  # 60 s, faster
    assert table.least_bad(["a", "b", "c"], 1.0) == "c"
    assert table.least_bad(["a", "b"], 1.0) == "b"
    assert table.least_bad([], 1.0) is None


def test_brokers_that_left_every_route_leave_the_table():
    table = LatencyFaultTable(ON)
    for name in ("a", "b", "c"):
        table.record(name, 700, now=0.0)
    table.keep_only({"a", "c"})
    assert [r.broker for r in table.rows(0.0)] == ["a", "c"]


def test_tables_must_match_and_ascend():
    with pytest.raises(ValueError, match="same"):
        FaultSettings(latency_max_ms=(1, 2), not_available_ms=(0,))
    with pytest.raises(ValueError, match="ascend"):
        FaultSettings(latency_max_ms=(2, 1), not_available_ms=(0, 0))


# ---------------------------------------------------------------- queue selection


def test_round_robin_keeps_one_counter_per_topic():
    sel = RoundRobinSelector()
    t, u = queues("T"), queues("U")
    picked_t = [sel.select("T", t, None, 0.0) for _ in range(5)]
    assert picked_t == [t[0], t[1], t[2], t[3], t[0]]
    assert sel.select("U", u, None, 0.0) == u[0]  # U has its own counter
    assert sel.select("T", t, None, 0.0) == t[1]


@pytest.mark.parametrize("settings", [FaultSettings(), ON])
def test_a_retry_goes_to_another_broker(settings):
    sel = RoundRobinSelector(settings)
    qs = queues()
    for _ in range(8):
        assert sel.select("T", qs, "a", 0.0).broker_name == "b"
        assert sel.select("T", qs, "b", 0.0).broker_name == "a"


@pytest.mark.parametrize("settings", [FaultSettings(), ON])
def test_a_retry_stays_when_there_is_no_other_broker(settings):
    sel = RoundRobinSelector(settings)
    qs = queues(brokers=("a",), per_broker=3)
    sel.attempt_done("a", 5, 0.0, failed=True)
    assert [sel.select("T", qs, "a", 1.0) for _ in range(3)] == qs


def test_without_fault_tolerance_nothing_is_recorded_and_slow_brokers_still_get_their_turn():
    sel = RoundRobinSelector()
    qs = queues()
    sel.attempt_done("b", 20_000, 0.0, failed=False)
    assert sel.fault_rows(0.0) == []
    assert {sel.select("T", qs, None, 1.0).broker_name for _ in range(4)} == {"a", "b"}


def test_isolated_brokers_are_skipped_until_their_isolation_ends():
    sel = RoundRobinSelector(ON)
    qs = queues()
    sel.attempt_done("b", 700, now=0.0, failed=False)  # 30 s
    assert {sel.select("T", qs, None, 10.0).broker_name for _ in range(8)} == {"a"}
    assert {sel.select("T", qs, None, 30.0).broker_name for _ in range(8)} == {"a", "b"}
    row = RoundRobinSelector(ON)
    row.attempt_done("b", 700, now=0.0, failed=False)
    assert row.fault_rows(12.5)[0].isolated_for_s == 17.5


def test_when_every_broker_is_isolated_the_least_bad_is_picked_not_an_error():
    sel = RoundRobinSelector(ON)
    qs = queues(brokers=("a", "b", "c"), per_broker=2)
    sel.attempt_done("a", 20_000, 0.0, failed=False)  # 600 s
    sel.attempt_done("b", 1_200, 0.0, failed=False)  # 60 s
    sel.attempt_done("c", 1, 0.0, failed=True)  # 30 s
    picked = [sel.select("T", qs, None, 1.0) for _ in range(4)]
    assert {q.broker_name for q in picked} == {"c"}
    assert {q.queue_id for q in picked} == {0, 1}  # its queues in turn
    # the one that just failed is passed over while another exists
    assert sel.select("T", qs, "c", 1.0).broker_name == "b"


def test_an_available_broker_is_preferred_to_the_one_that_just_failed_even_if_both_are_free():
    sel = RoundRobinSelector(ON)
    qs = queues(brokers=("a", "b"), per_broker=1)
    sel.attempt_done("a", 700, 0.0, failed=False)  # a isolated: only b is free
    assert sel.select("T", qs, "b", 1.0).broker_name == "b"  # b just failed, yet a is worse


def test_the_selection_plugin_hands_out_the_default_and_can_be_replaced():
    host = plugin_host(load_entry_points=False)
    assert isinstance(host.queue_selector(ON), RoundRobinSelector)

    class Mine:
        @hookimpl(tryfirst=True)
        def mq_queue_selector(self, settings):
            return "mine"

    host.register(Mine())
    assert host.queue_selector(ON) == "mine"


# ---------------------------------------------------------------- attempts of one send


def test_sync_sends_try_one_plus_retries_times():
    attempts = SendAttempts("T", retries=2, timeout_s=3.0, now=0.0)
    granted = []
    while (left := attempts.next_attempt(0.5 * len(granted))) is not None:
        granted.append(left)
        attempts.failed(f"b{len(granted)}", "connection refused")
    assert granted == [3.0, 2.5, 2.0]
    assert attempts.error() == ("sending to T failed: b1: connection refused; b2: connection refused; "
                                "b3: connection refused")


def test_every_attempt_spends_from_one_timeout_and_none_starts_after_it():
    attempts = SendAttempts("T", retries=5, timeout_s=3.0, now=100.0)
    assert attempts.next_attempt(100.0) == 3.0
    attempts.failed("a", "timeout after 2.9 s")
    assert attempts.next_attempt(102.9) == pytest.approx(0.1)
    attempts.failed("b", "timeout after 0.1 s")
    assert attempts.next_attempt(103.0) is None
    assert attempts.error().endswith("send timeout spent")
    assert "a: timeout" in attempts.error() and "b: timeout" in attempts.error()


def test_the_next_attempt_avoids_the_broker_that_failed():
    attempts = SendAttempts("T", retries=2, timeout_s=3.0, now=0.0)
    assert attempts.last_broker is None
    attempts.failed("a", "code 14 busy")
    assert attempts.last_broker == "a"


@pytest.mark.parametrize("code", [ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                                  ResponseCode.SLAVE_NOT_AVAILABLE])
def test_not_store_ok_answers_retry_only_when_asked(code):
    plain = SendAttempts("T", 2, 3.0, 0.0)
    assert plain.answered("a", "h:1", code, None) is Verdict.DONE
    eager = SendAttempts("T", 2, 3.0, 0.0, retry_not_store_ok=True)
    assert eager.answered("a", "h:1", code, None) is Verdict.RETRY
    assert eager.last_broker == "a"
    assert SendAttempts.broker_at_fault(code) is False


def test_answers_that_retry_elsewhere_and_answers_that_stop():
    attempts = SendAttempts("T", 2, 3.0, 0.0, retry_not_store_ok=True)
    assert attempts.answered("a", "h:1", ResponseCode.SUCCESS, None) is Verdict.DONE
    assert attempts.answered("a", "h:1", ResponseCode.SYSTEM_BUSY, "too busy") is Verdict.RETRY
    assert attempts.answered("b", "h:2", ResponseCode.SERVICE_NOT_AVAILABLE, "a slave") is Verdict.RETRY
    assert SendAttempts.route_stale(ResponseCode.SERVICE_NOT_AVAILABLE)
    assert attempts.answered("b", "h:2", ResponseCode.MESSAGE_ILLEGAL, "body too big") is Verdict.STOP
    assert not SendAttempts.broker_at_fault(ResponseCode.MESSAGE_ILLEGAL)
    assert SendAttempts.broker_at_fault(ResponseCode.SYSTEM_BUSY)
    assert "a: code 2 too busy from h:1" in attempts.error()
    assert "b: code 13 body too big from h:2" in attempts.error()
