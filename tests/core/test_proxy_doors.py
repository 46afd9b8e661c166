"""A proxy's doors in the config, and the routes that name them (sans-IO)."""

from __future__ import annotations

import orjson
import pytest

from core.config import parse_config
from core.errors import ConfigError
from core.proxy.doors import Doors

CONFIG = {
    "brokers": [{"name": "broker-b", "id": 0, "listen": "127.0.0.1:20911"},
                {"name": "broker-a", "id": 0, "listen": "127.0.0.1:10911"},
                {"name": "broker-b", "id": 1, "listen": "127.0.0.1:20921"}],
    "proxies": [{"name": "proxy1", "listen": "0.0.0.0:8080", "advertise": "10.1.2.3:9080"}],
}


def test_each_group_has_a_door_on_the_next_ports_in_the_order_the_file_names_them():
    config = parse_config(CONFIG)
    proxy = config.proxy_node("proxy1")
    assert proxy is not None
    assert config.proxy_doors(proxy) == {"broker-b": ("0.0.0.0:8081", "10.1.2.3:9081"),
                                         "broker-a": ("0.0.0.0:8082", "10.1.2.3:9082")}
    assert config.listens_of("proxy1") == ["0.0.0.0:8080", "0.0.0.0:8081", "0.0.0.0:8082"]
    assert config.listens_of("broker-a-0") == ["127.0.0.1:10911", "127.0.0.1:10912"]
    assert "proxy1" in config.node_names()


def test_a_door_on_another_nodes_port_and_a_proxy_without_a_real_port_are_refused():
    clash = dict(CONFIG, proxies=[{"name": "p", "listen": "127.0.0.1:10910"}])  # its first door is broker-a's port
    with pytest.raises(ConfigError, match="127.0.0.1:10911"):
        parse_config(clash)
    with pytest.raises(ConfigError, match="needs a real port"):
        parse_config(dict(CONFIG, proxies=[{"name": "p", "listen": "127.0.0.1:0"}]))
    with pytest.raises(ConfigError, match="failover_wait_ms"):
        parse_config(dict(CONFIG, proxy={"failover_wait_ms": -1}))


def test_routes_and_the_cluster_table_name_each_known_groups_door_as_its_master():
    config = parse_config(CONFIG)
    doors = Doors(config, config.proxies[0])
    route = {"brokerDatas": [
        {"brokerName": "broker-b", "cluster": "C", "brokerAddrs": {"1": "127.0.0.1:20921"}},  # its master is down
        {"brokerName": "broker-z", "cluster": "C", "brokerAddrs": {"0": "10.9.9.9:10911"}}],  # not in the file
        "queueDatas": [{"brokerName": "broker-b", "perm": 6, "readQueueNums": 4, "writeQueueNums": 4}]}
    rewritten = orjson.loads(doors.rewrite_route(orjson.dumps(route)))
    assert [d["brokerAddrs"] for d in rewritten["brokerDatas"]] == [{"0": "10.1.2.3:9081"}, {"0": "10.9.9.9:10911"}]
    assert rewritten["queueDatas"] == route["queueDatas"]
    table = {"brokerAddrTable": {"broker-a": {"brokerName": "broker-a", "brokerAddrs": {"0": "127.0.0.1:10911"}}},
             "clusterAddrTable": {"C": ["broker-a"]}}
    info = orjson.loads(doors.rewrite_cluster_info(orjson.dumps(table)))
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "10.1.2.3:9082"}
