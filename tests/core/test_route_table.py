"""RouteInfoManager rules, driven with explicit timestamps."""

from core.namesrv.route_table import RouteTable

TOPICS = {"Orders": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
          "TBW102": {"readQueueNums": 8, "writeQueueNums": 8, "perm": 7}}


def register(table, *, name="broker-a", addr="127.0.0.1:10911", broker_id=0, topics=TOPICS, version=1,
             now=0, conn=None, cluster="C", ha="127.0.0.1:10912"):
    return table.register(cluster=cluster, broker_name=name, broker_addr=addr, broker_id=broker_id,
                          ha_addr=ha, topic_configs=topics, data_version={"counter": version, "timestamp": 1},
                          now_ms=now, connection=conn)


def test_master_registration_builds_routes_with_quoted_ids():
    table = RouteTable()
    assert register(table).master_addr is None
    route = table.route("Orders")
    assert route == {
        "brokerDatas": [{"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "broker-a", "cluster": "C"}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                        "writeQueueNums": 4}],
    }
    assert table.route("Nope") is None
    assert table.topic_list() == ["Orders", "TBW102"]


def test_slave_learns_its_master_and_only_adds_an_address():
    table = RouteTable()
    register(table)
    result = register(table, addr="127.0.0.1:10921", broker_id=1, topics={"Other": {"perm": 6}}, ha="x")
    assert (result.master_addr, result.ha_addr) == ("127.0.0.1:10911", "127.0.0.1:10912")
    assert table.route("Orders")["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}
    assert table.route("Other") is None


def test_new_topic_table_replaces_the_brokers_queue_data_only_when_its_version_changes():
    table = RouteTable()
    register(table)
    register(table, topics={"Orders": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}, version=1)
    assert table.route("TBW102") is not None, "same data version: topic table not re-read"
    register(table, topics={"Orders": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}, version=2)
    assert table.route("TBW102") is None
    assert table.route("Orders")["queueDatas"][0]["writeQueueNums"] == 2


def test_two_brokers_share_a_topic_and_one_leaving_keeps_the_other():
    table = RouteTable()
    register(table)
    register(table, name="broker-b", addr="127.0.0.1:10915")
    assert [q["brokerName"] for q in table.route("Orders")["queueDatas"]] == ["broker-a", "broker-b"]
    table.unregister(cluster="C", broker_name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0)
    route = table.route("Orders")
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-b"]
    assert table.cluster_info()["clusterAddrTable"] == {"C": ["broker-b"]}


def test_silent_brokers_expire_and_refreshed_ones_stay():
    table = RouteTable(expiry_ms=120_000)
    register(table, now=0)
    register(table, name="broker-b", addr="127.0.0.1:10915", now=0)
    register(table, name="broker-b", addr="127.0.0.1:10915", now=100_000)
    assert table.expire(now_ms=120_000) == []
    assert table.expire(now_ms=120_001) == ["127.0.0.1:10911"]
    assert [q["brokerName"] for q in table.route("Orders")["queueDatas"]] == ["broker-b"]


def test_closing_the_registration_connection_removes_the_broker():
    table = RouteTable()
    conn_a, conn_b = object(), object()
    register(table, conn=conn_a)
    register(table, name="broker-b", addr="127.0.0.1:10915", conn=conn_b)
    assert table.remove_connection(conn_a) == ["127.0.0.1:10911"]
    assert "broker-a" not in table.cluster_info()["brokerAddrTable"]


def test_a_slave_promoted_on_the_same_address_replaces_its_old_id():
    table = RouteTable()
    register(table, addr="127.0.0.1:10921", broker_id=1)
    register(table, addr="127.0.0.1:10921", broker_id=0)
    assert table.cluster_info()["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "127.0.0.1:10921"}


def test_only_the_connection_that_registered_a_broker_may_unregister_it():
    """A second cluster's broker with the same name and address, dying before it ever served,
    must not take the running one out of the routes."""
    table = RouteTable()
    registering, stranger = object(), object()
    register(table, conn=registering)
    assert table.unregister(cluster="C", broker_name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0,
                            connection=stranger) is False
    assert table.route("Orders") is not None and "127.0.0.1:10911" in table.live
    assert table.unregister(cluster="C", broker_name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0,
                            connection=registering) is True
    assert table.route("Orders") is None


def test_an_increment_adds_its_topics_keeps_the_rest_and_leaves_the_version_for_the_next_whole_one():
    table = RouteTable()
    register(table)  # whole, version 1
    added = table.register(cluster="C", broker_name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0,
                           ha_addr="h", topic_configs={"New": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}},
                           data_version={"counter": 2, "timestamp": 1}, now_ms=5, incremental=True)
    assert not added.want_full
    assert table.topic_list() == ["New", "Orders", "TBW102"]
    assert table.live["127.0.0.1:10911"].data_version == {"counter": 1, "timestamp": 1}  # not taken
    # the next whole registration (version 2) replaces: a topic deleted meanwhile goes
    register(table, topics={"Orders": TOPICS["Orders"], "New": {"perm": 6}}, version=2)
    assert table.topic_list() == ["New", "Orders"]


def test_an_increment_from_a_broker_not_known_asks_for_every_topic():
    table = RouteTable()  # a name server just restarted
    result = table.register(cluster="C", broker_name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0,
                            ha_addr="h", topic_configs={"New": {"perm": 6}}, data_version={"counter": 9},
                            now_ms=0, incremental=True)
    assert result.want_full
    register(table, version=9)  # the whole registration that follows, with the same version
    assert table.topic_list() == ["Orders", "TBW102"]  # replaced: the increment left no version behind
