"""The HA port with ACL on, on real processes started by `mqctl start`: a sync master and its
slave prove their membership to each other and replicate as before; a raw TCP peer that
reports an offset, forges a proof or replays a captured one gets the challenge and nothing of
the log, and is disconnected."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator

import orjson
import pytest
import trio

from core.config import load_config
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials
from replication.master_slave.protocol import encode_report
from replication.membership import (
    CHALLENGE,
    NONCE_SIZE,
    Connector,
    Identity,
    split_frame,
)
from tests.conftest import Cluster, child_env, running_cluster
from tests.replication.stranger import captured_proof, is_challenge, talk

ACL_FILE = """\
accounts:
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"""
ACL = 'enabled = true\nfile = "plain_acl.yml"\naccess_key = "admin-key"\nsecret_key = "admin-secret"'
ADMIN = Credentials("admin-key", "admin-secret")
DEADLINE_S = 60.0


async def _runtime(address: str) -> dict[str, str]:
    async with open_remoting_client(credentials=ADMIN) as client:
        answer = await client.invoke(address, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO), 3.0)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return orjson.loads(answer.body)["table"]


def runtime(address: str) -> dict[str, str]:
    """A broker's runtime table, asked with the admin account's signature."""
    return trio.run(_runtime, address)


def broker_addresses(cluster: Cluster) -> dict[str, str]:
    return {b.node: b.listen for b in load_config(cluster.config).brokers}


def wait_for(what: str, condition, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {deadline_s} s: {what}")


@pytest.fixture(scope="module")
def sync_pair(tmp_path_factory) -> Iterator[Cluster]:
    """ACL on; broker-a's master (id 0) and slave (id 1) in sync mode."""
    where = tmp_path_factory.mktemp("ha-acl")
    (where / "plain_acl.yml").write_text(ACL_FILE)
    with running_cluster(where, child_env(), acl=ACL, broker_ids=(0, 1), mode="sync") as cluster:
        yield cluster


def test_a_sync_master_and_its_slave_prove_themselves_and_replicate(sync_pair: Cluster):
    nodes = broker_addresses(sync_pair)
    master, slave = nodes["broker-a-0"], nodes["broker-a-1"]
    wait_for("the slave connected", lambda: [s.get("brokerId") for s in json.loads(runtime(master)["haSlaves"])] == ["1"])
    sent = sync_pair.mqctl("send", "Orders", "replicated", "--count", "30", "--json")
    assert {json.loads(line)["status"] for line in sent.stdout.splitlines()} == {"SEND_OK"}, sent.stdout + sent.stderr
    end = wait_for("the slave caught up", lambda: (
        (m := runtime(master)["commitLogMaxOffset"]) == runtime(slave)["commitLogMaxOffset"] and int(m)))
    assert end > 30 * 10


def test_strangers_on_the_ha_port_get_no_stored_byte(sync_pair: Cluster):
    nodes = broker_addresses(sync_pair)
    master, slave = nodes["broker-a-0"], nodes["broker-a-1"]
    assert sync_pair.mqctl("send", "Orders", "secret", "--count", "5").returncode == 0
    ha = wait_for("the slave connected", lambda: runtime(slave).get("haConnected") == "true"
                  and runtime(slave)["haMasterHaAddr"])
    assert int(runtime(master)["commitLogMaxOffset"]) > 0  # something to steal
    rejected = int(runtime(master)["haRejectedPeers"])

    def forged(challenge: bytes) -> bytes:
        c = Connector(b"ha", Credentials("admin-key", "a-guessed-secret"), Identity("broker-a", "1"),
                      Identity("broker-a", "0"), secrets.token_bytes(NONCE_SIZE))
        return c.prove(split_frame(challenge, CHALLENGE))

    async def strangers() -> list[tuple[str, bytes, bytes]]:
        slave = Connector(b"ha", ADMIN, Identity("broker-a", "1"), Identity("broker-a", "0"),
                          secrets.token_bytes(NONCE_SIZE))
        captured = await captured_proof(ha, slave, Identity("broker-a", "0"))
        tries = {"offset 0": lambda challenge: encode_report(0), "forged": forged,
                 "replayed": lambda challenge: captured}
        return [(name, *await talk(ha, lambda stream, first, answer=answer: stream.send_all(answer(first))))
                for name, answer in tries.items()]

    for name, first, after in trio.run(strangers):
        assert is_challenge(first) and after == b"", (name, first, after)
    assert int(runtime(master)["haRejectedPeers"]) == rejected + 3
    # the members carry on
    sent = json.loads(sync_pair.mqctl("send", "Orders", "after", "--json").stdout)
    assert sent["status"] == "SEND_OK"
