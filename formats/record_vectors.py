"""Runs of well-formed records decoded as vectors, straight into Arrow arrays.

Analytics (the ``commitlog`` Spark source) spends most of its time turning bytes into columns, so
runs of ordinary records skip the per-record Python of :mod:`formats.columns`: one Python step
per record follows the size chain, and everything else is numpy gathers and Arrow arrays over
the whole run::

  walk      pos -> pos + TOTALSIZE (or the DLedger entry size)        one struct read a record
  heads     the 88-byte fixed head of every record, gathered into a structured array:
            TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
            BORNTIMESTAMP BORNHOST(4+4) STORETIMESTAMP STOREHOST(4+4) RECONSUMETIMES
            PREPAREDTRANSACTIONOFFSET BODYLENGTH
  checks    the checks of formats.columns, as vectors (magic, IPv4 hosts, PHYSICALOFFSET equal
            to the position, lengths that add up, UTF-8 topic and properties)
  strings   topic and properties bytes gathered into Arrow string arrays
  pairs     properties split on 0x02 (pairs) and the first 0x01 (name, value) as positions
  crc       zlib-compatible CRC32 of each body through a memoryview (no copy)

A run ends at the first record any check refuses, or whose properties repeat a name or carry
KEYS with whitespace other than spaces: :func:`formats.columns.scan_columns` hands that record
to the careful scanner, so the rows are the same either way.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from formats import dledger
from formats import sysflag as sf
from formats.properties import KEYS, TAGS, UNIQ_KEY
from formats.record import CRC_MASK, MAGIC_V1, MAGIC_V2, RECORD_SIZE_MIN
from formats.segments import Buffer

try:  # ISA-L's CRC32 is about four times zlib's; the values are the same
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the same function, slower
    from zlib import crc32

HEAD = np.dtype([
    ("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("phys", ">i8"), ("sysflag", ">i4"), ("born_ts", ">i8"),
    ("born_ip", ">u4"), ("born_port", ">i4"), ("store_ts", ">i8"), ("store_ip", ">u4"), ("store_port", ">i4"),
    ("reconsume", ">i4"), ("prepared", ">i8"), ("body_len", ">i4"),
])
ENTRY = np.dtype([("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("skip", "V20"),
                  ("body_size", ">i4")])
assert HEAD.itemsize == 88 and ENTRY.itemsize == dledger.HEADER_SIZE
_HEAD_BYTES = np.arange(HEAD.itemsize)
_ENTRY_BYTES = np.arange(ENTRY.itemsize)
_HEAD_BYTES.flags.writeable = _ENTRY_BYTES.flags.writeable = False  # offsets every scan shares
_I32 = struct.Struct(">i")
_V6_BITS = sf.BORNHOST_V6 | sf.STOREHOST_V6
_PAIR_SEPARATOR, _NAME_SEPARATOR = 2, 1  # formats.properties: PROPERTY_SEPARATOR, NAME_VALUE_SEPARATOR


def decode_run(buf: Buffer, pos: int, stop: int, base: int, *, with_body: bool = False,
               max_rows: int = 16384) -> tuple[RecordVectors | None, int]:
    """The run of well-formed records from ``pos`` (those starting before ``stop``, at most
    ``max_rows``) and where it ended; ``None`` when the record at ``pos`` is not one for a run."""
    wrapped = dledger.looks_like_entry(buf, 0)
    positions = _walk(buf, pos, stop, wrapped, max_rows)
    if not positions:
        return None, pos
    data = np.frombuffer(buf, np.uint8)
    with memoryview(buf) as view:
        run = _decode(data, view, np.array(positions, np.int64), base, wrapped, with_body)
    del data  # the segment's map may be closed once no array looks into it
    return (None, pos) if run is None else (run, run.end)


def _walk(buf: Buffer, pos: int, stop: int, wrapped: bool, room: int) -> list[int]:
    """Record (or entry) starts following the size chain from ``pos``: the candidates of a run."""
    head = dledger.HEADER_SIZE if wrapped else 0
    size_at = 4 if wrapped else 0
    smallest = head + RECORD_SIZE_MIN
    limit = len(buf) - head - HEAD.itemsize
    unpack = _I32.unpack_from
    positions = []
    while room and pos < stop and pos <= limit:
        size = unpack(buf, pos + size_at)[0]
        if size < smallest:
            break
        positions.append(pos)
        pos += size
        room -= 1
    return positions


@dataclass(slots=True)
class RecordVectors:
    """The decoded records of a run, as numpy and Arrow arrays; :meth:`column` gives each column
    of :data:`formats.columns.RECORD_COLUMNS` (and ``properties``, ``body``) as an Arrow array."""

    heads: np.ndarray
    entries: np.ndarray | None
    topic: pa.Array
    names: pa.Array
    values: pa.Array
    pair_counts: np.ndarray
    tags: pa.Array
    keys: pa.Array
    uniq_key: pa.Array
    crc_ok: np.ndarray
    body: pa.Array | None
    end: int

    @property
    def rows(self) -> int:
        return len(self.heads)

    def column(self, name: str, kind: pa.DataType) -> pa.Array:
        """Column ``name`` as an Arrow array of type ``kind`` (``properties``: a map)."""
        h = self.heads
        if name in _HEAD_COLUMNS:
            return pa.array(_native(h[_HEAD_COLUMNS[name]]), kind)
        if name in ("born_host", "store_host"):
            side = name[:-5]
            return _hosts(h[side + "_ip"], h[side + "_port"])
        if name == "compressed":
            return pa.array((h["sysflag"] & sf.COMPRESSED) != 0)
        if name == "body_crc_ok":
            return pa.array(self.crc_ok)
        if name in ("raft_index", "raft_term"):
            if self.entries is None:
                return pa.nulls(len(h), kind)
            return pa.array(_native(self.entries["index" if name == "raft_index" else "term"]), kind)
        if name == "properties":
            offsets = np.zeros(len(h) + 1, np.int32)
            np.cumsum(self.pair_counts, out=offsets[1:])
            return pa.MapArray.from_arrays(pa.array(offsets), self.names, self.values)
        if name == "body":
            if self.body is None:
                raise ValueError("the run was decoded without bodies")
            return self.body
        if name in ("topic", "tags", "keys", "uniq_key"):
            return getattr(self, name)  # type: ignore[no-any-return]
        raise KeyError(name)


_HEAD_COLUMNS = MappingProxyType({
    "queue_id": "queue_id", "queue_offset": "queue_offset", "phys_offset": "phys", "size": "total",
    "body_size": "body_len", "body_crc": "crc", "flag": "flag", "sysflag": "sysflag", "born_ts": "born_ts",
    "store_ts": "store_ts", "reconsume_times": "reconsume",
})


def _decode(data: np.ndarray, view: memoryview, starts: np.ndarray, base: int, wrapped: bool,
            with_body: bool) -> RecordVectors | None:
    """The run of the records at ``starts`` up to the first one a check refuses."""
    while len(starts):
        try:
            return _decode_all(data, view, starts, base, wrapped, with_body)
        except _Refused as refused:
            starts = starts[:refused.good]
    return None


class _Refused(Exception):
    """A check refused a record of the run; ``good`` records lead before it."""

    def __init__(self, good: int) -> None:
        self.good = good


def _require(ok: np.ndarray) -> None:
    if not ok.all():
        raise _Refused(int(np.argmin(ok)))


def _decode_all(data: np.ndarray, view: memoryview, starts: np.ndarray, base: int, wrapped: bool,
                with_body: bool) -> RecordVectors:
    """The records at ``starts``, all of them, or :class:`_Refused`."""
    n = len(starts)
    limit = len(data)
    entries = None
    records = starts
    if wrapped:
        entries = data[starts[:, None] + _ENTRY_BYTES].view(ENTRY)[:, 0]
        records = starts + dledger.HEADER_SIZE
    heads = data[records[:, None] + _HEAD_BYTES].view(HEAD)[:, 0]
    total = heads["total"].astype(np.int64)
    ends = records + total
    magic = heads["magic"]
    body_len = heads["body_len"].astype(np.int64)
    ok = (((magic == MAGIC_V1) | (magic == MAGIC_V2)) & ((heads["sysflag"] & _V6_BITS) == 0)
          & (total >= RECORD_SIZE_MIN) & (heads["phys"] == base + records) & (body_len >= 0) & (ends <= limit))
    if entries is not None:
        entry_ends = starts + entries["size"]
        ok &= (entries["magic"] == dledger.MAGIC_NORMAL) & (entry_ends <= limit) & (entries["body_size"] == total)
        ok &= ends <= entry_ends
    _require(ok)
    # the topic length: one byte (MAGIC_V1) or two (MAGIC_V2) after the body
    v2 = magic == MAGIC_V2
    at = records + HEAD.itemsize + body_len
    _require(at + 1 + v2 <= ends)
    high = data[at].astype(np.int64)
    low = data[np.minimum(at + 1, limit - 1)].astype(np.int64)
    topic_len = np.where(v2, _int16(high << 8 | low), high)
    topic_at = at + 1 + v2
    props_len_at = topic_at + topic_len
    _require((topic_len > 0) & (props_len_at + 2 <= ends))
    props_at = props_len_at + 2
    props_len = _int16(data[props_len_at].astype(np.int64) << 8 | data[props_len_at + 1])
    _require(props_len == ends - props_at)
    topic, topic_good = _strings(data, topic_at, topic_len)
    text, text_good = _strings(data, props_at, props_len)
    if min(topic_good, text_good) < n:
        raise _Refused(min(topic_good, text_good))
    props = _Properties.parse(text)
    if props.refused < n:
        raise _Refused(props.refused)
    body_at = records + HEAD.itemsize
    bodies = map(view.__getitem__, map(slice, body_at.tolist(), (body_at + body_len).tolist()))
    crcs = np.fromiter(map(crc32, bodies), np.int64, n)
    crc_ok = (crcs & CRC_MASK) == heads["crc"]
    body = None
    if with_body:
        offsets, raw = _gather(data, body_at, body_len)
        body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
    last_end = int(ends[-1]) if entries is None else int(starts[-1] + entries["size"][-1])
    return RecordVectors(heads, entries, topic, props.names, props.values, props.counts, props.tags, props.keys,
                props.uniq_key, crc_ok, body, last_end)


def _int16(unsigned: np.ndarray) -> np.ndarray:
    return (unsigned ^ 0x8000) - 0x8000


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrow offsets (int32) and the bytes ``data[starts[i]:starts[i] + lengths[i]]`` back to back."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return offsets.astype(np.int32), data[index]


def _strings(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[pa.Array, int]:
    """The slices as an Arrow string array, and how many lead before the first that is not UTF-8."""
    offsets, raw = _gather(data, starts, lengths)
    strings = pa.Array.from_buffers(pa.string(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        for i, value in enumerate(pa.Array.from_buffers(pa.binary(), len(starts), strings.buffers()).to_pylist()):
            try:
                value.decode()
            except UnicodeDecodeError:
                return strings, i
    return strings, len(starts)


@dataclass(slots=True)
class _Properties:
    """Properties of a run split into (name, value) pairs, and the columns drawn from them."""

    names: pa.Array
    values: pa.Array
    counts: np.ndarray  # pairs per record
    tags: pa.Array
    keys: pa.Array
    uniq_key: pa.Array
    refused: int  # records before the first the careful scanner must take

    @classmethod
    def parse(cls, text: pa.Array) -> _Properties:
        """Pairs as ``decode_properties`` reads them: split on 0x02, then at the first 0x01;
        pairs without a separator or with an empty name are dropped."""
        n = len(text)
        _, offsets_buf, data_buf = text.buffers()
        offsets = np.frombuffer(offsets_buf, np.int32, n + 1, text.offset * 4).astype(np.int64)
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        data = data[:offsets[-1]]
        pair_breaks = np.flatnonzero(data == _PAIR_SEPARATOR)
        pair_starts = np.sort(np.concatenate((offsets[:-1], pair_breaks + 1)))
        pair_ends = np.sort(np.concatenate((pair_breaks, offsets[1:])))
        name_breaks = np.flatnonzero(data == _NAME_SEPARATOR)
        first = np.searchsorted(name_breaks, pair_starts)
        sep = np.append(name_breaks, len(data) + 1)[first]
        keep = (sep < pair_ends) & (sep > pair_starts)
        pair_starts, pair_ends, sep = pair_starts[keep], pair_ends[keep], sep[keep]
        owner = np.searchsorted(offsets, pair_starts, side="right") - 1
        names = _slices(data, pair_starts, sep - pair_starts)
        values = _slices(data, sep + 1, pair_ends - sep - 1)
        counts = np.bincount(owner, minlength=n)
        codes = names.dictionary_encode()
        dictionary = codes.dictionary.to_pylist()
        code = codes.indices.to_numpy()
        repeated = _first_repeat(owner, code, len(dictionary), n)
        picked = {}
        for key in (TAGS, KEYS, UNIQ_KEY):
            where = np.full(n, -1, np.int64)
            if key in dictionary:
                mine = np.flatnonzero(code == dictionary.index(key))
                where[owner[mine]] = mine
            picked[key] = values.take(pa.array(where, mask=where < 0))
        keys, odd = _split_keys(picked[KEYS])
        return cls(names, values, counts, picked[TAGS], keys, picked[UNIQ_KEY], min(repeated, odd))


def _slices(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    offsets, raw = _gather(data, starts, lengths)
    return pa.Array.from_buffers(pa.string(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def _first_repeat(owner: np.ndarray, code: np.ndarray, distinct: int, n: int) -> int:
    """The first record naming a property twice (``n`` if none does)."""
    if not len(owner):
        return n
    pair_id = owner.astype(np.int64) * max(distinct, 1) + code
    if n * max(distinct, 1) <= 1 << 22:
        seen = np.bincount(pair_id, minlength=n * max(distinct, 1))
        twice = np.flatnonzero(seen > 1)
    else:
        unique, count = np.unique(pair_id, return_counts=True)
        twice = unique[count > 1]
    return int(twice.min() // max(distinct, 1)) if len(twice) else n


def _split_keys(values: pa.Array) -> tuple[pa.Array, int]:
    """KEYS values as lists split on spaces (``str.split()`` for text of printable ASCII and
    spaces; no KEYS is an empty list), and how many records lead before the first KEYS value
    with other whitespace or non-ASCII bytes, which :func:`str.split` would read differently."""
    n = len(values)
    filled = values.fill_null("")
    _, offsets_buf, data_buf = filled.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, n + 1, filled.offset * 4).astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8)[offsets[0]:offsets[-1]] if data_buf is not None else np.zeros(0, np.uint8)
    # bytes of whitespace str.split() knows besides the space: ASCII controls, and the lead bytes of
    # U+0085, U+00A0 (0xC2), U+1680 (0xE1), U+2000..U+205F (0xE2) and U+3000 (0xE3)
    odd_bytes = np.flatnonzero(((data < 0x21) & (data != 0x20)) | (data == 0xC2) | ((data >= 0xE1) & (data <= 0xE3)))
    odd = int(np.searchsorted(offsets, odd_bytes[0] + offsets[0], side="right") - 1) if len(odd_bytes) else n
    words = pc.split_pattern(filled, " ")
    flat = words.flatten()
    owner = pc.list_parent_indices(words).to_numpy()
    nonempty = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    counts = np.bincount(owner[nonempty], minlength=n)
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(list_offsets), flat.filter(pa.array(nonempty))), odd


def _native(values: np.ndarray) -> np.ndarray:
    """Big-endian store fields in the machine's byte order, which Arrow takes."""
    return values.astype(values.dtype.newbyteorder("="))


def _hosts(ip: np.ndarray, port: np.ndarray) -> pa.Array:
    """``a.b.c.d:port`` for each IPv4 address and port, formatted once per distinct pair."""
    key = ip.astype(np.int64) << 32 | (port.astype(np.int64) & 0xFFFFFFFF)
    distinct, index = np.unique(key, return_inverse=True)
    text = [f"{k >> 56 & 255}.{k >> 48 & 255}.{k >> 40 & 255}.{k >> 32 & 255}:{_signed(k & 0xFFFFFFFF)}"
            for k in distinct.tolist()]
    return pa.array(text, pa.string()).take(pa.array(index.astype(np.int32)))


def _signed(port: int) -> int:
    return port - (1 << 32) if port & 0x80000000 else port
