"""The master's ack bookkeeping under trio's MockClock: waits end on the ack or at their deadline."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from replication.watermark_waiters import DEADLINE_TICK_S, AckWaiters


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_waiters_end_when_the_watermark_reaches_them_and_time_out_by_their_own_deadline(autojump_clock):
    acks = AckWaiters()
    results: dict[str, tuple[bool, float]] = {}

    async def wait(name: str, offset: int, timeout_s: float) -> None:
        start = trio.current_time()
        ok = await acks.wait(offset, timeout_s)
        results[name] = (ok, trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(acks.tick)
        nursery.start_soon(wait, "acked soon", 100, 5.0)
        nursery.start_soon(wait, "never acked", 500, 5.0)
        nursery.start_soon(wait, "short timeout", 500, 1.0)
        await trio.sleep(0.3)
        assert acks.waiting == 3
        acks.advance(100)
        acks.advance(50)  # the watermark never moves back
        await trio.sleep(6)
        nursery.cancel_scope.cancel()
    assert acks.acked == 100 and acks.waiting == 0
    assert results["acked soon"] == (True, pytest.approx(0.3))
    for name, timeout in (("never acked", 5.0), ("short timeout", 1.0)):
        ok, waited = results[name]
        assert not ok
        assert timeout <= waited <= timeout + DEADLINE_TICK_S + 1e-9, name


async def test_a_wait_already_covered_returns_at_once(autojump_clock):
    acks = AckWaiters()
    acks.advance(10)
    start = trio.current_time()
    assert await acks.wait(10, 5.0)
    assert trio.current_time() == start and acks.waiting == 0
