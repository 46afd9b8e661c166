"""The stock C++ client against a cluster started with `mqctl start`: every scenario twice,
with the client's name server address the name server's, then a proxy's (its routes then name
the proxy's doors, and every request goes through it)."""

import dataclasses
import json

import pytest
import trio

from mqctl.common import probe
from tests.conftest import child_env, running_cluster

COUNT = 1000


@pytest.fixture(scope="module", params=["direct", "proxy"])
def cluster(request, tmp_path_factory):
    """One name server, one broker (and a proxy) for the module (per test worker): every test
    sends to topics and reads with groups of its own, and a start and stop per test cost about
    3 s. ``namesrv`` is what the C++ client is given: the name server, or the proxy."""
    proxies = 1 if request.param == "proxy" else 0
    with running_cluster(tmp_path_factory.mktemp("interop"), child_env(), proxies=proxies) as c:
        yield c if request.param == "direct" else dataclasses.replace(c, namesrv=c.proxies[0])


def expected(i: int) -> dict:
    return {"body": f"message {i} from the C++ client", "tags": "TagA" if i % 2 == 0 else "TagB",
            "keys": f"key-{i}", "idx": str(i)}


def forwarded_by(cluster) -> int:
    """Requests the proxy (when the client is given one) has sent on to brokers so far."""
    if cluster.namesrv not in cluster.proxies:
        return 0
    info = trio.run(probe.runtime_info, cluster.namesrv)
    assert info is not None
    return int(info["proxyForwarded"])


def test_cpp_producer_to_cpp_push_consumer_every_message_exactly_as_sent(cluster):
    before = forwarded_by(cluster)
    sent = cluster.cpp("produce", cluster.namesrv, "Interop", str(COUNT))
    if cluster.namesrv in cluster.proxies:  # every send went through the proxy
        assert forwarded_by(cluster) - before >= COUNT
    assert [s["status"] for s in sent] == [0] * COUNT
    got = cluster.cpp("consume", cluster.namesrv, "CID_all", "Interop", "TagA || TagB", str(COUNT), "60")
    assert len(got) == COUNT, f"received {len(got)} of {COUNT}"
    by_idx = {g["idx"]: g for g in got}
    assert len(by_idx) == COUNT, "duplicates delivered"
    for i in range(COUNT):
        g = by_idx[str(i)]
        assert {k: g[k] for k in ("body", "tags", "keys", "idx")} == expected(i)
        assert g["topic"] == "Interop"
    assert {g["msg_id"] for g in got} == {s["msg_id"] for s in sent}
    # per queue, the offsets are dense: none skipped, none twice (a concurrent consumer
    # may hand them to its threads out of order)
    for q in {g["queue_id"] for g in got}:
        offsets = sorted(g["queue_offset"] for g in got if g["queue_id"] == q)
        assert offsets == list(range(len(offsets)))


def test_tag_expression_filters_on_the_broker(cluster):
    cluster.cpp("produce", cluster.namesrv, "Tagged", "200")
    got = cluster.cpp("consume", cluster.namesrv, "CID_a", "Tagged", "TagA", "100", "60")
    assert sorted(int(g["idx"]) for g in got) == list(range(0, 200, 2))


def test_mqctl_send_to_cpp_consumer(cluster):
    lines = "\n".join(f"line {i}" for i in range(50)) + "\n"
    sent = cluster.mqctl("send", "FromCli", "--tag", "TagA", "--key", "k", "--prop", "idx=7", "--json", input=lines)
    assert sent.returncode == 0, sent.stderr
    results = [json.loads(x) for x in sent.stdout.splitlines()]
    assert [r["status"] for r in results] == ["SEND_OK"] * 50
    got = cluster.cpp("consume", cluster.namesrv, "CID_cli", "FromCli", "TagA", "50", "60")
    assert sorted(g["body"] for g in got) == sorted(f"line {i}" for i in range(50))
    assert {(g["tags"], g["keys"], g["idx"]) for g in got} == {("TagA", "k", "7")}
    assert {g["msg_id"] for g in got} == {r["msg_id"] for r in results}


def test_cpp_producer_to_mqctl_tail(cluster):
    cluster.cpp("produce", cluster.namesrv, "ToTail", "100")
    out = cluster.mqctl("tail", "ToTail", "--from-beginning", "--count", "100", "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert sorted(int(r["properties"]["idx"]) for r in rows) == list(range(100))
    for r in rows:
        i = int(r["properties"]["idx"])
        assert (r["body"], r["tags"], r["keys"]) == (expected(i)["body"], expected(i)["tags"], [f"key-{i}"])


def test_a_stopped_consumer_resumes_from_its_committed_offset(cluster):
    cluster.cpp("produce", cluster.namesrv, "Resume", "100")
    first = cluster.cpp("consume", cluster.namesrv, "CID_resume", "Resume", "*", "100", "60")
    assert sorted(int(g["idx"]) for g in first) == list(range(100))
    cluster.cpp("produce", cluster.namesrv, "Resume", "60", "100")
    second = cluster.cpp("consume", cluster.namesrv, "CID_resume", "Resume", "*", "60", "60")
    assert sorted(int(g["idx"]) for g in second) == list(range(100, 160))
    # and a named mqctl tail group resumes the same way
    a = cluster.mqctl("tail", "Resume", "--group", "cli-group", "--from-beginning", "--count", "100", "--json")
    b = cluster.mqctl("tail", "Resume", "--group", "cli-group", "--count", "60", "--json")
    seen = [int(json.loads(x)["properties"]["idx"]) for x in a.stdout.splitlines() + b.stdout.splitlines()]
    assert sorted(seen) == list(range(160))


def test_cpp_delay_level_holds_the_message_until_due(cluster):
    sent = cluster.cpp("produce", cluster.namesrv, "Delayed", "5", "0", "2")  # level 2 = 5 s
    assert [s["status"] for s in sent] == [0] * 5
    got = cluster.cpp("consume", cluster.namesrv, "CID_delay", "Delayed", "*", "5", "60")
    assert sorted(int(g["idx"]) for g in got) == list(range(5))
    sent_at = {s["msg_id"]: s["sent_at"] for s in sent}
    assert all(g["received_at"] - sent_at[g["msg_id"]] >= 4.5 for g in got), "delivered when due, not before"


def test_cpp_reconsume_later_redelivers_with_reconsume_times_counted(cluster):
    cluster.cpp("produce", cluster.namesrv, "Redo", "3")
    # first deliveries fail; retries come back through %RETRY%CID_redo after level 3 (10 s)
    got = cluster.cpp("consume", cluster.namesrv, "CID_redo", "Redo", "*", "6", "90", "later")
    firsts = sorted(int(g["idx"]) for g in got if g["reconsume_times"] == 0)
    retries = sorted(int(g["idx"]) for g in got if g["reconsume_times"] == 1)
    assert firsts == [0, 1, 2] and retries == [0, 1, 2]
    assert {g["topic"] for g in got} == {"Redo"}, "the client shows retries under their original topic"


def test_cpp_orderly_send_and_orderly_consumer_keep_each_keys_order(cluster):
    assert cluster.mqctl("topic", "create", "Ordered", "--queues", "4").returncode == 0
    sent = cluster.cpp("produce-orderly", cluster.namesrv, "Ordered", "200", "4")
    assert [s["status"] for s in sent] == [0] * 200
    got = cluster.cpp("consume", cluster.namesrv, "CID_orderly", "Ordered", "*", "200", "60", "orderly")
    assert sorted(int(g["idx"]) for g in got) == list(range(200))
    for key in range(4):
        mine = [g for g in got if g["keys"] == f"key-{key}"]
        assert len({g["queue_id"] for g in mine}) == 1, "one sharding key, one queue"
        assert [int(g["idx"]) for g in mine] == list(range(key, 200, 4)), "consumed in the order sent"


def assert_each_once_as_sent(got: list[dict], count: int) -> dict[str, dict]:
    """Every message 0..count-1 received exactly once with its own body, tag, key and idx."""
    idxs = sorted(int(g["idx"]) for g in got)
    assert idxs == list(range(count)), f"received {len(got)} rows, {len(set(idxs))} distinct, of {count}"
    by_idx = {g["idx"]: g for g in got}
    for i in range(count):
        assert {k: by_idx[str(i)][k] for k in ("body", "tags", "keys", "idx")} == expected(i)
    return by_idx


def test_cpp_async_send_acknowledges_every_message_and_each_is_consumed_once(cluster):
    acks = cluster.cpp("produce-async", cluster.namesrv, "Async", "300", "60")
    assert [a for a in acks if "error" in a] == [], "no exception callbacks"
    assert sorted(a["i"] for a in acks) == list(range(300)), "one success callback per message"
    assert {a["status"] for a in acks} == {0}
    assert all(a["msg_id"] for a in acks) and len({a["msg_id"] for a in acks}) == 300
    got = cluster.cpp("consume", cluster.namesrv, "CID_async", "Async", "*", "300", "60")
    assert_each_once_as_sent(got, 300)
    by_id = {g["msg_id"]: g for g in got}
    assert by_id.keys() == {a["msg_id"] for a in acks}
    for a in acks:  # the acknowledged queue offset is where the message was stored
        assert by_id[a["msg_id"]]["queue_offset"] == a["offset"]


def test_cpp_oneway_send_delivers_every_message(cluster):
    handed = cluster.cpp("produce-oneway", cluster.namesrv, "Oneway", "300")
    assert [h["i"] for h in handed] == list(range(300))
    # no reply to wait on: the consumer waits (60 s at most) until all 300 are in
    got = cluster.cpp("consume", cluster.namesrv, "CID_oneway", "Oneway", "*", "300", "60")
    assert_each_once_as_sent(got, 300)
    assert len({g["msg_id"] for g in got}) == 300


def test_cpp_batch_send_stores_each_item_as_its_own_message(cluster):
    sent = cluster.cpp("produce-batch", cluster.namesrv, "Batched", "200", "10")
    assert [(s["first"], s["size"], s["status"]) for s in sent] == [(f, 10, 0) for f in range(0, 200, 10)]
    got = cluster.cpp("consume", cluster.namesrv, "CID_batch", "Batched", "*", "200", "60")
    by_idx = assert_each_once_as_sent(got, 200)
    assert len({g["msg_id"] for g in got}) == 200, "each item keeps its own message id"
    for s in sent:  # a batch lands in one queue, its items at consecutive offsets from the reply's
        rows = [by_idx[str(i)] for i in range(s["first"], s["first"] + s["size"])]
        assert len({r["queue_id"] for r in rows}) == 1
        assert [r["queue_offset"] for r in rows] == list(range(s["offset"], s["offset"] + s["size"]))


def test_cpp_broadcasting_consumers_of_one_group_each_get_every_message(cluster):
    assert cluster.mqctl("topic", "create", "Broadcast", "--queues", "4").returncode == 0
    rows = cluster.cpp("broadcast", cluster.namesrv, "CID_broadcast", "Broadcast", "200", "60", "2")
    sent = [r for r in rows if "consumer" not in r]
    assert [(s["i"], s["status"]) for s in sent] == [(i, 0) for i in range(200)]
    for n in (0, 1):
        mine = [r for r in rows if r.get("consumer") == n and r["tags"] != "Warmup"]
        assert_each_once_as_sent(mine, 200)
        assert {r["msg_id"] for r in mine} == {s["msg_id"] for s in sent}, f"consumer {n}"
        assert {r["queue_id"] for r in mine} == {0, 1, 2, 3}, "a broadcasting consumer reads every queue"


def test_cpp_batch_over_4_kib_arrives_compressed_and_is_stored_inflated(cluster):
    # the C++ client zlib-compresses a batch body over 4 KiB as a whole and flags the request
    sent = cluster.cpp("produce-batch", cluster.namesrv, "BigBatch", "300", "100")
    assert [(s["first"], s["status"]) for s in sent] == [(0, 0), (100, 0), (200, 0)]
    got = cluster.cpp("consume", cluster.namesrv, "CID_big_batch", "BigBatch", "*", "300", "60")
    by_idx = assert_each_once_as_sent(got, 300)
    assert by_idx["250"]["body"] == "message 250 from the C++ client"
