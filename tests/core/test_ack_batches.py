"""The proxy's merged acks: what it writes is what the broker's BATCH_ACK_MESSAGE reads."""

from __future__ import annotations

from core.broker.pop.acks import batch_acks
from core.proxy.grpc.ack_batches import AckOf, ack_request, batch_ack_request
from core.remoting.codes import RequestCode
from formats.pop import ORDER_REVIVE_QID, ReceiptHandle


def handle(start: int, offset: int, *, pop_time: int = 1_000, retry: int = 0, queue: int = 1, revive: int = 3,
           ) -> ReceiptHandle:
    return ReceiptHandle(start, pop_time, 30_000, revive, retry, "broker-a", queue, offset)


def test_acks_of_several_checkpoints_become_one_entry_each_with_their_offsets() -> None:
    acks = [AckOf("g", "T", handle(100, 100)), AckOf("g", "T", handle(100, 131)), AckOf("g", "T", handle(100, 105)),
            AckOf("g", "T", handle(200, 200, pop_time=2_000, retry=1, queue=2, revive=5))]
    request = batch_ack_request(acks)
    assert request.code == RequestCode.BATCH_ACK_MESSAGE
    read = {(rq, ack.topic, ack.queue_id, ack.start_offset, ack.pop_time_ms): ack.offsets
            for rq, ack in batch_acks(request.body)}
    assert read == {(3, "T", 1, 100, 1_000): (100, 105, 131), (5, "%RETRY%g_T", 2, 200, 2_000): (200,)}


def test_fifo_acks_and_acks_far_past_their_checkpoint_go_alone() -> None:
    assert AckOf("g", "T", handle(100, 131)).mergeable
    assert not AckOf("g", "T", handle(100, 132)).mergeable  # a filtered POP: past a 32-bit set
    assert not AckOf("g", "T", handle(100, 100, revive=ORDER_REVIVE_QID)).mergeable
    assert ack_request(AckOf("g", "T", handle(100, 132))).code == RequestCode.ACK_MESSAGE
