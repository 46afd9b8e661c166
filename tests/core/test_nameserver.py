"""A name server served over real TCP, talked to with our remoting client."""

import zlib

import orjson
import trio

from core.config import Config, NameServerSettings
from core.node_specs import NameServerNode
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.servers.namesrv import serve_nameserver
from plugins import plugin_host


def registration(name="broker-a", addr="127.0.0.1:10911", broker_id=0, topics=None, crc=True):
    body = orjson.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 2},
        "topicConfigTable": topics or {"Orders": {"topicName": "Orders", "readQueueNums": 4, "writeQueueNums": 4,
                                                  "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                                  "order": False}}}})
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "DefaultCluster",
           "haServerAddr": "127.0.0.1:10912", "brokerId": str(broker_id), "compressed": "false",
           "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF) if crc else "12345"}
    return RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=ext, body=body)


async def start_nameserver(nursery, tmp_path, **settings):
    config = Config(namesrv=NameServerSettings(**settings), nameservers=(NameServerNode("ns1", "127.0.0.1:0"),))
    port = await nursery.start(lambda task_status: serve_nameserver(
        config.nameservers[0], config, plugin_host(load_entry_points=False), data_dir=tmp_path,
        task_status=task_status))
    return f"127.0.0.1:{port}"


async def test_register_then_route_and_cluster_info(nursery, tmp_path):
    addr = await start_nameserver(nursery, tmp_path)
    async with open_remoting_client() as client:
        missing = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                            ext_fields={"topic": "Orders"}))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "Orders" in missing.remark
        ok = await client.invoke(addr, registration())
        assert ok.code == ResponseCode.SUCCESS
        route = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                          ext_fields={"topic": "Orders"}))
        assert route.code == ResponseCode.SUCCESS
        assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in route.body
        info = orjson.loads((await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO))).body)
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        topics = orjson.loads((await client.invoke(addr, RemotingCommand(
            code=RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))).body)
        assert topics == {"topicList": ["Orders"]}
        slave = await client.invoke(addr, registration(addr="127.0.0.1:10921", broker_id=1))
        assert slave.ext_fields == {"masterAddr": "127.0.0.1:10911", "haServerAddr": "127.0.0.1:10912"}


async def test_bad_registrations_and_unknown_codes_get_clear_answers(nursery, tmp_path):
    addr = await start_nameserver(nursery, tmp_path)
    async with open_remoting_client() as client:
        bad_crc = await client.invoke(addr, registration(crc=False))
        assert (bad_crc.code, bad_crc.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        lacking = await client.invoke(addr, RemotingCommand(code=RequestCode.REGISTER_BROKER))
        assert lacking.code == ResponseCode.SYSTEM_ERROR and "brokerName" in lacking.remark
        junk = registration()
        junk.body, junk.ext_fields["bodyCrc32"] = b"{oops", "0"
        assert (await client.invoke(addr, junk)).code == ResponseCode.SYSTEM_ERROR
        unknown = await client.invoke(addr, RemotingCommand(code=4242))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in unknown.remark


async def test_broker_connection_closing_removes_it(nursery, tmp_path):
    addr = await start_nameserver(nursery, tmp_path)
    async with open_remoting_client() as broker:
        assert (await broker.invoke(addr, registration())).code == ResponseCode.SUCCESS
    async with open_remoting_client() as client:
        with trio.fail_after(5):
            while True:
                route = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                  ext_fields={"topic": "Orders"}))
                if route.code == ResponseCode.TOPIC_NOT_EXIST:
                    break
                await trio.sleep(0.01)


async def test_kv_config_round_trip_and_persistence(nursery, tmp_path):
    addr = await start_nameserver(nursery, tmp_path)
    async with open_remoting_client() as client:
        put = RemotingCommand(code=RequestCode.PUT_KV_CONFIG, ext_fields={"namespace": "NS", "key": "k", "value": "v"})
        assert (await client.invoke(addr, put)).code == ResponseCode.SUCCESS
        got = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_KV_CONFIG,
                                                        ext_fields={"namespace": "NS", "key": "k"}))
        assert got.ext_fields == {"value": "v"}
        listing = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_KVLIST_BY_NAMESPACE,
                                                            ext_fields={"namespace": "NS"}))
        assert orjson.loads(listing.body) == {"table": {"k": "v"}}
        none = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_KV_CONFIG,
                                                         ext_fields={"namespace": "NS", "key": "zz"}))
        assert none.code == ResponseCode.QUERY_NOT_FOUND
    assert orjson.loads((tmp_path / "ns1" / "kvConfig.json").read_bytes()) == {"configTable": {"NS": {"k": "v"}}}


async def test_route_table_comes_from_the_first_plugin_that_answers(tmp_path, monkeypatch):
    from core.errors import CoreError
    from core.namesrv.route_table import RouteTable
    from core.plugin_manager import BLOCK_ENV
    from core.plugin_markers import hookimpl

    class Shorter(RouteTable):
        pass

    class Custom:
        @hookimpl
        def mq_route_table(self, settings):
            return Shorter(expiry_ms=settings.broker_expiry_ms // 2)

    host = plugin_host(load_entry_points=False)
    host.register(Custom())
    table = host.route_table(NameServerSettings(broker_expiry_ms=1000))
    assert isinstance(table, Shorter) and table.expiry_ms == 500

    monkeypatch.setenv(BLOCK_ENV, "plugins.routing")
    blocked = plugin_host(load_entry_points=False)
    assert blocked.route_table(NameServerSettings()) is None
    config = Config(nameservers=(NameServerNode("ns1", "127.0.0.1:0"),))
    try:
        await serve_nameserver(config.nameservers[0], config, blocked, data_dir=tmp_path)
    except CoreError as exc:
        assert "route table" in str(exc)
    else:
        raise AssertionError("a name server without a route table must not start")
