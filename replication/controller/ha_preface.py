"""How an HA link starts under a controller (RocketMQ's AutoSwitchHAClient / AutoSwitchHAConnection
handshake, in our own layout): before the slave's first offset report, it says which broker it
is, and the master answers with its epochs, so the slave can cut its log where the two agree
(:func:`replication.controller.epochs.consistent_point`) before it asks for anything.

```
 slave -> master   +-----------+-----------+----------------+
                   | state i32 | flags i32 | broker id i64  |    state 1 = HANDSHAKE, flags 0
                   +-----------+-----------+----------------+
 master -> slave   +-----------+---------------+-------------+----------------------------+
                   | state i32 | max offset i64| count i32   | count x (epoch i32, start i64)
                   +-----------+---------------+-------------+----------------------------+
```

Then the link carries the classic stream (:mod:`replication.master_slave.protocol`). The
master knows each slave by its broker id from here on (a sync send waits for the SyncStateSet's
members by id). Everything read is bounded: a count past :data:`EPOCHS_MAX` or a bad state
drops the link.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import trio

from formats.epoch_file import EpochEntry
from replication.errors import ProtocolError
from replication.master_slave.handshake import receive_exactly

HANDSHAKE = 1
EPOCHS_MAX = 65_536
PREFACE_TIMEOUT_S = 5.0
_HELLO = struct.Struct(">iiq")
_EPOCHS_HEAD = struct.Struct(">iqi")
_ENTRY = struct.Struct(">iq")


def encode_hello(broker_id: int) -> bytes:
    return _HELLO.pack(HANDSHAKE, 0, broker_id)


def decode_hello(data: bytes) -> int:
    state, _flags, broker_id = _HELLO.unpack(data)
    if state != HANDSHAKE or not 0 <= broker_id < 2**31:
        raise ProtocolError(f"bad HA handshake: state {state}, broker id {broker_id}")
    return int(broker_id)


def encode_epochs(entries: list[EpochEntry], max_offset: int) -> bytes:
    return _EPOCHS_HEAD.pack(HANDSHAKE, max_offset, len(entries)) + b"".join(
        _ENTRY.pack(e.epoch, e.start_offset) for e in entries)


def decode_epochs_head(data: bytes) -> tuple[int, int]:
    """(max offset, entry count) of the master's answer."""
    state, max_offset, count = _EPOCHS_HEAD.unpack(data)
    if state != HANDSHAKE or max_offset < 0 or not 0 <= count <= EPOCHS_MAX:
        raise ProtocolError(f"bad HA handshake answer: state {state}, max offset {max_offset}, {count} epochs")
    return max_offset, count


def decode_entries(data: bytes) -> list[EpochEntry]:
    entries = [EpochEntry(epoch, start) for epoch, start in _ENTRY.iter_unpack(data)]
    for before, after in zip(entries, entries[1:]):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise ProtocolError(f"the master's epochs are out of order: {before} then {after}")
    if entries and (entries[0].start_offset < 0 or entries[0].epoch < 0):
        raise ProtocolError(f"a negative epoch entry {entries[0]}")
    return entries


async def _receive(stream: trio.SocketStream, size: int) -> bytes:
    return await receive_exactly(stream, size, during="the HA handshake", error=ProtocolError)


async def greet_slave(stream: trio.SocketStream, epochs: Callable[[], tuple[list[EpochEntry], int]]) -> str:
    """The master's side: the slave's broker id (as text, the link's member), after telling it
    this master's epochs and log end."""
    with trio.fail_after(PREFACE_TIMEOUT_S):
        broker_id = decode_hello(await _receive(stream, _HELLO.size))
        entries, max_offset = epochs()
        await stream.send_all(encode_epochs(entries, max_offset))
    return str(broker_id)


async def greet_master(stream: trio.SocketStream, broker_id: int) -> tuple[list[EpochEntry], int]:
    """The slave's side: the master's epochs and log end."""
    with trio.fail_after(PREFACE_TIMEOUT_S):
        await stream.send_all(encode_hello(broker_id))
        max_offset, count = decode_epochs_head(await _receive(stream, _EPOCHS_HEAD.size))
        return decode_entries(await _receive(stream, count * _ENTRY.size)), max_offset
