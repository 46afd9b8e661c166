"""A slave copies its master's topic table: the whole table when it changed, and only an
``unchanged`` answer when the slave names the version it holds (20,000 topics are 3 MB to encode
and parse every 10 s otherwise)."""

from __future__ import annotations

import orjson
import trio

from core.broker.tables.topics import version_tag
from core.config import BrokerSettings
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.request_headers import KNOWN_DATA_VERSION, UNCHANGED
from mqctl.admin.topic import create_topic_request
from tests.core.cluster_harness import start_cluster


async def _table(client, address: str, **fields: str) -> RemotingCommand:
    return await client.invoke(address, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG, ext_fields=fields), 5)


async def _slave_has(client, slave: str, topic: str) -> dict:
    with trio.fail_after(10):
        while True:
            table = orjson.loads((await _table(client, slave)).body)
            if topic in table["topicConfigTable"]:
                return table
            await trio.sleep(0.05)


async def test_a_slave_gets_the_table_when_it_changed_and_unchanged_otherwise(nursery, tmp_path):
    cluster = await start_cluster(nursery, tmp_path, broker=BrokerSettings(register_interval_ms=200,
                                                                           slave_sync_interval_ms=100))
    master = await cluster.start_broker("broker-a", 0)
    slave = await cluster.start_broker("broker-a", 1)
    async with open_remoting_client() as client:
        assert (await client.invoke(master.address, create_topic_request("First", 4), 5)).code == ResponseCode.SUCCESS
        held = await _slave_has(client, slave.address, "First")
        tag = version_tag(held["dataVersion"])
        same = await _table(client, master.address, **{KNOWN_DATA_VERSION: tag})
        assert same.code == ResponseCode.SUCCESS and same.ext_fields.get(UNCHANGED) == "true" and same.body == b""
        whole = await _table(client, master.address, **{KNOWN_DATA_VERSION: "0@0"})  # an older table: all of it
        assert "First" in orjson.loads(whole.body)["topicConfigTable"] and UNCHANGED not in whole.ext_fields
        plain = await _table(client, master.address)  # a stock caller names no version
        assert orjson.loads(plain.body) == orjson.loads(whole.body)
        assert (await client.invoke(master.address, create_topic_request("Second", 2), 5)).code == ResponseCode.SUCCESS
        held = await _slave_has(client, slave.address, "Second")  # a change still reaches the slave
        assert held["topicConfigTable"]["Second"]["writeQueueNums"] == 2 and version_tag(held["dataVersion"]) != tag
