"""A name server restarted mid-way knows every topic after the broker's next registration,
though registrations after a create carry only the created topic (an increment)."""

from __future__ import annotations

import dataclasses

import trio

from core.config import BrokerSettings, Config
from core.node_specs import NameServerNode
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.servers.namesrv import serve_nameserver
from plugins import plugin_host
from tests.core.cluster_harness import SMALL_STORE, InProcessCluster


def _create(topic: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
        "topic": topic, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})


async def _routed(client, namesrv: str, topic: str) -> bool:  # type: ignore[no-untyped-def]
    resp = await client.invoke(namesrv, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                        ext_fields={"topic": topic}), 5)
    return resp.code == ResponseCode.SUCCESS


async def test_a_restarted_name_server_gets_every_topic_with_the_next_registration(nursery, tmp_path) -> None:
    # the period is an hour: only the registrations a create starts can teach the new name server
    base = Config(store=SMALL_STORE, broker=BrokerSettings(register_interval_ms=3_600_000))
    node = NameServerNode("ns0", "127.0.0.1:0")

    async def name_server(port: int, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
        served = dataclasses.replace(node, listen=f"127.0.0.1:{port}")
        await serve_nameserver(served, dataclasses.replace(base, nameservers=(served,)), plugin_host(load_entry_points=False),
                               data_dir=tmp_path, task_status=task_status)

    first, first_gone = trio.CancelScope(), trio.Event()

    async def first_run(task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
        try:
            with first:
                await name_server(0, task_status=task_status)
        finally:
            first_gone.set()

    port = await nursery.start(first_run)
    namesrv = f"127.0.0.1:{port}"
    config = dataclasses.replace(base, nameservers=(NameServerNode("ns0", namesrv),))
    cluster = InProcessCluster(nursery, tmp_path, [namesrv], config, {})
    broker = await cluster.start_broker()
    async with open_remoting_client() as client:
        for i in range(20):
            assert (await client.invoke(broker.address, _create(f"Early{i}"), 5)).code == ResponseCode.SUCCESS
        with trio.fail_after(10):
            while not await _routed(client, namesrv, "Early19"):
                await trio.sleep(0.05)
        first.cancel()  # the name server goes, and comes back empty on the same port
        await first_gone.wait()
        await nursery.start(name_server, port)
        assert not await _routed(client, namesrv, "Early0")
        assert (await client.invoke(broker.address, _create("Late"), 5)).code == ResponseCode.SUCCESS
        with trio.fail_after(10):  # the increment for Late is answered wantFull: every topic follows
            while not (await _routed(client, namesrv, "Late") and await _routed(client, namesrv, "Early0")):
                await trio.sleep(0.05)
        for i in range(20):
            assert await _routed(client, namesrv, f"Early{i}")
