"""Raft messages on the wire: remoting frames (core.remoting) sent one way, one per message.

The request codes are DLedger's for its requests (VOTE 51001, HEART_BEAT 51002, PUSH 51004,
LEADERSHIP_TRANSFER 51005); answers travel as requests of their own (51011, 51012, 51014),
because the raft core is message-driven. Scalar fields go in extFields; a push's entries go in
the body, in the data-file layout of formats.dledger (48-byte header, then the entry's bytes):
a run the leader read from its data files travels as those bytes, its ``pos`` fields telling
where the leader placed each entry (entries from memory carry ``pos`` 0). The receiver's log
decides where an entry lies. Only mqctl nodes speak it.

With ACL on, each new connection first proves membership (:mod:`replication.membership`'s
messages, in frame bodies; requests answered on the same connection, unlike raft messages)::

    sender                                          receiver (the raft port)
      | -- MEMBER_HELLO 51020 (empty) -------------> |
      | <-------------- response: body = CHALLENGE -- |
      | -- MEMBER_PROOF 51021 (body = PROOF) -------> |  checked: else closed, no answer
      | <-------------- response: body = ACCEPT ----- |  checked by the sender: else closed
      | -- raft messages, oneway, as above ---------> |

A receiver with ACL on drops every other frame of a connection that has not proven membership
and closes it; nothing of it reaches the raft core.
"""

from __future__ import annotations

from core.remoting.command import RemotingCommand
from formats import dledger
from replication.dledger.messages import (
    Code,
    HeartBeat,
    HeartBeatResponse,
    Message,
    PushEntry,
    PushKind,
    PushResponse,
    TakeLeadership,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from replication.dledger.raft_log import PackedEntries

VOTE = 51001
HEART_BEAT = 51002
PUSH = 51004
LEADERSHIP_TRANSFER = 51005
VOTE_RESPONSE = 51011
HEART_BEAT_RESPONSE = 51012
PUSH_RESPONSE = 51014
RAFT_CODES = frozenset({VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER, VOTE_RESPONSE, HEART_BEAT_RESPONSE,
                        PUSH_RESPONSE})
MEMBER_HELLO = 51020  # ACL on: a new connection asks for a challenge
MEMBER_PROOF = 51021  # ... and answers it (replication.membership's PROOF in the body)


class WireError(ValueError):
    """A frame that is not a well-formed raft message."""


def encode_message(msg: Message, group: str) -> RemotingCommand:
    """The oneway command carrying ``msg`` for raft group ``group``."""
    f: dict[str, str] = {"group": group, "term": str(msg.term)}
    body = b""
    if isinstance(msg, VoteRequest):
        code = VOTE
        f.update(candidate=msg.candidate, lastIndex=str(msg.last_index), lastTerm=str(msg.last_term),
                 transfer=_flag(msg.transfer), preVote=_flag(msg.pre_vote))
    elif isinstance(msg, VoteResponse):
        code = VOTE_RESPONSE
        f.update(voter=msg.voter, result=msg.result.value, preVote=_flag(msg.pre_vote))
    elif isinstance(msg, HeartBeat):
        code = HEART_BEAT
        f.update(leader=msg.leader, commitIndex=str(msg.commit_index))
    elif isinstance(msg, HeartBeatResponse):
        code = HEART_BEAT_RESPONSE
        f.update(peer=msg.peer, code=str(int(msg.code)))
    elif isinstance(msg, PushEntry):
        code = PUSH
        f.update(leader=msg.leader, kind=msg.kind.value, index=str(msg.index), commitIndex=str(msg.commit_index),
                 seq=str(msg.seq))
        if msg.kind is PushKind.INSTALL:
            f.update(prevTerm=str(msg.prev_term), installEnd=str(msg.install_end))
        if isinstance(msg.entries, PackedEntries):
            body = bytes(msg.entries.raw)
        else:
            body = b"".join(dledger.encode_entry(e.index, e.term, 0, e.body, magic=e.magic) for e in msg.entries)
    elif isinstance(msg, PushResponse):
        code = PUSH_RESPONSE
        f.update(peer=msg.peer, kind=msg.kind.value, code=str(int(msg.code)), index=str(msg.index),
                 endIndex=str(msg.end_index), count=str(msg.count), seq=str(msg.seq))
    elif isinstance(msg, TakeLeadership):
        code = LEADERSHIP_TRANSFER
        f.update(leader=msg.leader)
    else:  # pragma: no cover - the Message union is closed
        raise TypeError(f"not a raft message: {msg!r}")
    return RemotingCommand(code=code, ext_fields=f, body=body)


def decode_message(cmd: RemotingCommand) -> Message:
    """The message a command carries; raises :class:`WireError` naming what is wrong."""
    f = cmd.ext_fields
    try:
        term = int(f["term"])
        if cmd.code == VOTE:
            return VoteRequest(term, f["candidate"], int(f["lastIndex"]), int(f["lastTerm"]),
                               f.get("transfer") == "1", f.get("preVote") == "1")
        if cmd.code == VOTE_RESPONSE:
            return VoteResponse(term, f["voter"], VoteResult(f["result"]), f.get("preVote") == "1")
        if cmd.code == HEART_BEAT:
            return HeartBeat(term, f["leader"], int(f["commitIndex"]))
        if cmd.code == HEART_BEAT_RESPONSE:
            return HeartBeatResponse(term, f["peer"], Code(int(f["code"])))
        if cmd.code == PUSH:
            index, entries = int(f["index"]), _entries(cmd.body)
            if entries and entries.first_index != index:
                raise WireError(f"push at index {index} carries entries from {entries.first_index}")
            kind = PushKind(f["kind"])
            install = kind is PushKind.INSTALL
            if install and index < 1:
                raise WireError(f"an install continues a log after a deleted prefix, not at index {index}")
            return PushEntry(term, f["leader"], kind, index, entries, int(f["commitIndex"]), int(f.get("seq", "0")),
                             int(f["prevTerm"]) if install else -1, int(f["installEnd"]) if install else -1)
        if cmd.code == PUSH_RESPONSE:
            return PushResponse(term, f["peer"], PushKind(f["kind"]), Code(int(f["code"])), int(f["index"]),
                                int(f["endIndex"]), int(f.get("count", "0")), int(f.get("seq", "0")))
        if cmd.code == LEADERSHIP_TRANSFER:
            return TakeLeadership(term, f["leader"])
    except (KeyError, ValueError) as exc:
        raise WireError(f"raft message {cmd.code}: bad or missing field: {exc}") from None
    raise WireError(f"request code {cmd.code} is not a raft message")


def _entries(body: bytes) -> PackedEntries:
    try:
        return PackedEntries.parse(body)
    except ValueError as exc:  # FormatError included
        raise WireError(f"push: {exc}") from None


def _flag(value: bool) -> str:
    return "1" if value else "0"
