"""What raft peers say to each other, as plain values (the wire codec is separate).

Requests and responses follow DLedger's RPCs: VOTE, HEART_BEAT, PUSH (COMPARE, TRUNCATE,
APPEND, COMMIT, and INSTALL of our own) and the leadership-transfer hand-over
(TAKE_LEADERSHIP). Every message carries the sender's term; indexes are raft log indexes, dense from 0, -1 meaning "none".
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from replication.dledger.raft_log import Entry


class Code(enum.IntEnum):
    """DLedgerResponseCode values this engine answers with (same numbers as DLedger's)."""

    SUCCESS = 200
    TIMEOUT = 300
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    DISK_FULL = 415
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    LEADER_TRANSFERRING = 506


class VoteResult(enum.Enum):
    """A voter's answer (DLedger's VoteResponse.RESULT)."""

    ACCEPT = "ACCEPT"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"  # the candidate's term is behind ours
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"  # this term's vote went to another candidate
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"  # a live leader was heard lately
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"  # the candidate's last entry term is older
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"  # same last term, shorter log


class PushKind(enum.Enum):
    """A push's purpose (DLedger's PushEntryRequest.Type)."""

    COMPARE = "COMPARE"  # do you hold ``entries[0]`` (same index and term)?
    TRUNCATE = "TRUNCATE"  # drop everything after ``index``
    APPEND = "APPEND"  # append ``entries`` (consecutive, starting at ``index``)
    COMMIT = "COMMIT"  # only the commit index
    # the leader no longer holds what the follower's log would continue from: drop your log and
    # continue from ``index`` (the leader's first retained entry), ``entries`` its first run
    INSTALL = "INSTALL"


@dataclass(frozen=True, slots=True)
class VoteRequest:
    term: int
    candidate: str
    last_index: int
    last_term: int
    transfer: bool = False  # a leadership hand-over: voters skip the live-leader check
    pre_vote: bool = False  # "would you vote for me in ``term``?": changes nobody's state


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    voter: str
    result: VoteResult
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class HeartBeat:
    term: int
    leader: str
    commit_index: int


@dataclass(frozen=True, slots=True)
class HeartBeatResponse:
    term: int
    peer: str
    code: Code


@dataclass(frozen=True, slots=True)
class PushEntry:
    term: int
    leader: str
    kind: PushKind
    index: int  # COMPARE/APPEND: the first entry's index; TRUNCATE: the last index kept
    entries: Sequence[Entry]  # a tuple, a list or PackedEntries
    commit_index: int
    seq: int = 0  # echoed in the answer: a COMPARE, TRUNCATE or INSTALL answer counts only for its own request
    prev_term: int = -1  # INSTALL: the term of entry ``index - 1``
    install_end: int = -1  # INSTALL: the leader's commit index (the member stands for election once it holds it)


@dataclass(frozen=True, slots=True)
class PushResponse:
    term: int
    peer: str
    kind: PushKind
    code: Code
    index: int  # the request's index
    end_index: int  # the follower's last index (after handling the request)
    count: int = 0  # entries of an APPEND this answers
    seq: int = 0  # the request's


@dataclass(frozen=True, slots=True)
class TakeLeadership:
    """The leader hands over: the receiver starts an election at once (term + 1)."""

    term: int
    leader: str


Message = VoteRequest | VoteResponse | HeartBeat | HeartBeatResponse | PushEntry | PushResponse | TakeLeadership
