"""HPACK (RFC 7541): the header compression of HTTP/2, as a gRPC server reads and writes it.

A header block is a run of field representations; the first byte's high bits say which:

```
 1xxxxxxx                     indexed field: index (7-bit prefix integer)
 01xxxxxx [name] value        literal, added to the dynamic table: name index (6-bit prefix),
                              0 = a literal name follows
 0000xxxx [name] value        literal, not added (4-bit prefix name index)
 0001xxxx [name] value        literal, never to be added by any intermediary (same layout)
 001xxxxx                     dynamic table size update (5-bit prefix): the new maximum size

 a string: H|length (7-bit prefix integer), then length octets, Huffman-coded when H is 1
 an integer with an N-bit prefix: the prefix, and when it is all ones, 7 bits a byte after it,
 low groups first, while the high bit is set
```

Index 1..61 is the static table (Appendix A), 62.. the dynamic table, newest first. An entry
costs ``len(name) + len(value) + 32`` of the table's size, and the oldest go when it overflows.

:class:`HpackDecoder` bounds everything a peer can make it hold: the dynamic table (the size the
server announced), a header list (``list_size_max``, counted as the table counts), integers
(``INTEGER_BITS_MAX``). Literal strings that repeat (a client's id, the RPC's path) are decoded
once: Huffman-coded strings are kept by their coded bytes in a small bounded cache.

Encoding is only what a server answers: literals without indexing, names by static index where
there is one, never Huffman-coded (:func:`encode_literal`), so the encoder keeps no table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType

from formats.errors import FormatError

INTEGER_BITS_MAX = 28  # a length or index beyond 2**28 is an attack, not a header
HUFFMAN_CACHE_MAX = 1024

STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = tuple((n.encode(), v.encode()) for n, v in (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
    (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
    (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
    ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""),
    ("cache-control", ""), ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""),
    ("content-length", ""), ("content-location", ""), ("content-range", ""), ("content-type", ""),
    ("cookie", ""), ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""),
    ("proxy-authenticate", ""), ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
    ("retry-after", ""), ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""),
    ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", "")))
STATIC_NAME_INDEX = MappingProxyType({name: i + 1 for i, (name, _) in reversed(list(enumerate(STATIC_TABLE)))})

# Appendix B: the code length of each symbol 0..256 (256 is EOS), two digits a symbol. The code
# is canonical (codes ascend by length, then by symbol), so the lengths determine the codes.
_CODE_LENGTHS = (
    "132328282828282828243028283028282828282828283028282828282828282806101012130608111010081108060606"
    "050505060606060606060708150612101306070707070707070707070707070707070707070707070807081319131406"
    "150506050605060606050707060606050607060505060707070707151114132820222020222222232223232323232423"
    "242422232423232323212223222323242221202222232321232222242122232321212221232223232022222223222223"
    "262620192223222526262627272624251921262727262724212126262827272720242021222121232222252524242623"
    "2627262627272727272827272727272630")
EOS = 256
_LOOKUP_BITS = 8


class HpackError(FormatError):
    """A header block that does not decode (a COMPRESSION_ERROR of the connection)."""


Codes = tuple[tuple[int, int], ...]
ShortCodes = tuple[tuple[int, int] | None, ...]


def _canonical_codes() -> tuple[Codes, ShortCodes, Mapping[tuple[int, int], int]]:
    lengths = [int(_CODE_LENGTHS[i:i + 2]) for i in range(0, len(_CODE_LENGTHS), 2)]
    assert len(lengths) == 257
    codes: list[tuple[int, int]] = [(0, 0)] * 257
    code, previous = -1, 0
    for symbol in sorted(range(257), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - previous)
        previous = lengths[symbol]
        codes[symbol] = (code, lengths[symbol])
    # a table by the next 8 bits for the short codes, a mapping by (length, code) for the rest
    short: list[tuple[int, int] | None] = [None] * (1 << _LOOKUP_BITS)
    by_code: dict[tuple[int, int], int] = {}
    for symbol, (code, length) in enumerate(codes):
        by_code[(length, code)] = symbol
        if length <= _LOOKUP_BITS:
            pad = _LOOKUP_BITS - length
            for tail in range(1 << pad):
                short[(code << pad) | tail] = (symbol, length)
    return tuple(codes), tuple(short), MappingProxyType(by_code)


_CODES, _SHORT, _BY_CODE = _canonical_codes()


def huffman_decode(data: bytes) -> bytes:
    """The octets Huffman-coded in ``data``; the padding must be at most 7 one bits (RFC 7541 5.2)."""
    acc, bits = int.from_bytes(data, "big"), 8 * len(data)
    out = bytearray()
    while bits > 0:
        if bits >= _LOOKUP_BITS:
            found = _SHORT[(acc >> (bits - _LOOKUP_BITS)) & 0xFF]
            if found is not None:
                out.append(found[0])
                bits -= found[1]
                continue
        code, length = 0, 0
        while True:  # a long code, or the padding at the end
            if length == bits:
                if length > 7 or code != (1 << length) - 1:
                    raise HpackError("Huffman padding is not a prefix of EOS")
                return bytes(out)
            length += 1
            code = (code << 1) | ((acc >> (bits - length)) & 1)
            symbol = _BY_CODE.get((length, code))
            if symbol is not None:
                if symbol == EOS:
                    raise HpackError("EOS inside a Huffman-coded string")
                out.append(symbol)
                bits -= length
                break
            if length >= 30:
                raise HpackError("no Huffman code matches")
    return bytes(out)


def huffman_encode(data: bytes) -> bytes:
    """``data`` Huffman-coded, padded with the EOS prefix (for tests and peers that want it)."""
    acc, bits = 0, 0
    for octet in data:
        code, length = _CODES[octet]
        acc, bits = (acc << length) | code, bits + length
    pad = -bits % 8
    acc, bits = (acc << pad) | ((1 << pad) - 1), bits + pad
    return acc.to_bytes(bits // 8, "big")


def encode_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """``value`` with an N-bit prefix; ``first`` holds the byte's bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literal(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing (0000xxxx), the name by static index when it has one."""
    index = STATIC_NAME_INDEX.get(name)
    head = encode_integer(index, 4) if index is not None else b"\x00" + encode_integer(len(name), 7) + name
    return head + encode_integer(len(value), 7) + value


def encode_indexed(index: int) -> bytes:
    """An indexed field (1xxxxxxx): a static entry such as 8, ``:status: 200``."""
    return encode_integer(index, 7, 0x80)


class HpackDecoder:
    """One connection's decoding context (its dynamic table), see the module's docstring."""

    def __init__(self, table_size_max: int = 4096, list_size_max: int = 16384) -> None:
        self.table_size_max = table_size_max  # what the server announced (SETTINGS_HEADER_TABLE_SIZE)
        self.list_size_max = list_size_max
        self._table_size = table_size_max  # the current size, lowered by the peer's size updates
        self._entries: deque[tuple[bytes, bytes]] = deque()
        self._used = 0
        self._huffman: dict[bytes, bytes] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The (name, value) fields of one complete header block, in order."""
        fields, whole = self.decode_bounded(block)
        if not whole:
            raise HpackError(f"header list over {self.list_size_max} bytes")
        return fields

    def decode_bounded(self, block: bytes) -> tuple[list[tuple[bytes, bytes]], bool]:
        """The fields of one complete header block, and whether they are all there: past
        ``list_size_max`` the block is still decoded to its end, so the dynamic table stays in
        step with the peer's, but no further field is kept (RFC 9113 §10.5.1: a server may
        refuse the request and keep the connection)."""
        fields: list[tuple[bytes, bytes]] = []
        size, pos, end, seen, limit = 0, 0, len(block), False, self.list_size_max
        entries, statics = self._entries, len(STATIC_TABLE)
        while pos < end:
            first = block[pos]
            if first & 0x80:
                index = first & 0x7F
                if 0 < index < statics:  # the common case inline: a static entry in one octet
                    field = STATIC_TABLE[index - 1]
                    pos += 1
                elif statics < index < 0x7F and index - statics <= len(entries):  # a dynamic one
                    field = entries[index - statics - 1]
                    pos += 1
                else:
                    index, pos = self._integer(block, pos, 7)
                    field = self._field(index)
            elif first & 0x40:
                name, value, pos = self._literal(block, pos, 6)
                field = (name, value)
                self._add(field)
            elif first & 0x20:
                new_size, pos = self._integer(block, pos, 5)
                if seen or new_size > self.table_size_max:
                    raise HpackError(f"table size update to {new_size} (after a field, or past {self.table_size_max})")
                self._table_size = new_size
                self._evict(0)
                continue
            else:
                name, value, pos = self._literal(block, pos, 4)
                field = (name, value)
            seen = True
            if size <= limit:
                size += len(field[0]) + len(field[1]) + 32
                if size <= limit:
                    fields.append(field)
        return fields, size <= limit

    def _integer(self, block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = block[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block):
                raise HpackError("a header block ends inside an integer")
            octet = block[pos]
            pos += 1
            value += (octet & 0x7F) << shift
            shift += 7
            if shift > INTEGER_BITS_MAX:
                raise HpackError("an integer of more than 28 bits")
            if not octet & 0x80:
                return value, pos

    def _string(self, block: bytes, pos: int) -> tuple[bytes, int]:
        first = block[pos]
        coded, length = first & 0x80, first & 0x7F
        if length < 0x7F:  # the length in the prefix octet: no call for it
            pos += 1
        else:
            length, pos = self._integer(block, pos, 7)
        if pos + length > len(block):
            raise HpackError("a header block ends inside a string")
        raw = block[pos:pos + length]
        if not coded:
            return raw, pos + length
        value = self._huffman.get(raw)
        if value is None:
            value = huffman_decode(raw)
            if len(self._huffman) >= HUFFMAN_CACHE_MAX:
                self._huffman.clear()
            self._huffman[raw] = value
        return value, pos + length

    def _literal(self, block: bytes, pos: int, prefix_bits: int) -> tuple[bytes, bytes, int]:
        limit = (1 << prefix_bits) - 1
        index = block[pos] & limit
        if index < limit:
            pos += 1
        else:
            index, pos = self._integer(block, pos, prefix_bits)
        if index:
            name = self._field(index)[0]
        else:
            if pos >= len(block):
                raise HpackError("a header block ends before a literal name")
            name, pos = self._string(block, pos)
        if pos >= len(block):
            raise HpackError("a header block ends before a literal value")
        value, pos = self._string(block, pos)
        return name, value, pos

    def _field(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if 0 <= dynamic < len(self._entries):
            return self._entries[dynamic]
        raise HpackError(f"header index {index} names no entry")

    def _add(self, field: tuple[bytes, bytes]) -> None:
        cost = len(field[0]) + len(field[1]) + 32
        self._evict(cost)
        if cost <= self._table_size:  # a bigger one empties the table and is not kept (4.4)
            self._entries.appendleft(field)
            self._used += cost

    def _evict(self, room: int) -> None:
        while self._entries and self._used + room > self._table_size:
            name, value = self._entries.pop()
            self._used -= len(name) + len(value) + 32
