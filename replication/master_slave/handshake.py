"""The membership handshake on the HA port (ACL on), before RocketMQ's HA protocol starts::

    master                                   slave
      | -- CHALLENGE (23 bytes) -------------> |
      | <------------- PROOF (ak, name, id) -- |   the master checks it: else it closes
      | -- ACCEPT (name, 0) -----------------> |   the slave checks it: else it closes
      | <------------ offset report (8 bytes) -|   RocketMQ's HA protocol from here on

The messages are :mod:`replication.membership`'s: the group is the broker name, the member
the broker id ("0" for the master, a slave's id). Every read is exact and bounded (a header,
then at most :data:`~replication.membership.PAYLOAD_BYTES_MAX`); callers bound the time with
:data:`~replication.membership.HANDSHAKE_TIMEOUT_S`. Until the master has checked the proof it
sends nothing but its challenge. With ACL off none of this happens.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from replication.member_keys import Membership
from replication.membership import (
    ACCEPT,
    CHALLENGE,
    HEADER_SIZE,
    PROOF,
    Acceptor,
    Admitted,
    Connector,
    Identity,
    MembershipError,
    payload_size,
)

PURPOSE = b"ha"
MASTER_MEMBER = "0"


def slave_admits(group: str) -> Callable[[Identity], str | None]:
    """Who may follow the master of ``group``: a node of that broker name with a slave's id."""

    def admits(peer: Identity) -> str | None:
        if peer.group != group:
            return f"it belongs to broker group {peer.group!r}, not {group!r}"
        if not (peer.member.isascii() and peer.member.isdecimal()) or int(peer.member) < 1:
            return f"broker id {peer.member!r} is not a slave's (1 or more)"
        return None

    return admits


def master_gate(membership: Membership, group: str) -> Callable[[], Acceptor]:
    """A fresh acceptor per connection on the master of ``group``."""
    me, admits = Identity(group, MASTER_MEMBER), slave_admits(group)
    return lambda: membership.acceptor(PURPOSE, me, admits)


def slave_pass(membership: Membership, group: str, broker_id: int) -> Callable[[], Connector]:
    """A fresh connector per connection of slave ``broker_id`` to the master of ``group``."""
    me, master = Identity(group, str(broker_id)), Identity(group, MASTER_MEMBER)
    return lambda: membership.connector(PURPOSE, me, master)


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int, *, during: str = "the membership handshake",
                          error: type[Exception] = MembershipError) -> bytes:
    """``size`` bytes, no more (what follows stays in the socket for the HA protocol); ``error``
    when the other side closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise error(f"the other side closed the connection during {during}")
        data += chunk
    return bytes(data)


async def receive_message(stream: trio.abc.ReceiveStream, kind: int) -> bytes:
    """One handshake message of ``kind``: its payload."""
    header = await receive_exactly(stream, HEADER_SIZE)
    return await receive_exactly(stream, payload_size(header, kind))


async def admit_slave(stream: trio.abc.Stream, acceptor: Acceptor) -> Admitted:
    """The master's side: challenge, check the proof, accept. Raises :class:`MembershipError`
    (or a broken-stream error) when the peer does not prove membership."""
    await stream.send_all(acceptor.challenge())
    admitted = acceptor.admit(await receive_message(stream, PROOF))
    await stream.send_all(admitted.accept)
    return admitted


async def prove_to_master(stream: trio.abc.Stream, connector: Connector) -> Identity:
    """The slave's side: answer the challenge, then check that the master is its group's."""
    await stream.send_all(connector.prove(await receive_message(stream, CHALLENGE)))
    return connector.check_accept(await receive_message(stream, ACCEPT))
