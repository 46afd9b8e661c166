"""The membership handshake of the HA and raft ports (ACL on): the sans-IO codec and checks,
then a master-slave pair and a raft group in one process on loopback sockets, tried by
strangers, forgers, replayers and an impostor master."""

from __future__ import annotations

import contextlib
import functools
import random
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from core.broker.replication import Replicated
from core.config import AclConfig, Config, StoreConfig
from core.node_specs import BrokerNode
from core.remoting.client import open_remoting_client
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials
from core.store.message_store import open_message_store
from replication.dledger.driver import RaftDriver
from replication.dledger.messages import Code, PushEntry, PushKind, TakeLeadership, VoteRequest
from replication.dledger.raft_log import Entry
from replication.dledger.raft_node import Role
from replication.dledger.wire import MEMBER_HELLO, MEMBER_PROOF, encode_message
from replication.master_slave import ha_service
from replication.master_slave.protocol import encode_report, encode_transfer_header
from replication.master_slave.strategy import MasterSlaveReplication
from replication.member_keys import Membership
from replication.membership import (
    ACCEPT,
    CHALLENGE,
    CHALLENGE_SIZE,
    HEADER_SIZE,
    MAGIC,
    NONCE_SIZE,
    PAYLOAD_BYTES_MAX,
    PROOF,
    Acceptor,
    Connector,
    Identity,
    MembershipError,
    frame,
    payload_size,
    split_frame,
)
from tests.conftest import free_port
from tests.replication.stranger import captured_proof, is_challenge, talk
from tests.replication.test_dledger_driver import SEGMENT, body
from tests.replication.test_master_slave import FAST, msg, wait_caught_up

ACL_FILE = """\
accounts:
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
  - accessKey: reader-key
    secretKey: reader-secret
    defaultTopicPerm: SUB
"""
ADMIN = Credentials("admin-key", "admin-secret")
READER = Credentials("reader-key", "reader-secret")
MASTER = Identity("g", "0")
SLAVE = Identity("g", "1")


@dataclass(frozen=True)
class Account:
    secret_key: str
    admin: bool = True


ACCOUNTS = {"admin-key": Account("admin-secret"), "reader-key": Account("reader-secret", admin=False)}


def nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


def acceptor(admits=lambda peer: None, accounts=ACCOUNTS) -> Acceptor:
    return Acceptor(b"ha", MASTER, accounts, admits, nonce())


def connector(credentials: Credentials = ADMIN, me: Identity = SLAVE, expect: Identity = MASTER,
              purpose: bytes = b"ha") -> Connector:
    return Connector(purpose, credentials, me, expect, nonce())


def proof_for(a: Acceptor, c: Connector) -> bytes:
    return split_frame(c.prove(split_frame(a.challenge(), CHALLENGE)), PROOF)


# ---------------------------------------------------------------------- sans-IO


def test_a_member_and_its_master_prove_themselves_to_each_other():
    a, c = acceptor(), connector()
    challenge = a.challenge()
    assert len(challenge) == CHALLENGE_SIZE and challenge.startswith(MAGIC + bytes([CHALLENGE]))
    admitted = a.admit(split_frame(c.prove(split_frame(challenge, CHALLENGE)), PROOF))
    assert admitted.peer == SLAVE and admitted.access_key == "admin-key"
    assert c.check_accept(split_frame(admitted.accept, ACCEPT)) == MASTER


@pytest.mark.parametrize(("credentials", "why"), [
    (Credentials("admin-key", "a-guessed-secret"), "does not match"),
    (Credentials("nobody-key", "admin-secret"), "names no account"),
    (READER, "not an admin account"),
])
def test_a_wrong_key_an_unknown_account_and_a_non_admin_are_refused(credentials, why):
    a = acceptor()
    with pytest.raises(MembershipError, match=why):
        a.admit(proof_for(a, connector(credentials)))


def test_a_captured_proof_does_not_answer_another_challenge():
    first, c = acceptor(), connector()
    captured = proof_for(first, c)
    first.admit(captured)  # valid for the challenge it answered
    with pytest.raises(MembershipError, match="does not match"):
        acceptor().admit(captured)


def test_a_proof_for_the_ha_port_is_no_proof_for_the_raft_port():
    a = Acceptor(b"raft", MASTER, ACCOUNTS, lambda peer: None, nonce())
    with pytest.raises(MembershipError, match="does not match"):
        a.admit(proof_for(a, connector(purpose=b"ha")))


def test_the_accepting_side_refuses_identities_it_does_not_serve():
    a = acceptor(admits=lambda peer: None if peer.group == "g" else "another group")
    with pytest.raises(MembershipError, match="another group"):
        a.admit(proof_for(a, connector(me=Identity("h", "1"))))


def test_an_impostor_or_the_wrong_member_is_refused_by_the_connecting_side():
    impostor = acceptor(accounts={"admin-key": Account("not-the-secret")})
    c = connector()
    proof = proof_for(impostor, c)
    with pytest.raises(MembershipError, match="does not match"):
        impostor.admit(proof)  # it cannot check the proof either
    forged = frame(ACCEPT, b"\0" * 32 + bytes([1]) + b"g" + bytes([1]) + b"0")
    with pytest.raises(MembershipError, match="does not hold this cluster's keys"):
        c.check_accept(split_frame(forged, ACCEPT))

    other = Acceptor(b"ha", Identity("g", "7"), ACCOUNTS, lambda peer: None, nonce())
    c = connector()
    admitted = other.admit(proof_for(other, c))
    with pytest.raises(MembershipError, match="reached g/7, not g/0"):
        c.check_accept(split_frame(admitted.accept, ACCEPT))


@pytest.mark.parametrize(("header", "kind", "why"), [
    (b"\0" * HEADER_SIZE, PROOF, "not a membership handshake"),
    (MAGIC + bytes([ACCEPT]) + b"\0\x30", PROOF, "message 3 where 2 belongs"),
    (MAGIC + bytes([PROOF]) + (PAYLOAD_BYTES_MAX + 1).to_bytes(2, "big"), PROOF, "allowed"),
    (MAGIC + bytes([CHALLENGE]) + b"\0\x11", CHALLENGE, "allowed 16..16"),
])
def test_headers_are_checked_before_any_payload_is_read(header, kind, why):
    with pytest.raises(MembershipError, match=why):
        payload_size(header, kind)


@pytest.mark.parametrize("payload", [
    b"\0" * 40,  # too short
    b"\0" * 48 + b"\x05abc",  # a text cut short
    b"\0" * 48 + b"\x01a\x01g\x00",  # an empty text
    b"\0" * 48 + b"\x01a\x01g\x011" + b"more",  # bytes after the texts
    b"\0" * 48 + b"\x01\xff\x01g\x011",  # not UTF-8
])
def test_malformed_proofs_are_refused(payload):
    with pytest.raises(MembershipError):
        acceptor().admit(payload)


def test_no_secret_in_a_repr(tmp_path):
    (tmp_path / "acl.yml").write_text(ACL_FILE)
    config = Config(acl=AclConfig(enabled=True, file=str(tmp_path / "acl.yml"), access_key="admin-key",
                                  secret_key="admin-secret"))
    membership = Membership.from_config(config)
    assert membership is not None
    shown = " ".join(map(repr, (membership, connector(), acceptor(),
                                membership.connector(b"ha", SLAVE, MASTER), membership.acceptor(b"ha", MASTER, str))))
    assert "admin-secret" not in shown and "reader-secret" not in shown
    assert Membership.from_config(Config()) is None  # ACL off: no handshake


# ---------------------------------------------------------------------- master-slave


def acl_config(tmp_path: Path, store: StoreConfig, credentials: Credentials = ADMIN) -> Config:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_FILE)
    return Config(store=store, replication=FAST, acl=AclConfig(
        enabled=True, file=str(path), access_key=credentials.access_key, secret_key=credentials.secret_key))


@contextlib.asynccontextmanager
async def acl_pair(tmp_path: Path, store_config: StoreConfig, *, slave_credentials: Credentials = ADMIN,
                   sync: bool = False) -> AsyncIterator[tuple[MasterSlaveReplication, MasterSlaveReplication, str]]:
    """A master and a slave with ACL on (the slave signing with ``slave_credentials``), and
    the master's HA address."""
    async with open_message_store(tmp_path / "master", store_config) as mstore, \
            open_message_store(tmp_path / "slave", store_config) as sstore, trio.open_nursery() as nursery:
        master = MasterSlaveReplication(BrokerNode("g", 0), acl_config(tmp_path, store_config), mstore, sync=sync)
        slave = MasterSlaveReplication(BrokerNode("g", 1), acl_config(tmp_path, store_config, slave_credentials),
                                       sstore, sync=sync)
        ha = await nursery.start(master.serve, "127.0.0.1:0")
        await nursery.start(slave.serve, "127.0.0.1:0")
        slave.master_learned("127.0.0.1:1", ha)
        yield master, slave, ha
        nursery.cancel_scope.cancel()


async def test_with_acl_on_members_replicate_and_strangers_get_nothing_but_the_challenge(tmp_path, small_store_config,
                                                                                         monkeypatch):
    monkeypatch.setattr(ha_service, "HANDSHAKE_TIMEOUT_S", 0.5)
    async with acl_pair(tmp_path, small_store_config, sync=True) as (master, slave, ha):
        for i in range(100):
            master.store.put(msg(i))
        await wait_caught_up(master.store, slave.store)
        assert [s["brokerId"] for s in master.service.status()] == ["1"]
        assert master.store.log_end > 0

        async def offset_zero(stream, challenge):
            await stream.send_all(encode_report(0))

        async def forged(stream, challenge):
            c = connector(Credentials("admin-key", "a-guessed-secret"), me=Identity("g", "2"))
            await stream.send_all(c.prove(split_frame(challenge, CHALLENGE)))

        captured = await captured_proof(ha, connector(me=Identity("g", "2")), MASTER)

        async def replayed(stream, challenge):
            await stream.send_all(captured)

        async def silent(stream, challenge):
            pass

        async def oversized(stream, challenge):
            await stream.send_all(MAGIC + bytes([PROOF]) + b"\xff\xff" + b"x" * 4096)

        rejected = master.service.rejected
        for script in (offset_zero, forged, replayed, silent, oversized):
            first, after = await talk(ha, script, closed_within_s=10)
            assert is_challenge(first) and after == b"", (script.__name__, first, after)
        assert master.service.rejected == rejected + 5
        assert [s["brokerId"] for s in master.service.status()] == ["1"]  # the slave kept its link
        master.store.put(msg(100))
        assert await master.wait_replicated(0, master.store.log_end) == Replicated.OK


async def test_a_slave_with_the_wrong_keys_gets_nothing(tmp_path, small_store_config):
    async with acl_pair(tmp_path, small_store_config, slave_credentials=READER) as (master, slave, _ha):
        for i in range(20):
            master.store.put(msg(i))
        with trio.fail_after(10):
            while master.service.rejected < 2:  # refused, and refused again when it retried
                await trio.sleep(0.01)
        assert slave.store.log_end == 0 and not slave.client.connected and master.service.status() == []


async def test_a_slave_feeds_on_no_impostor_master(tmp_path, small_store_config):
    """Something listening where the master should be, without the keys: it gets the slave's
    proof (useless to it: made for its own challenge), never the slave's offset report, and
    what it sends after its forged accept is not appended."""
    received = bytearray()
    closed = trio.Event()

    async def impostor(stream: trio.SocketStream) -> None:
        await stream.send_all(frame(CHALLENGE, nonce()))
        with trio.fail_after(5):
            try:
                await stream.send_all(frame(ACCEPT, b"\0" * 32 + b"\x01g\x010")
                                      + encode_transfer_header(0, 5) + b"bogus")
                while chunk := await stream.receive_some(4096):
                    received.extend(chunk)
            except trio.BrokenResourceError:
                pass
        closed.set()

    async with open_message_store(tmp_path / "slave", small_store_config) as sstore, trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, impostor, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        slave = MasterSlaveReplication(BrokerNode("g", 1), acl_config(tmp_path, small_store_config), sstore, sync=False)
        await nursery.start(slave.serve, "127.0.0.1:0")
        slave.master_learned("127.0.0.1:1", f"127.0.0.1:{port}")
        with trio.fail_after(10):
            await closed.wait()
        nursery.cancel_scope.cancel()
    assert len(received) == HEADER_SIZE + payload_size(bytes(received[:HEADER_SIZE]), PROOF)  # the proof, no report
    assert sstore.log_end == 0


# ---------------------------------------------------------------------- raft


class RaftGroup:
    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "plain_acl.yml").write_text(ACL_FILE)
        self.config = Config(acl=AclConfig(enabled=True, file=str(tmp_path / "plain_acl.yml"),
                                           access_key="admin-key", secret_key="admin-secret"))
        self.tmp = tmp_path
        self.addrs = {f"n{i}": f"127.0.0.1:{free_port()}" for i in range(3)}
        self.drivers: dict[str, RaftDriver] = {}

    async def start(self, nursery: trio.Nursery) -> None:
        for node in self.addrs:
            driver = RaftDriver("g", node, self.addrs, self.tmp / node, SEGMENT, rng=random.Random(node),
                                membership=Membership.from_config(self.config))
            await nursery.start(driver.run, self.addrs[node])
            self.drivers[node] = driver

    async def leader(self) -> RaftDriver:
        with trio.fail_after(10):
            while True:
                leaders = [d for d in self.drivers.values() if d.role is Role.LEADER]
                if len(leaders) == 1 and all(d.leader == leaders[0].id for d in self.drivers.values()):
                    return leaders[0]
                await trio.sleep(0.01)


async def wait_closed(conn) -> None:
    with trio.fail_after(5):
        await conn.closed.wait()


async def test_raft_members_prove_themselves_and_strangers_reach_nothing(tmp_path, monkeypatch):
    from replication.dledger import transport
    monkeypatch.setattr(transport, "HANDSHAKE_TIMEOUT_S", 0.5)
    group = RaftGroup(tmp_path)
    async with trio.open_nursery() as nursery:
        await group.start(nursery)
        leader = await group.leader()
        results = await leader.append([body(i) for i in range(20)])
        assert not isinstance(results, Code) and {r.code for r in results} == {Code.SUCCESS}
        with trio.fail_after(5):
            for d in group.drivers.values():
                await d.wait_committed(results[-1].index)

        follower = next(d for d in group.drivers.values() if d is not leader)
        target = group.addrs[follower.id]
        term, rejected = follower.term, follower.transport.stats.rejected
        forged_term = term + 100
        frames = [
            VoteRequest(forged_term, leader.id, 10**6, forged_term),
            PushEntry(forged_term, leader.id, PushKind.APPEND, results[-1].index + 1,
                      (Entry(results[-1].index + 1, forged_term, body(99)),), 10**6),
            TakeLeadership(forged_term, leader.id),
        ]
        async with open_remoting_client() as client:
            # raft frames on a connection that has not proven membership
            conn = await client.connection(target)
            for message in frames:
                await conn.oneway(encode_message(message, "g"))
            await wait_closed(conn)
            client.drop(target)

            # a proof made with a wrong secret
            conn = await client.connection(target)
            hello = await conn.request(RemotingCommand(code=MEMBER_HELLO), 5)
            assert hello.code == ResponseCode.SUCCESS and is_challenge(hello.body)
            c = Connector(b"raft", Credentials("admin-key", "a-guessed-secret"), Identity("g", leader.id),
                          Identity("g", follower.id), nonce())
            with pytest.raises(Exception, match="closed"):
                await conn.request(RemotingCommand(code=MEMBER_PROOF,
                                                   body=c.prove(split_frame(hello.body, CHALLENGE))), 5)
            client.drop(target)

            # the right keys, but not a member of the group
            conn = await client.connection(target)
            hello = await conn.request(RemotingCommand(code=MEMBER_HELLO), 5)
            c = Connector(b"raft", ADMIN, Identity("g", "n9"), Identity("g", follower.id), nonce())
            with pytest.raises(Exception, match="closed"):
                await conn.request(RemotingCommand(code=MEMBER_PROOF,
                                                   body=c.prove(split_frame(hello.body, CHALLENGE))), 5)
            client.drop(target)

            # silent: closed at the deadline
            conn = await client.connection(target)
            await wait_closed(conn)
            client.drop(target)

        assert follower.transport.stats.rejected >= rejected + len(frames) + 3
        assert all(d.term == term for d in group.drivers.values())
        assert (await group.leader()) is leader
        assert follower.log.last_index == results[-1].index  # the forged push appended nothing
        more = await leader.append([body(100)])
        assert not isinstance(more, Code) and more[0].code == Code.SUCCESS
        nursery.cancel_scope.cancel()
