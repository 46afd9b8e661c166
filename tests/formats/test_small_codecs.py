import pytest
from hypothesis import given
from hypothesis import strategies as st

from formats import dledger
from formats.batch import BatchItem, decode_batch, encode_batch
from formats.consume_queue import CQ_ENTRY_SIZE, CQEntry, decode_cq_entry, encode_cq_entry, iter_cq_entries
from formats.errors import FormatError
from formats.msgid import (
    UniqKeyGenerator,
    decode_offset_msg_id,
    encode_offset_msg_id,
    is_uniq_key,
)
from formats.properties import PropertiesText, decode_properties
from formats.tags import java_string_hash, subscription_codes, tags_code

text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=10)
items = st.builds(BatchItem, st.binary(max_size=100), st.dictionaries(text.filter(bool), text, max_size=3),
                  st.integers(-(2**31), 2**31 - 1))


@given(st.lists(items, max_size=8))
def test_batch_round_trip(batch):
    assert decode_batch(encode_batch(batch)) == batch


def test_batch_item_layout_matches_java_encode_message():
    raw = encode_batch([BatchItem(b"ab", {"K": "v"}, flag=3)])
    # TOTALSIZE 28 = 22 + 2 body + 4 props; MAGIC 0; BODYCRC 0; FLAG 3; body; props
    assert raw == bytes.fromhex("0000001c" "00000000" "00000000" "00000003" "00000002" "6162" "0004" "4b017602")


def test_truncated_batch_is_an_error():
    raw = encode_batch([BatchItem(b"abc")])
    with pytest.raises(FormatError):
        decode_batch(raw[:-1])


@given(st.ip_addresses().map(str), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(host, port, offset):
    msg_id = encode_offset_msg_id(host, port, offset)
    assert len(msg_id) in (32, 56) and msg_id == msg_id.upper()
    back = decode_offset_msg_id(msg_id)
    assert (back.port, back.phys_offset) == (port, offset)


def test_offset_msg_id_matches_the_java_example():
    assert encode_offset_msg_id("127.0.0.1", 10911, 0) == "7F00000100002A9F0000000000000000"


@pytest.mark.parametrize("bad", ["zz", "00", "7F000001" * 3])
def test_bad_msg_ids_are_rejected(bad):
    with pytest.raises(FormatError):
        decode_offset_msg_id(bad)


def test_uniq_keys_are_32_hex_and_distinct():
    gen = UniqKeyGenerator("10.1.2.3", pid=42)
    keys = {gen.next(1_700_000_000_000 + i // 7) for i in range(1000)}
    assert len(keys) == 1000 and all(is_uniq_key(k) for k in keys)
    assert next(iter(keys)).startswith("0A010203002A")


def test_uniq_key_fields_time_since_the_month_and_a_counter():
    gen = UniqKeyGenerator("10.1.2.3", pid=42)
    march = 1_709_251_200_000  # 2024-03-01T00:00:00Z
    first, second = gen.next(now_ms=march + 5_000), gen.next(now_ms=march + 5_000)
    assert first[:12] == "0A010203002A" and first[:20] == second[:20]
    assert first[20:28] == f"{5_000:08X}" and int(second[28:], 16) == int(first[28:], 16) + 1
    april = gen.next(now_ms=1_711_929_600_000 + 7)  # 2024-04-01T00:00:00.007Z: the month rolled
    assert april[20:28] == f"{7:08X}"


@pytest.mark.parametrize("text, expected", [
    ("", 0), ("hello", 99162322), ("TagA", 2598919), ("é", 233), ("\U0001F600", 0xD83D * 31 + 0xDE00),
    ("polygenelubricants", -2147483648),
])
def test_java_string_hash_matches_java(text, expected):
    assert java_string_hash(text) == expected


def test_java_string_hash_long_strings_take_the_loop():
    s = "x" * 600
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert java_string_hash(s) == (h - (1 << 32) if h & 0x80000000 else h)


def test_tags_code_and_subscriptions():
    assert tags_code(None) == 0 and tags_code("") == 0
    assert subscription_codes("*") is None and subscription_codes(" ") is None
    assert subscription_codes("TagA || hello") == {2598919, 99162322}


@given(st.integers(0, 2**63 - 1), st.integers(1, 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_cq_entry_round_trip(phys, size, tags):
    raw = encode_cq_entry(phys, size, tags)
    assert len(raw) == CQ_ENTRY_SIZE and decode_cq_entry(raw) == CQEntry(phys, size, tags)


def test_cq_iteration_stops_at_unwritten_space():
    raw = encode_cq_entry(0, 100, 1) + encode_cq_entry(100, 50, 2) + bytes(40)
    assert [i for i, _ in iter_cq_entries(raw, first_index=10)] == [10, 11]


@given(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62), st.binary(max_size=64))
def test_dledger_header_round_trip(index, term, pos, body):
    raw = dledger.encode_entry(index, term, pos, body)
    header = dledger.decode_header(raw)
    assert (header.raft_index, header.term, header.pos, header.body_len, header.size) == (
        index, term, pos, len(body), 48 + len(body))
    assert raw[dledger.HEADER_SIZE:] == body


def test_dledger_header_inconsistent_size_is_rejected():
    raw = bytearray(dledger.encode_entry(0, 1, 0, b"abc"))
    raw[7] += 1
    with pytest.raises(FormatError):
        dledger.decode_header(raw)


def test_dledger_padding_and_index_entry():
    assert dledger.is_padding(dledger.encode_padding(64))
    entry = dledger.DLedgerIndexEntry(1, 4096, 200, 7, 3)
    assert dledger.decode_index_entry(dledger.encode_index_entry(entry)) == entry


_NAME = st.text(alphabet=st.sampled_from("abAB_$0\x01\x02é"), max_size=4)


@given(st.lists(st.tuples(_NAME, _NAME), max_size=6), st.lists(_NAME, max_size=6))
def test_properties_text_looks_names_up_as_decode_properties_reads_them(pairs, names):
    """A filter's by-name lookup gives what the full decode gives, for every name a selector can
    write (no separator characters); repeated names: the last pair wins in both."""
    text = "".join(f"{n}\x01{v}\x02" for n, v in pairs) + "".join(n for n in names[:1])  # maybe a torn tail
    decoded = decode_properties(text)
    lookup = PropertiesText(text)
    for name in {n for n, _ in pairs} | set(names) | {"a", ""}:
        if "\x01" in name or "\x02" in name:
            continue
        assert lookup.get(name) == decoded.get(name), (text, name)
    assert dict(lookup) == decoded
