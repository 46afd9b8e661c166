"""Proving membership of a replication group before any of its data flows (sans-IO).

With ACL on, a master's HA port and a raft member's port serve only nodes that prove they hold
the cluster's keys (an admin account of the ACL file) and say who they are. The proof is a
challenge-response, mutual, over the account's secret key: the accepting side sends a fresh
nonce first, the connecting side answers with its own nonce, its account, its identity and an
HMAC over both nonces and everything named, and the accepting side answers with an HMAC of its
own over the same transcript and its identity. A captured answer is worth nothing on the next
connection (another nonce), and a connecting node never sends its data to an impostor (it
checks the accepting side's HMAC first). Both HMACs are compared in constant time.

Every message::

    +---------------------+---------+---------------+------------------------+
    | magic  FF 4D 51 48  | kind u8 | length u16 BE | payload (length bytes) |
    +---------------------+---------+---------------+------------------------+
      "\\xffMQH": a stock HA peer reads it as a negative offset and drops the link

CHALLENGE (kind 1), accepting side -> connecting side, the first bytes on the connection::

    +-------------------+
    | nonce_a  16 bytes |        fresh from the OS's CSPRNG for each connection
    +-------------------+

PROOF (kind 2), connecting side -> accepting side, at most 816 bytes of payload::

    +-------------+----------+----+------------+----+-------+----+--------+
    | nonce_c  16 | mac  32  | u8 | access key | u8 | group | u8 | member |
    +-------------+----------+----+------------+----+-------+----+--------+
                               each text: its UTF-8 length (1..255), then its bytes

    mac = HMAC-SHA256(secret key, "mqctl member proof v1" 00 purpose 00
                                  nonce_a nonce_c text(access key) text(group) text(member))

ACCEPT (kind 3), accepting side -> connecting side, only once the proof checked out::

    +----------+----+-------+----+--------+
    | mac  32  | u8 | group | u8 | member |      the accepting side's identity
    +----------+----+-------+----+--------+

    mac = HMAC-SHA256(secret key, "mqctl member accept v1" 00 purpose 00
                                  nonce_a nonce_c text(access key) text(group) text(member)
                                  text(its group) text(its member))

``purpose`` is ``ha`` (master-slave: group = broker name, member = broker id) or ``raft``
(group = broker name, member = node name such as ``broker-a-1``), so that a proof for one port
is no proof for the other. ``text(x)`` is x's length byte and bytes, as in the messages.

The accepting side refuses (and closes the connection, answering nothing) when the access key
names no account, the account is not ``admin: true``, the mac differs, or the identity is not
one it serves (its own group; a slave's id; one of the raft group's other members). Nothing
here reads a socket or a clock: the trio code around it bounds every read (a header, then at
most :data:`PAYLOAD_BYTES_MAX`) and the time a handshake may take.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from core.remoting.signing import Credentials
from replication.errors import ProtocolError

MAGIC = b"\xffMQH"
CHALLENGE = 1
PROOF = 2
ACCEPT = 3
HEADER_SIZE = 7
NONCE_SIZE = 16
MAC_SIZE = 32
TEXT_BYTES_MAX = 255
PAYLOAD_BYTES_MAX = NONCE_SIZE + MAC_SIZE + 3 * (1 + TEXT_BYTES_MAX)  # the largest PROOF
CHALLENGE_SIZE = HEADER_SIZE + NONCE_SIZE  # all a stranger ever receives
HANDSHAKE_TIMEOUT_S = 5.0  # a peer that has not finished by then is disconnected

_HEADER = struct.Struct(">4sBH")
_PROOF_LABEL = b"mqctl member proof v1\x00"
_ACCEPT_LABEL = b"mqctl member accept v1\x00"
_UNKNOWN_ACCOUNT_KEY = b"\x00" * 32  # a mac is computed even for an unknown account: same timing


class MembershipError(ProtocolError):
    """A handshake that does not prove membership; the connection is closed."""


class Account(Protocol):
    """What the accepting side needs of an ACL account (core.acl.policy.Account has it)."""

    @property
    def secret_key(self) -> str: ...

    @property
    def admin(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a node is within its replication group."""

    group: str
    member: str

    def __str__(self) -> str:
        return f"{self.group}/{self.member}"


@dataclass(frozen=True, slots=True)
class Admitted:
    """A connecting node proved membership: who it is, and the ACCEPT to send it."""

    peer: Identity
    access_key: str
    accept: bytes


def frame(kind: int, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, kind, len(payload)) + payload


def payload_size(header: bytes, kind: int) -> int:
    """The payload length a message header announces; raises unless it is ``kind``'s header
    with a length that kind can have."""
    if len(header) != HEADER_SIZE:
        raise MembershipError(f"a handshake header is {HEADER_SIZE} bytes, not {len(header)}")
    magic, got, size = _HEADER.unpack(header)
    if magic != MAGIC:
        raise MembershipError("not a membership handshake (this port needs one with [acl] enabled)")
    if got != kind:
        raise MembershipError(f"handshake message {got} where {kind} belongs")
    low, high = {CHALLENGE: (NONCE_SIZE, NONCE_SIZE), PROOF: (NONCE_SIZE + MAC_SIZE + 3, PAYLOAD_BYTES_MAX),
                 ACCEPT: (MAC_SIZE + 2, MAC_SIZE + 2 * (1 + TEXT_BYTES_MAX))}[kind]
    if not low <= size <= high:
        raise MembershipError(f"handshake message {kind} of {size} bytes (allowed {low}..{high})")
    return size


def split_frame(data: bytes, kind: int) -> bytes:
    """The payload of one whole message (header included in ``data``, nothing after it)."""
    size = payload_size(data[:HEADER_SIZE], kind)
    if len(data) != HEADER_SIZE + size:
        raise MembershipError(f"handshake message {kind}: {len(data) - HEADER_SIZE} bytes, header says {size}")
    return data[HEADER_SIZE:]


def _text(value: str) -> bytes:
    raw = value.encode()
    if not 1 <= len(raw) <= TEXT_BYTES_MAX:
        raise MembershipError(f"a handshake text is 1..{TEXT_BYTES_MAX} bytes, not {len(raw)}")
    return bytes([len(raw)]) + raw


def _texts(data: bytes, pos: int, count: int) -> list[str]:
    out = []
    for _ in range(count):
        if pos >= len(data):
            raise MembershipError("handshake message ends inside its texts")
        size = data[pos]
        raw = data[pos + 1 : pos + 1 + size]
        if size == 0 or len(raw) != size:
            raise MembershipError("handshake message with an empty or cut text")
        try:
            out.append(raw.decode())
        except UnicodeDecodeError:
            raise MembershipError("handshake text is not UTF-8") from None
        pos += 1 + size
    if pos != len(data):
        raise MembershipError(f"{len(data) - pos} bytes after the handshake message's texts")
    return out


def _proof_mac(secret: bytes, purpose: bytes, nonce_a: bytes, nonce_c: bytes, access_key: str,
               peer: Identity) -> bytes:
    content = (_PROOF_LABEL + purpose + b"\x00" + nonce_a + nonce_c + _text(access_key) + _text(peer.group)
               + _text(peer.member))
    return hmac.new(secret, content, hashlib.sha256).digest()


def _accept_mac(secret: bytes, purpose: bytes, nonce_a: bytes, nonce_c: bytes, access_key: str,
                peer: Identity, me: Identity) -> bytes:
    content = (_ACCEPT_LABEL + purpose + b"\x00" + nonce_a + nonce_c + _text(access_key) + _text(peer.group)
               + _text(peer.member) + _text(me.group) + _text(me.member))
    return hmac.new(secret, content, hashlib.sha256).digest()


@dataclass(slots=True)
class Acceptor:
    """The accepting side of one connection's handshake (the master, the raft receiver).

    ``accounts``: the ACL policy's accounts by access key, as they are now. ``admits``: why a
    proven node may not connect here (None: it may). ``nonce``: fresh random bytes."""

    purpose: bytes
    me: Identity
    accounts: Mapping[str, Account] = field(repr=False)
    admits: Callable[[Identity], str | None] = field(repr=False)
    nonce: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.nonce) != NONCE_SIZE:
            raise ValueError(f"a nonce is {NONCE_SIZE} bytes")

    def challenge(self) -> bytes:
        """The first message on the connection."""
        return frame(CHALLENGE, self.nonce)

    def admit(self, payload: bytes) -> Admitted:
        """Check a PROOF's payload; raises :class:`MembershipError` saying why not."""
        if len(payload) < NONCE_SIZE + MAC_SIZE + 3:
            raise MembershipError("handshake proof too short")
        nonce_c, given = payload[:NONCE_SIZE], payload[NONCE_SIZE : NONCE_SIZE + MAC_SIZE]
        access_key, group, member = _texts(payload, NONCE_SIZE + MAC_SIZE, 3)
        peer = Identity(group, member)
        account = self.accounts.get(access_key)
        secret = account.secret_key.encode() if account is not None else _UNKNOWN_ACCOUNT_KEY
        matches = hmac.compare_digest(given, _proof_mac(secret, self.purpose, self.nonce, nonce_c, access_key, peer))
        if account is None:
            raise MembershipError(f"access key {access_key!r} names no account of the ACL file")
        if not matches:
            raise MembershipError(f"the proof of {access_key!r} for {peer} does not match (a wrong secret key, "
                                  "or an answer to another challenge)")
        if not account.admin:
            raise MembershipError(f"account {access_key!r} is not an admin account (nodes sign with one)")
        refused = self.admits(peer)
        if refused is not None:
            raise MembershipError(f"{peer}: {refused}")
        mac = _accept_mac(secret, self.purpose, self.nonce, nonce_c, access_key, peer, self.me)
        return Admitted(peer, access_key, frame(ACCEPT, mac + _text(self.me.group) + _text(self.me.member)))


@dataclass(slots=True)
class Connector:
    """The connecting side of one connection's handshake (the slave, the raft sender): proves
    itself, then checks that the other side is ``expect`` and holds the same secret."""

    purpose: bytes
    credentials: Credentials
    me: Identity
    expect: Identity
    nonce: bytes = field(repr=False)
    _nonce_a: bytes | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.nonce) != NONCE_SIZE:
            raise ValueError(f"a nonce is {NONCE_SIZE} bytes")

    def prove(self, challenge: bytes) -> bytes:
        """The PROOF answering a CHALLENGE's payload."""
        if len(challenge) != NONCE_SIZE:
            raise MembershipError(f"a challenge is {NONCE_SIZE} bytes, not {len(challenge)}")
        self._nonce_a = challenge
        creds = self.credentials
        mac = _proof_mac(creds.secret_key.encode(), self.purpose, challenge, self.nonce, creds.access_key, self.me)
        return frame(PROOF, self.nonce + mac + _text(creds.access_key) + _text(self.me.group) + _text(self.me.member))

    def check_accept(self, payload: bytes) -> Identity:
        """Check an ACCEPT's payload: the other side's identity, or :class:`MembershipError`."""
        if self._nonce_a is None:
            raise MembershipError("an accept before any challenge")
        if len(payload) < MAC_SIZE + 2:
            raise MembershipError("handshake accept too short")
        group, member = _texts(payload, MAC_SIZE, 2)
        other = Identity(group, member)
        creds = self.credentials
        expected = _accept_mac(creds.secret_key.encode(), self.purpose, self._nonce_a, self.nonce, creds.access_key,
                               self.me, other)
        if not hmac.compare_digest(payload[:MAC_SIZE], expected):
            raise MembershipError(f"the other side ({other}) does not hold this cluster's keys")
        if other != self.expect:
            raise MembershipError(f"reached {other}, not {self.expect}")
        return other
