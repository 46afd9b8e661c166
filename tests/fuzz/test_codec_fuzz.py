"""Every decoder fed random, truncated and mutated bytes: it returns a value or raises the one
error type it documents, never anything else (an IndexError or struct.error here is a crash
that a hostile peer or a damaged file could trigger)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.acl.file import AclFileError, parse_acl
from core.remoting.command import (
    FrameDecoder,
    FrameError,
    HeaderError,
    RemotingCommand,
    decode_header,
    encode_frame,
)
from formats import dledger
from formats.batch import BatchItem, decode_batch, encode_batch
from formats.consume_queue import iter_cq_entries
from formats.errors import FormatError
from formats.msgid import decode_offset_msg_id
from formats.properties import decode_properties
from formats.record import MessageRecord, decode_record, decode_records, encode_record
from formats.record_vectors import decode_run
from formats.segments import Damage, RecordAt, scan_segment
from replication.dledger.raft_log import PackedEntries
from replication.dledger.wire import WireError, decode_message
from replication.errors import ProtocolError
from replication.master_slave.protocol import ReportParser, TransferParser

# MQ_FUZZ_EXAMPLES raises the count for a longer hunt than CI's
EXAMPLES = int(os.environ.get("MQ_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding, then truncated, extended, or with a few bytes overwritten."""
    data = bytearray(draw(valid))
    kind = draw(st.sampled_from(["keep", "truncate", "extend", "mutate", "mutate"]))
    if kind == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "extend":
        data += draw(st.binary(min_size=1, max_size=64))
    elif kind == "mutate" and data:
        for _ in range(draw(st.integers(1, 6))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def hostile(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=400), mutated(valid))


texts = st.text(max_size=20)
# what the encoders take (they refuse the separators); the mutations then break them every way
property_texts = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=8)
records = st.builds(
    lambda topic, body, props, qid: encode_record(
        MessageRecord(topic=topic or "T", body=body, properties=props, queue_id=qid)),
    st.text(min_size=1, max_size=12), st.binary(max_size=80),
    st.dictionaries(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "x"]), property_texts, max_size=3),
    st.integers(0, 7))
commands = st.builds(
    lambda code, ext, body, st_: encode_frame(RemotingCommand(code=code, ext_fields=ext, body=body,
                                                              serialize_type=st_)),
    st.integers(-(2**15), 2**15 - 1), st.dictionaries(texts, texts, max_size=4), st.binary(max_size=40),
    st.sampled_from([0, 1]))


@FUZZ
@given(hostile(st.lists(commands, max_size=3).map(b"".join)), st.integers(1, 64))
def test_frame_decoder(data, chunk):
    decoder = FrameDecoder(frame_size_max=64 * 1024)
    try:
        for i in range(0, len(data), chunk):
            for item in decoder.feed(data[i:i + chunk]):
                assert isinstance(item, RemotingCommand | HeaderError)
    except FrameError:
        pass
    assert decoder.buffered <= 64 * 1024 + 4


@FUZZ
@given(hostile(commands.map(lambda frame: frame[8:])), st.sampled_from([0, 1, 2, 255]))
def test_header_decoder(raw, serialize_type):
    try:
        cmd = decode_header(raw, serialize_type)
    except HeaderError:
        return
    assert isinstance(cmd.code, int) and isinstance(cmd.opaque, int)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in cmd.ext_fields.items())


@FUZZ
@given(hostile(st.lists(records, min_size=1, max_size=3).map(b"".join)), st.booleans())
def test_record_decoders(data, check_crc):
    try:
        decode_record(data, 0, check_crc=check_crc)
    except FormatError:
        pass
    try:
        decode_records(data, check_crc=check_crc)
    except FormatError:
        pass


@FUZZ
@given(hostile(st.lists(records, min_size=1, max_size=4).map(b"".join)), st.integers(0, 40))
def test_segment_scans_and_vector_runs_cover_every_byte(data, start):
    """The careful scan accounts for every byte as a record or damage; the vector decoder
    either declines or agrees with it on where its run ends."""
    covered = 0
    for item in scan_segment(data, 0, Path("fuzz"), is_last=True):
        if isinstance(item, RecordAt):
            assert item.offset == covered
            covered += item.record.total_size
        elif isinstance(item, Damage):
            assert item.offset == covered
            covered += item.length
    assert covered <= len(data)
    vectors, end = decode_run(data, 0, len(data), 0)
    assert 0 <= end <= len(data)
    if vectors is not None:
        assert vectors.rows >= 0


batches = st.lists(st.builds(BatchItem, body=st.binary(max_size=30),
                             properties=st.dictionaries(property_texts, property_texts, max_size=2)),
                   max_size=3).map(encode_batch)


@FUZZ
@given(hostile(batches))
def test_batch_decoder(data):
    try:
        items = decode_batch(data)
    except FormatError:
        return
    assert all(isinstance(item, BatchItem) for item in items)


@FUZZ
@given(st.binary(max_size=200))
def test_consume_queue_entries(data):
    entries = list(iter_cq_entries(data))
    assert len(entries) <= len(data) // 20


@FUZZ
@given(hostile(st.builds(lambda i, t, p, b: dledger.encode_entry(i, t, p, b),
                         st.integers(0, 2**40), st.integers(0, 2**20), st.integers(0, 2**40),
                         st.binary(max_size=60))))
def test_dledger_entries(data):
    try:
        dledger.decode_header(data, 0)
    except FormatError:
        pass
    try:
        PackedEntries.parse(data)
    except ValueError:
        pass


@FUZZ
@given(st.text(max_size=60))
def test_properties_and_msg_ids(text):
    assert isinstance(decode_properties(text), dict)
    try:
        decode_offset_msg_id(text)
    except FormatError:
        pass


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=6))
def test_ha_stream_parsers(chunks):
    report, transfer = ReportParser(), TransferParser(batch_bytes_max=1024)
    for chunk in chunks:
        try:
            report.feed(chunk)
        except ProtocolError:
            report = ReportParser()
        try:
            transfer.feed(chunk)
        except ProtocolError:
            transfer = TransferParser(batch_bytes_max=1024)


raft_fields = st.dictionaries(
    st.sampled_from(["term", "candidate", "lastIndex", "lastTerm", "voter", "result", "leader", "commitIndex",
                     "peer", "code", "kind", "index", "endIndex", "count", "seq", "transfer", "preVote"]),
    st.one_of(st.integers(-(2**70), 2**70).map(str), texts, st.sampled_from(["APPEND", "COMMIT", "ACCEPT", "1"])))


@FUZZ
@given(st.integers(50000, 50010), raft_fields, st.binary(max_size=120))
def test_raft_wire_decoder(code, fields, body):
    try:
        decode_message(RemotingCommand(code=code, ext_fields=fields, body=body))
    except WireError:
        pass


yaml_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), texts),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(texts, inner, max_size=3)), max_leaves=8)
acl_docs = st.fixed_dictionaries({}, optional={
    "globalWhiteRemoteAddresses": yaml_values,
    "accounts": st.one_of(yaml_values, st.lists(st.fixed_dictionaries({}, optional={
        "accessKey": yaml_values, "secretKey": yaml_values, "admin": yaml_values, "whiteRemoteAddress": yaml_values,
        "defaultTopicPerm": yaml_values, "defaultGroupPerm": yaml_values, "topicPerms": yaml_values,
        "groupPerms": yaml_values}), max_size=2))})


@FUZZ
@given(st.one_of(yaml_values, acl_docs))
def test_acl_documents(doc):
    try:
        parse_acl(doc)
    except AclFileError:
        pass


@pytest.mark.parametrize("data", [b"", b"\x00" * 3, b"\xff" * 8])
def test_tiny_inputs_are_errors_not_crashes(data):
    with pytest.raises(FormatError):
        decode_record(data)
