"""Child process for the crash tests: appends records forever and prints one line per
acknowledged record, until it is killed.

    python crash_writer.py STORE_DIR async|sync SEGMENT_BYTES
"""

import sys
from pathlib import Path

import trio

from core.config import StoreConfig
from core.store.message_store import open_message_store
from formats.record import MessageRecord


def record(i: int) -> MessageRecord:
    return MessageRecord(
        topic="Crash", queue_id=i % 3, body=(f"body-{i}-" * (1 + i % 40)).encode(),
        born_timestamp=i, born_host=("127.0.0.1", 1), store_host=("127.0.0.1", 10911),
        properties={"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"},
    )


async def main(root: Path, flush: str, segment: int) -> None:
    config = StoreConfig(segment_size_bytes=segment, flush=flush, flush_interval_ms=20,
                         checkpoint_interval_ms=50, cq_entries_per_file=100,
                         index_slots=101, index_entries=500, prefault_window_bytes=16384)
    async with open_message_store(root, config) as store:
        i = 0
        while True:
            result = await store.put_durable(record(i))
            if not result.flushed:
                raise SystemExit("flush timed out")
            sys.stdout.write(f"ack {i} {result.phys_offset} {result.queue_offset}\n")
            sys.stdout.flush()
            i += 1
            if i % 7 == 0:
                await trio.sleep(0)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
