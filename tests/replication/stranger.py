"""A peer of a replication port as a stranger or an eavesdropper sees it: raw bytes on a TCP
connection, what the port sends first, and a member's proof captured off the wire."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from core.addresses import split_address
from replication.master_slave.handshake import receive_message
from replication.membership import ACCEPT, CHALLENGE, CHALLENGE_SIZE, MAGIC, NONCE_SIZE, Connector, Identity


def is_challenge(data: bytes) -> bool:
    return len(data) == CHALLENGE_SIZE and data.startswith(MAGIC + bytes([CHALLENGE]) + NONCE_SIZE.to_bytes(2, "big"))


async def talk(address: str, script: Callable[[trio.SocketStream, bytes], Awaitable[None]],
               closed_within_s: float = 15) -> tuple[bytes, bytes]:
    """Run ``script(stream, first)`` on a raw connection to ``address`` after reading what it
    sends first; returns (those first bytes, everything received afterwards until the port
    closed the connection, which it must within ``closed_within_s``)."""
    stream = await trio.open_tcp_stream(*split_address(address))
    async with stream:
        first = bytearray()
        with trio.fail_after(5):
            while len(first) < CHALLENGE_SIZE and (chunk := await stream.receive_some(CHALLENGE_SIZE - len(first))):
                first += chunk
        after = bytearray()
        with trio.fail_after(closed_within_s):
            try:
                await script(stream, bytes(first))
                while chunk := await stream.receive_some(65536):
                    after += chunk
            except trio.BrokenResourceError:  # closed with our bytes unread: a reset
                pass
    return bytes(first), bytes(after)


async def captured_proof(address: str, connector: Connector, accepting: Identity) -> bytes:
    """A member's valid PROOF as an eavesdropper captures it (the port accepts it)."""
    stream = await trio.open_tcp_stream(*split_address(address))
    async with stream:
        with trio.fail_after(5):
            proof = connector.prove(await receive_message(stream, CHALLENGE))
            await stream.send_all(proof)
            assert connector.check_accept(await receive_message(stream, ACCEPT)) == accepting
    return proof
