"""The store-host rewrite a proxy makes to a PULL answer's records."""

from __future__ import annotations

import dataclasses

import pytest

from formats.errors import RecordError
from formats.pull_body import with_store_host
from formats.record import MessageRecord, decode_records, encode_record


def record(i: int, store_host: tuple[str, int]) -> MessageRecord:
    return MessageRecord(topic="T", body=f"body {i}".encode(), properties={"idx": str(i)}, queue_id=i,
                         born_host=("10.0.0.9", 5000 + i), store_host=store_host, queue_offset=i,
                         phys_offset=1000 * i)


def test_every_ipv4_store_host_becomes_the_door_and_nothing_else_changes():
    records = [record(0, ("127.0.0.1", 10911)), record(1, ("::1", 10911)), record(2, ("127.0.0.1", 10911))]
    body = b"".join(encode_record(r) for r in records)
    rewritten = with_store_host(body, "127.0.0.7", 8081)
    assert len(rewritten) == len(body)
    got = decode_records(rewritten)
    assert [r.store_host for r in got] == [("127.0.0.7", 8081), ("::1", 10911), ("127.0.0.7", 8081)]
    for before, after in zip(decode_records(body), got, strict=True):
        assert dataclasses.replace(after, store_host=before.store_host) == before


def test_a_door_named_by_a_host_name_leaves_the_records_as_stored():
    body = bytes(encode_record(record(0, ("127.0.0.1", 10911))))
    assert with_store_host(body, "mq.example.com", 8081) == body


@pytest.mark.parametrize("cut", [1, 50, 95])
def test_a_body_that_does_not_walk_as_records_is_refused(cut):
    body = bytes(encode_record(record(0, ("127.0.0.1", 10911))))
    with pytest.raises(RecordError):
        with_store_host(body + body[:cut], "127.0.0.7", 8081)
