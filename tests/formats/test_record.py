import ipaddress
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats import sysflag as sf
from formats.compression import compress
from formats.errors import FormatError, RecordError
from formats.properties import decode_properties, encode_properties
from formats.record import (
    BLANK_MAGIC,
    MessageRecord,
    decode_dispatch_fields,
    decode_record,
    decode_records,
    encode_blank,
    encode_record,
    is_blank,
    patch_store_fields,
    record_properties,
)
from tests.independent_encoder import record_bytes

# Worked out by hand from the layout for: topic "T1", body "hi", props KEYS=k (one pair),
# queue 3, flag 7, queue offset 5, phys 4096, sysflag 0, born 1000 @ 10.0.0.1:5555,
# stored 2000 @ 127.0.0.1:10911, reconsumed once.
GOLDEN = bytes.fromhex(
    "00000066"          # TOTALSIZE 102 = 91 + 2 body + 2 topic + 7 props
    "daa320a7"          # MAGICCODE
    "58932aac"          # BODYCRC = crc32(b"hi") = 0xd8932aac, & 0x7fffffff
    "00000003"          # QUEUEID
    "00000007"          # FLAG
    "0000000000000005"  # QUEUEOFFSET
    "0000000000001000"  # PHYSICALOFFSET 4096
    "00000000"          # SYSFLAG
    "00000000000003e8"  # BORNTIMESTAMP 1000
    "0a000001000015b3"  # BORNHOST 10.0.0.1:5555
    "00000000000007d0"  # STORETIMESTAMP 2000
    "7f00000100002a9f"  # STOREHOST 127.0.0.1:10911
    "00000001"          # RECONSUMETIMES
    "0000000000000000"  # PREPARED TRANSACTION OFFSET
    "00000002" "6869"   # BODY "hi"
    "02" "5431"         # TOPIC "T1"
    "0007" "4b455953016b02"  # PROPERTIES "KEYS\x01k\x02"
)


def golden_record() -> MessageRecord:
    return MessageRecord(
        topic="T1", body=b"hi", properties={"KEYS": "k"}, queue_id=3, flag=7, queue_offset=5,
        phys_offset=4096, born_timestamp=1000, born_host=("10.0.0.1", 5555), store_timestamp=2000,
        store_host=("127.0.0.1", 10911), reconsume_times=1,
    )


def test_golden_record_bytes_match_the_hand_worked_layout():
    assert zlib.crc32(b"hi") & 0x7FFFFFFF == 0x58932AAC
    assert bytes(encode_record(golden_record())) == GOLDEN


def test_golden_record_decodes_field_by_field():
    rec = decode_record(GOLDEN)
    assert rec.total_size == 102
    assert (rec.topic, rec.body, rec.properties) == ("T1", b"hi", {"KEYS": "k"})
    assert (rec.queue_id, rec.flag, rec.queue_offset, rec.phys_offset) == (3, 7, 5, 4096)
    assert rec.born_host == ("10.0.0.1", 5555) and rec.store_host == ("127.0.0.1", 10911)
    assert (rec.born_timestamp, rec.store_timestamp, rec.reconsume_times) == (1000, 2000, 1)
    assert rec.keys == ["k"] and rec.body_crc_ok


def test_codec_agrees_with_the_independent_encoder():
    raw = record_bytes(topic="Orders", body=b"payload", props="TAGS\x01a\x02UNIQ_KEY\x01AB\x02",
                       queue_id=2, queue_offset=9, phys_offset=77, born_ts=5, store_ts=6,
                       born=("192.168.1.2", 4000), store=("127.0.0.1", 10911))
    rec = decode_record(raw)
    assert rec.tags == "a" and rec.uniq_key == "AB" and rec.phys_offset == 77
    assert bytes(encode_record(rec)) == raw


hosts_v4 = st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535))
hosts_any = st.tuples(st.ip_addresses().map(str), st.integers(0, 65535))
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
props = st.dictionaries(prop_text.filter(bool), prop_text, max_size=5)
topics = st.text(st.sampled_from("abcXYZ019_-%|"), min_size=1, max_size=300)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300)
@given(topic=topics, body=st.binary(max_size=300), properties=props, queue_id=i32, flag=i32,
       queue_offset=i64, phys_offset=i64, sysflag=st.integers(0, 0x7FF).map(lambda f: f & ~0x30),
       born_ts=i64, store_ts=i64, born=hosts_any, store=hosts_any, reconsume=i32, prepared=i64)
def test_record_round_trip(topic, body, properties, queue_id, flag, queue_offset, phys_offset,
                           sysflag, born_ts, store_ts, born, store, reconsume, prepared):
    rec = MessageRecord(
        topic=topic, body=body, properties=properties, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, phys_offset=phys_offset, sysflag=sysflag,
        born_timestamp=born_ts, born_host=born, store_timestamp=store_ts, store_host=store,
        reconsume_times=reconsume, prepared_tx_offset=prepared,
    )
    raw = encode_record(rec)
    back = decode_record(raw)
    assert back.total_size == len(raw)
    assert back.topic == topic and back.body == body and back.properties == properties
    assert (back.queue_id, back.flag, back.queue_offset, back.phys_offset) == (
        queue_id, flag, queue_offset, phys_offset)
    assert back.sysflag & ~0x30 == sysflag
    assert bool(back.sysflag & sf.BORNHOST_V6) == (ipaddress.ip_address(born[0]).version == 6)
    assert bool(back.sysflag & sf.STOREHOST_V6) == (ipaddress.ip_address(store[0]).version == 6)
    assert ipaddress.ip_address(back.born_host[0]) == ipaddress.ip_address(born[0])
    assert back.born_host[1] == born[1] and back.store_host[1] == store[1]
    assert (back.born_timestamp, back.store_timestamp, back.reconsume_times,
            back.prepared_tx_offset) == (born_ts, store_ts, reconsume, prepared)
    assert bytes(encode_record(back)) == bytes(raw)
    assert (len(topic.encode()) > 127) == (back.magic == -626843477)


@settings(max_examples=200)
@given(topic=topics, body=st.binary(max_size=300), properties=props, queue_id=i32, queue_offset=i64,
       sysflag=st.integers(0, 0x7FF).map(lambda f: f & ~0x30), store_ts=i64, born=hosts_any, store=hosts_any)
def test_dispatch_fields_agree_with_the_full_decode(topic, body, properties, queue_id, queue_offset, sysflag,
                                                    store_ts, born, store):
    raw = b"pad" + bytes(encode_record(MessageRecord(
        topic=topic, body=body, properties=properties, queue_id=queue_id, queue_offset=queue_offset,
        sysflag=sysflag, store_timestamp=store_ts, born_host=born, store_host=store)))
    full = decode_record(raw, 3)
    fields = decode_dispatch_fields(raw, 3, len(raw))
    assert fields == (full.total_size, full.topic, full.queue_id, full.queue_offset, full.sysflag,
                      full.store_timestamp, full.properties)


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: b[:4] + b"\0\0\0\0" + b[8:], "bad magic"),
    (lambda b: struct.pack(">i", 50) + b[4:], "below minimum"),
    (lambda b: struct.pack(">i", len(b) + 10) + b[4:], "runs past the end"),
    (lambda b: b[:84] + struct.pack(">i", 5000) + b[88:], "body length"),
    (lambda b: b[:84] + struct.pack(">i", -1) + b[88:], "body length"),
    (lambda b: b[:-6] + struct.pack(">h", 9) + b[-4:], "properties length"),  # props "A\x01b\x02"
])
def test_dispatch_fields_reject_damage_as_the_full_decode_does(mutate, reason):
    raw = bytes(encode_record(MessageRecord(topic="Topic", body=b"hello world", properties={"A": "b"})))
    bad = mutate(raw)
    with pytest.raises(RecordError, match=reason):
        decode_dispatch_fields(bad, 0, len(bad))


@given(body=st.binary(max_size=5000),
       kind=st.sampled_from([sf.CompressionType.ZLIB, sf.CompressionType.ZSTD]), legacy=st.booleans())
def test_compressed_bodies_decompress_by_their_type_bits(body, kind, legacy):
    flags = sf.COMPRESSED if (legacy and kind is sf.CompressionType.ZLIB) else sf.with_compression(0, kind)
    rec = MessageRecord(topic="T", body=compress(body, kind), sysflag=flags)
    back = decode_record(encode_record(rec))
    assert back.payload() == body
    assert sf.compression_type(back.sysflag) is kind


def test_zstd_sets_rocketmq5_type_bits():
    assert sf.with_compression(0, sf.CompressionType.ZSTD) == 0x201


def test_patch_store_fields_fills_offsets_and_store_time():
    raw = encode_record(MessageRecord(topic="T", body=b"x", born_host=("::1", 1)))
    patch_store_fields(raw, 11, 12345, 999)
    rec = decode_record(raw)
    assert (rec.queue_offset, rec.phys_offset, rec.store_timestamp) == (11, 12345, 999)


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: b[:4] + b"\0\0\0\0" + b[8:], "bad magic"),
    (lambda b: struct.pack(">i", 50) + b[4:], "below minimum"),
    (lambda b: struct.pack(">i", len(b) + 10) + b[4:], "runs past the end"),
    (lambda b: b[:-3] + bytes([b[-3] ^ 1]) + b[-2:], None),  # properties byte: still valid text
    (lambda b: b[:84 + 4] + bytes([b[88] ^ 0xFF]) + b[89:], "body crc mismatch"),
])
def test_damaged_records_are_rejected_with_a_reason(mutate, reason):
    raw = bytes(encode_record(MessageRecord(topic="Topic", body=b"hello world", properties={"A": "b"})))
    bad = mutate(raw)
    if reason is None:
        decode_record(bad)
        return
    with pytest.raises(RecordError, match=reason):
        decode_record(bad)


def test_properties_length_mismatch_is_structural_damage():
    raw = bytearray(encode_record(MessageRecord(topic="T", body=b"b", properties={"K": "v"})))
    struct.pack_into(">h", raw, len(raw) - 6, 3)  # props length no longer matches TOTALSIZE
    with pytest.raises(RecordError, match="properties length"):
        decode_record(raw)


def test_blank_marker_layout():
    raw = encode_blank(300)
    assert raw == struct.pack(">ii", 300, BLANK_MAGIC) and is_blank(raw)
    assert not is_blank(bytes(encode_record(MessageRecord(topic="T"))))


def test_pull_body_is_a_concatenation_of_records():
    recs = [MessageRecord(topic="T", body=bytes([i]) * i) for i in range(5)]
    body = b"".join(bytes(encode_record(r)) for r in recs)
    assert [r.body for r in decode_records(body)] == [r.body for r in recs]


@given(props)
def test_properties_round_trip(p):
    assert decode_properties(encode_properties(p)) == p


@pytest.mark.parametrize("props", [{"TRACE_CONTEXT": "t\x02UNIQ_KEY\x01planted"}, {"a\x01b": "c"},
                                   {"k": "v\x02DELAY\x014"}])
def test_a_separator_in_a_name_or_value_is_refused_not_encoded(props):
    """It would decode as other properties (a client's text becoming UNIQ_KEY or DELAY)."""
    with pytest.raises(FormatError, match="may not hold"):
        encode_properties(props)
    with pytest.raises(FormatError):
        encode_record(MessageRecord(topic="T", properties=props))


def test_properties_decode_is_tolerant():
    assert decode_properties("A\x011\x02broken\x02\x01x\x02B\x012") == {"A": "1", "B": "2"}
    assert encode_properties({"KEYS": "k1 k2", "TAGS": "t"}) == "KEYS\x01k1 k2\x02TAGS\x01t\x02"


@pytest.mark.parametrize("hosts", [(("10.0.0.1", 1), ("10.0.0.2", 2)), (("::1", 1), ("10.0.0.2", 2)),
                                   (("10.0.0.1", 1), ("fe80::2", 2))])
@pytest.mark.parametrize("topic", ["T", "T" * 200])  # a v2 record's 2-byte topic length
def test_record_properties_reads_what_the_full_decode_reads(hosts, topic):
    props = {"TAGS": "t", "region": "eu", "amount": "150", "UNIQ_KEY": "K1", "blank": ""}
    raw = bytes(encode_record(MessageRecord(topic=topic, body=b"x" * 40, properties=props,
                                            born_host=hosts[0], store_host=hosts[1])))
    got = record_properties(b"pad" + raw, 3)
    assert dict(got) == decode_record(raw).properties == props
    assert got.get("region") == "eu" and got.get("blank") == "" and got.get("missing") is None
    with pytest.raises(RecordError):
        record_properties(raw[:-1])  # a record cut short is named, not misread
