"""The raft ports with ACL on, on real processes started by `mqctl start`: the members of a
three-node group prove their membership to each other, elect a leader and commit sends; a raw
TCP peer sending well-formed raft frames (a vote and a push of a far higher term, a leadership
hand-over) is disconnected, and nothing of it reaches the raft core."""

from __future__ import annotations

import json
from collections.abc import Iterator

import orjson
import pytest
import trio

from core.addresses import split_address
from core.config import load_config
from core.remoting.command import encode_frame
from replication.dledger.messages import PushEntry, PushKind, TakeLeadership, VoteRequest
from replication.dledger.raft_log import Entry
from replication.dledger.wire import encode_message
from tests.conftest import Cluster, child_env, running_cluster
from tests.mqctl.test_replication_acl import ACL, ACL_FILE, runtime, wait_for


@pytest.fixture(scope="module")
def raft_group(tmp_path_factory) -> Iterator[Cluster]:
    where = tmp_path_factory.mktemp("raft-acl")
    (where / "plain_acl.yml").write_text(ACL_FILE)
    with running_cluster(where, child_env(), acl=ACL, broker_ids=(0, 1, 2), mode="dledger") as cluster:
        yield cluster


def members(cluster: Cluster) -> dict[str, str]:
    return {b.node: b.listen for b in load_config(cluster.config).brokers}


def settled(cluster: Cluster) -> dict[str, dict[str, str]] | None:
    """Every member's runtime table once they agree on one leader and hold every committed
    entry; else None."""
    tables = {node: runtime(address) for node, address in members(cluster).items()}
    leaders = {t["raftLeader"] for t in tables.values()}
    commits = {(t["raftCommitIndex"], t["raftLastIndex"]) for t in tables.values()}
    if len(leaders) == 1 and "" not in leaders and len({t["raftTerm"] for t in tables.values()}) == 1 \
            and len(commits) == 1:
        return tables
    return None


def test_members_elect_a_leader_and_commit_sends(raft_group: Cluster):
    wait_for("a leader", lambda: settled(raft_group))
    sent = raft_group.mqctl("send", "Orders", "committed", "--count", "20", "--json")
    assert {json.loads(line)["status"] for line in sent.stdout.splitlines()} == {"SEND_OK"}, sent.stdout + sent.stderr
    tables = wait_for("every member holds every entry", lambda: settled(raft_group))
    assert int(next(iter(tables.values()))["raftCommitIndex"]) >= 20


async def send_raw_frames(address: str, frames: list[bytes]) -> bytes:
    """Send ``frames`` on a raw connection and read until the port closes it."""
    stream = await trio.open_tcp_stream(*split_address(address))
    received = bytearray()
    async with stream:
        with trio.fail_after(15):
            try:
                await stream.send_all(b"".join(frames))
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:
                pass
    return bytes(received)


def test_raft_frames_from_a_stranger_reach_nothing(raft_group: Cluster):
    before = wait_for("a leader", lambda: settled(raft_group))
    leader = next(iter(before.values()))["raftLeader"]
    term = int(before[leader]["raftTerm"])
    last = int(before[leader]["raftLastIndex"])
    follower = next(node for node in before if node != leader)
    raft_port = orjson.loads(before[follower]["raftPeers"])[follower]
    forged = term + 100
    frames = [
        VoteRequest(forged, leader, last + 1000, forged),
        PushEntry(forged, leader, PushKind.APPEND, last + 1, (Entry(last + 1, forged, b"forged"),), last + 1),
        TakeLeadership(forged, leader),
    ]
    received = trio.run(send_raw_frames, raft_port, [encode_frame(encode_message(m, "broker-a")) for m in frames])
    assert received == b""  # disconnected, not even an answer

    after = wait_for("the group settled", lambda: settled(raft_group))
    assert {t["raftTerm"] for t in after.values()} == {str(term)}
    assert {t["raftLeader"] for t in after.values()} == {leader}
    assert int(after[follower]["raftRejectedFrames"]) >= 1  # counted (the port closes at the first)
    assert int(after[follower]["raftLastIndex"]) == last  # the forged push appended nothing
