"""HPACK: RFC 7541's own examples (Appendix C), the Huffman code both ways, and the bounds a
peer cannot push past."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from formats.hpack import (
    HpackDecoder,
    HpackError,
    encode_integer,
    encode_literal,
    huffman_decode,
    huffman_encode,
)


def test_integers_encode_as_rfc_7541_c1_shows() -> None:
    assert encode_integer(10, 5) == bytes([0b01010])
    assert encode_integer(1337, 5) == bytes([0b11111, 0b10011010, 0b00001010])
    assert encode_integer(42, 8) == bytes([42])


def test_requests_without_huffman_rfc_7541_c3() -> None:
    d = HpackDecoder()
    assert d.decode(bytes.fromhex("828684410f7777772e6578616d706c652e636f6d")) == [
        (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")]
    assert d.decode(bytes.fromhex("828684be58086e6f2d6361636865")) == [
        (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com"),
        (b"cache-control", b"no-cache")]
    assert d.decode(bytes.fromhex("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565")) == [
        (b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"),
        (b":authority", b"www.example.com"), (b"custom-key", b"custom-value")]


def test_requests_with_huffman_rfc_7541_c4() -> None:
    d = HpackDecoder()
    assert d.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))[-1] == (b":authority", b"www.example.com")
    assert d.decode(bytes.fromhex("828684be5886a8eb10649cbf"))[-1] == (b"cache-control", b"no-cache")
    assert d.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))[-1] == (
        b"custom-key", b"custom-value")


def test_the_dynamic_table_evicts_the_oldest_when_full() -> None:
    d = HpackDecoder(table_size_max=100)
    d.decode(b"\x40" + b"\x01a" + b"\x01x")  # a: x, 34 octets
    d.decode(b"\x40" + b"\x01b" + b"\x01y")
    d.decode(b"\x40" + b"\x01c" + b"\x01z")  # 102 > 100: a goes
    assert d.decode(bytes([0x80 | 62, 0x80 | 63])) == [(b"c", b"z"), (b"b", b"y")]
    with pytest.raises(HpackError):
        d.decode(bytes([0x80 | 64]))


def test_a_size_update_may_lower_the_table_but_not_raise_it_past_the_setting() -> None:
    d = HpackDecoder(table_size_max=4096)
    d.decode(b"\x40\x01a\x01x")
    d.decode(b"\x20")  # size 0: the table empties
    with pytest.raises(HpackError):
        d.decode(bytes([0x80 | 62]))
    with pytest.raises(HpackError):
        d.decode(encode_integer(8192, 5, 0x20))


@pytest.mark.parametrize("block", [
    b"\x80",  # index 0
    b"\xff\xff\xff\xff\xff\xff\x7f",  # an integer past 28 bits
    b"\x00\x05ab",  # a name longer than the block
    b"\x00\x81\xff\x01x",  # a Huffman name of EOS bits
    b"\x40",  # a literal with nothing after it
], ids=["index-0", "huge-integer", "short-string", "eos-in-string", "truncated"])
def test_malformed_blocks_are_errors_not_crashes(block: bytes) -> None:
    with pytest.raises(HpackError):
        HpackDecoder().decode(block)


def test_a_header_list_is_bounded() -> None:
    d = HpackDecoder(list_size_max=200)
    field = encode_literal(b"x-big", b"v" * 100)
    d.decode(field)
    with pytest.raises(HpackError):
        d.decode(field * 2)


@given(st.binary(max_size=300))
def test_huffman_round_trips(data: bytes) -> None:
    assert huffman_decode(huffman_encode(data)) == data


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_hpack_error(block: bytes) -> None:
    try:
        HpackDecoder(list_size_max=4096).decode(block)
    except HpackError:
        pass
