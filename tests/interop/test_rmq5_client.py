"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2, unchanged) against a
real cluster through the proxy's gRPC door: producers of every message type, the simple and the
push consumer, and what the C++ 4.x client sends and reads on the same topics.

One cluster serves the module; every test has its own topics and groups. The proxy lets a
receive ask for 1 s of invisible time (RocketMQ's proxy: 10 s at least) and sends a message to
the dead letter queue after 3 deliveries, so redelivery is seen in seconds.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import trio

from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from formats.rocketmq_v2 import messaging_pb2 as pb
from tests.conftest import child_env, running_cluster
from tests.interop.grpc_raw import RawGrpc

MAX_ATTEMPTS = 3
FIFO_GROUP = "FifoGroup"  # declared with mqctl group set --orderly
OLD_FIFO_GROUP = "OldFifoGroup"  # named in the deprecated [proxy] fifo_groups
RENEW_SLICE_MS = 3000  # push consumers' messages are handed out for 3 s and renewed while handled


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rmq5")
    with running_cluster(tmp, child_env(), proxies=1, grpc=True,
                         broker="transaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000",
                         proxy=f"min_invisible_ms = 1000\nmax_delivery_attempts = {MAX_ATTEMPTS}\n"
                               f"auto_renew_slice_ms = {RENEW_SLICE_MS}\nauto_renew_ahead_ms = 1500\n"
                               f'fifo_groups = ["{OLD_FIFO_GROUP}"]') as c:
        yield c


def topic(cluster, name: str, queues: int = 4) -> str:
    made = cluster.mqctl("topic", "create", name, "--queues", str(queues))
    assert made.returncode == 0, made.stderr
    return name


def produce(cluster, name: str, specs: list[dict], **env: str) -> list[dict]:
    rows = cluster.rmq5("produce", cluster.grpc[0], name, json.dumps(specs), env=env)
    assert [r for r in rows if r["event"] == "failed"] == []
    return rows


def proxy_counts(cluster) -> dict[str, str]:
    """The proxy's runtime table (GET_BROKER_RUNTIME_INFO)."""
    async def ask() -> dict[str, str]:
        async with open_remoting_client() as client:
            answer = await client.invoke(cluster.proxies[0], RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
            return json.loads(answer.body)["table"]
    return trio.run(ask)


def consume(cluster, group: str, name: str, **options) -> list[dict]:
    return [r for r in cluster.rmq5("consume", cluster.grpc[0], group, name, json.dumps(options))
            if r["event"] == "received"]


def test_what_a_producer_sends_is_read_back_byte_identical(cluster):
    name = topic(cluster, "Rmq5Fields")
    specs = [{"body_hex": bytes(range(256)).hex(), "tag": "TagA", "keys": ["k-0", "order-7"],
              "props": {"color": "blue", "emoji": "\u2603"}},
             {"body": "plain", "tag": "TagB", "keys": ["k-1"], "props": {"n": "1"}}]
    sent = produce(cluster, name, specs)
    got = {r["id"]: r for r in consume(cluster, "Rmq5FieldsG", name, count=2, invisible_s=10)}
    assert set(got) == {r["id"] for r in sent if r["event"] == "sent"}
    by_tag = {r["tag"]: r for r in got.values()}
    assert by_tag["TagA"]["body"] == bytes(range(256)).hex()
    assert by_tag["TagA"]["keys"] == ["k-0", "order-7"]
    assert by_tag["TagA"]["props"] == {"color": "blue", "emoji": "\u2603"}
    assert by_tag["TagB"]["body"] == b"plain".hex() and by_tag["TagB"]["props"] == {"n": "1"}
    assert all(r["attempt"] == 1 and r["topic"] == name for r in got.values())


def test_a_tag_filter_hands_out_only_its_tags(cluster):
    name = topic(cluster, "Rmq5Tags")
    produce(cluster, name, [{"body": f"m{i}", "tag": "TagA" if i % 2 else "TagB"} for i in range(6)])
    got = consume(cluster, "Rmq5TagsG", name, filter="TagA", count=3, wait_s=8)
    assert sorted(r["body"] for r in got) == sorted(f"m{i}".encode().hex() for i in (1, 3, 5))
    assert {r["tag"] for r in got} == {"TagA"}


def test_unacked_messages_come_back_with_a_higher_attempt_then_go_to_the_dead_letter_queue(cluster):
    name = topic(cluster, "Rmq5Redeliver", queues=1)
    sent = produce(cluster, name, [{"body": "again"}])
    message_id = sent[0]["id"]
    got = consume(cluster, "Rmq5RedeliverG", name, count=MAX_ATTEMPTS, invisible_s=1, ack="none", wait_s=30)
    assert [r["attempt"] for r in got] == list(range(1, MAX_ATTEMPTS + 1))
    assert {r["id"] for r in got} == {message_id}
    # the next delivery would be the 4th: the proxy moves it to %DLQ%{group} instead
    assert consume(cluster, "Rmq5RedeliverG", name, count=1, invisible_s=1, ack="none", wait_s=3) == []
    dlq = cluster.mqctl("tail", "%DLQ%Rmq5RedeliverG", "--group", "dlq-reader", "--count", "1", "--json",
                        "--from-beginning", timeout=30)
    assert dlq.returncode == 0, dlq.stderr
    rows = [json.loads(line) for line in dlq.stdout.splitlines() if line.startswith("{")]
    assert [r.get("body") for r in rows] == ["again"]


def test_a_changed_invisible_duration_brings_a_message_back_sooner(cluster):
    name = topic(cluster, "Rmq5Change", queues=1)
    produce(cluster, name, [{"body": "soon"}])
    started = time.time()
    first = consume(cluster, "Rmq5ChangeG", name, count=1, invisible_s=30, change_s=1, ack="none")
    again = consume(cluster, "Rmq5ChangeG", name, count=1, invisible_s=30, wait_s=15)
    assert [r["attempt"] for r in first + again] == [1, 2]
    assert again[0]["at"] - started < 15  # not the 30 s asked for at first


@pytest.mark.parametrize("group", [FIFO_GROUP, OLD_FIFO_GROUP], ids=["declared-with-mqctl", "deprecated-proxy-key"])
def test_fifo_messages_of_a_group_arrive_in_order_at_the_push_consumer(cluster, group):
    if group == FIFO_GROUP:
        made = cluster.mqctl("group", "set", FIFO_GROUP, "--orderly", "--json")
        assert made.returncode == 0, made.stderr
        assert {json.loads(line)["result"] for line in made.stdout.splitlines()} == {"ok"}
        listed = cluster.mqctl("group", "list", "--json")
        assert {"broker": "broker-a", "group": FIFO_GROUP, "orderly": True} in [
            json.loads(line) for line in listed.stdout.splitlines()]
    name = topic(cluster, f"Rmq5Fifo{group}")
    specs = [{"body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb", "gc")]
    produce(cluster, name, specs)
    events = cluster.rmq5("push", cluster.grpc[0], group, name, "15", "30", "0.3")  # handlers take 0.3 s
    rows = [r for r in events if r["event"] == "consumed"]
    assert len(rows) == 15 and {r["attempt"] for r in rows} == {1}
    for g in ("ga", "gb", "gc"):  # one at a time, in order: each handler starts after the last returned
        seen = [(r["event"], bytes.fromhex(r["body"]).decode()) for r in events
                if r["event"] in ("started", "consumed") and r["group"] == g]
        assert seen == [(e, f"{g}-{i}") for i in range(5) for e in ("started", "consumed")], seen


def test_concurrent_sends_merged_into_batches_lose_nothing_and_keep_each_groups_order(cluster):
    name = topic(cluster, "Rmq5Many")
    before = proxy_counts(cluster)
    options = [{"name": f"w{w}", "groups": 6, "per_group": 15, "plain": 300, "inflight": 32} for w in range(3)]

    def raw_group_sender() -> list[dict]:  # one group's messages ten to a request, as other SDKs may send them
        rows = []
        with RawGrpc(cluster.grpc[0]) as door:
            for r in range(6):
                bodies = [f"raw-g0-{10 * r + i}" for i in range(10)]
                answer = door.unary("SendMessage", pb.SendMessageRequest(messages=[pb.Message(
                    topic=pb.Resource(name=name), body=b.encode(), system_properties=pb.SystemProperties(
                        message_id=f"RAW{10 * r + i:05d}", message_group="raw-g0")) for i, b in enumerate(bodies)]),
                    pb.SendMessageResponse, "raw-sender")
                assert answer.status.code == pb.OK, answer.status
                rows += [{"event": "sent", "id": e.message_id, "body": b} for e, b in zip(answer.entries, bodies)]
        return rows

    with ThreadPoolExecutor(len(options) + 1) as pool:
        raw = pool.submit(raw_group_sender)
        runs = list(pool.map(lambda o: cluster.rmq5("produce-many", cluster.grpc[0], name, json.dumps(o)), options))
        runs.append(raw.result())
    sent = {r["id"]: r["body"] for rows in runs for r in rows if r["event"] == "sent"}
    assert [r for rows in runs for r in rows if r["event"] == "failed"] == []
    assert len(sent) == 3 * (6 * 15 + 300) + 60
    tailed = cluster.mqctl("tail", name, "--from-beginning", "--count", str(len(sent)), "--json", timeout=120)
    assert tailed.returncode == 0, tailed.stderr
    rows = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert {r["msg_id"]: r["body"] for r in rows} == sent and len(rows) == len(sent)  # each once, byte for byte
    by_queue: dict[int, list[dict]] = {}
    for r in rows:
        by_queue.setdefault(r["queue_id"], []).append(r)
    for queue in by_queue.values():  # no offset twice, none skipped
        assert sorted(r["queue_offset"] for r in queue) == list(range(len(queue)))
    for prefix, count in [(f"w{w}-g{g}-", 15) for w in range(3) for g in range(6)] + [("raw-g0-", 60)]:
        mine = sorted((r for r in rows if r["body"].startswith(prefix)), key=lambda r: r["queue_offset"])
        assert len({r["queue_id"] for r in mine}) == 1  # a group keeps to one queue
        assert [r["body"] for r in mine] == [f"{prefix}{i}" for i in range(count)]  # in the order sent
    after = proxy_counts(cluster)
    messages = int(after["grpcSendMessages"]) - int(before.get("grpcSendMessages", "0"))
    requests = int(after["grpcSendRequests"]) - int(before.get("grpcSendRequests", "0"))
    assert messages == len(sent) and requests < messages  # sends were merged upstream


def test_the_entries_of_one_ack_go_upstream_as_one_batch_ack_and_stay_acked(cluster):
    name = topic(cluster, "Rmq5BatchAck", queues=1)
    produce(cluster, name, [{"body": f"a{i}"} for i in range(10)])
    ask = pb.ReceiveMessageRequest(group=pb.Resource(name="Rmq5BatchAckG"), batch_size=32,
                                   invisible_duration={"seconds": 2}, long_polling_timeout={"seconds": 5},
                                   message_queue=pb.MessageQueue(topic=pb.Resource(name=name), id=-1,
                                                                 broker=pb.Broker(name="broker-a")))
    with RawGrpc(cluster.grpc[0]) as door:
        got = [f.message for f in door.receive_future(ask, "batch-acker") if f.HasField("message")]
        assert sorted(m.body for m in got) == sorted(f"a{i}".encode() for i in range(10))
        before = proxy_counts(cluster)
        answer = door.unary("AckMessage", pb.AckMessageRequest(
            group=ask.group, topic=ask.message_queue.topic, entries=[pb.AckMessageEntry(
                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
                for m in got]), pb.AckMessageResponse, "batch-acker")
        assert answer.status.code == pb.OK and [e.status.code for e in answer.entries] == [pb.OK] * 10
        after = proxy_counts(cluster)
        assert int(after["grpcAcks"]) - int(before["grpcAcks"]) == 10
        assert int(after["grpcAckRequests"]) - int(before["grpcAckRequests"]) == 1  # one BATCH_ACK_MESSAGE
        again = pb.ReceiveMessageRequest()
        again.CopyFrom(ask)
        again.long_polling_timeout.seconds = 4
        frames = list(door.receive_future(again, "batch-acker"))
        assert [f for f in frames if f.HasField("message")] == []  # acked: none came back after 2 s


def test_a_push_consumers_slow_handler_keeps_its_message_which_is_delivered_and_acked_once(cluster):
    name = topic(cluster, "Rmq5SlowHandler")
    sent = produce(cluster, name, [{"body": f"slow{i}"} for i in range(2)])
    before = proxy_counts(cluster)
    rows = cluster.rmq5("push", cluster.grpc[0], "Rmq5SlowG", name, "2", "40", "5")  # 5 s handlers, 3 s slices
    started = [r["id"] for r in rows if r["event"] == "started"]
    assert sorted(started) == sorted(r["id"] for r in sent)  # each handed to a handler once: none came back
    assert sorted(r["id"] for r in rows if r["event"] == "consumed") == sorted(started)
    assert int(proxy_counts(cluster)["grpcRenewed"]) - int(before.get("grpcRenewed", "0")) >= 2
    assert consume(cluster, "Rmq5SlowG", name, count=1, wait_s=5) == []  # acked with the renewed handles


def test_a_push_consumer_consumes_and_acks_concurrently(cluster):
    name = topic(cluster, "Rmq5Push")
    sent = produce(cluster, name, [{"body": f"p{i}"} for i in range(40)])
    rows = [r for r in cluster.rmq5("push", cluster.grpc[0], "Rmq5PushG", name, "40", "30") if r["event"] == "consumed"]
    assert {r["id"] for r in rows} == {r["id"] for r in sent}
    assert len({r["thread"] for r in rows}) > 1
    # acked: a second consumer of the group finds nothing
    assert consume(cluster, "Rmq5PushG", name, count=1, wait_s=4) == []


def test_a_delayed_message_is_delivered_at_its_time(cluster):
    name = topic(cluster, "Rmq5Delay", queues=1)
    sent_at = time.time()
    produce(cluster, name, [{"body": "later", "delay_s": 3}, {"body": "now"}])
    got = consume(cluster, "Rmq5DelayG", name, count=2, wait_s=20)
    by_body = {bytes.fromhex(r["body"]).decode(): r for r in got}
    due_s = by_body["later"]["delivery_ms"] / 1000  # the client sends whole seconds: 2-3 s from now
    assert sent_at + 2 <= due_s <= sent_at + 4
    assert by_body["now"]["at"] < due_s
    assert by_body["later"]["at"] >= due_s


def test_a_recalled_timer_message_is_never_delivered(cluster):
    name = topic(cluster, "Rmq5Recall", queues=1)
    rows = produce(cluster, name, [{"body": "recalled", "delay_s": 2, "recall": True}, {"body": "kept", "delay_s": 2}])
    sent = {r["body"]: r for r in rows if r["event"] == "sent"}
    assert [r["id"] for r in rows if r["event"] == "recalled"] == [sent["recalled"]["id"]]
    got = consume(cluster, "Rmq5RecallG", name, count=2, wait_s=6)  # both were due 2 s after sending
    assert [bytes.fromhex(r["body"]).decode() for r in got] == ["kept"]  # the recalled one never came
    with RawGrpc(cluster.grpc[0]) as door:  # a message delivered already cannot be recalled
        late = door.unary("RecallMessage", pb.RecallMessageRequest(
            topic=pb.Resource(name=name), recall_handle=sent["kept"]["recall_handle"]), pb.RecallMessageResponse, "late")
        forged = door.unary("RecallMessage", pb.RecallMessageRequest(
            topic=pb.Resource(name=name), recall_handle="bm90IGEgaGFuZGxl"), pb.RecallMessageResponse, "late")
    assert late.status.code == pb.BAD_REQUEST and "due already" in late.status.message, late.status
    assert forged.status.code == pb.BAD_REQUEST, forged.status


def test_transactions_commit_roll_back_and_are_resolved_by_check_back(cluster):
    name = topic(cluster, "Rmq5Tx", queues=2)
    rows = produce(cluster, name, [{"body": "committed", "tx": "commit"}, {"body": "rolled-back", "tx": "rollback"},
                                   {"body": "unknown", "tx": "unknown"}], RMQ5_LINGER_S="15")
    checks = [r for r in rows if r["event"] == "check"]
    assert [c["body"] for c in checks] == ["unknown"]  # asked about the open one only, answered COMMIT
    got = consume(cluster, "Rmq5TxG", name, count=2, wait_s=15)
    assert sorted(bytes.fromhex(r["body"]).decode() for r in got) == ["committed", "unknown"]


def test_the_cpp_client_and_the_5x_client_read_each_other(cluster):
    name = topic(cluster, "Rmq5Cross")
    cpp_sent = cluster.cpp("produce", cluster.proxies[0], name, "4")
    got = consume(cluster, "Rmq5CrossG", name, count=4, wait_s=15)
    assert {r["id"] for r in got} == {r["msg_id"] for r in cpp_sent if "msg_id" in r}
    assert all(r["keys"] and r["tag"] in ("TagA", "TagB") for r in got)
    produce(cluster, name, [{"body": f"from-5x-{i}", "tag": "Tag5", "keys": [f"k{i}"]} for i in range(3)])
    read = cluster.cpp("consume", cluster.proxies[0], "Rmq5CrossCpp", name, "Tag5", "3", "20")
    assert sorted(r["body"] for r in read if "body" in r) == [f"from-5x-{i}" for i in range(3)]


def test_messages_received_and_not_acked_before_a_broker_restart_all_come_back(cluster):
    name = topic(cluster, "Rmq5Restart")
    sent = produce(cluster, name, [{"body": f"r{i}"} for i in range(10)])
    first = consume(cluster, "Rmq5RestartG", name, count=10, invisible_s=3, ack="none")
    assert {r["id"] for r in first} == {r["id"] for r in sent}
    restarted = cluster.mqctl("restart", "broker-a-0")
    assert restarted.returncode == 0, restarted.stderr
    again = consume(cluster, "Rmq5RestartG", name, count=10, wait_s=30)
    assert {r["id"] for r in again} == {r["id"] for r in sent}
    assert {r["attempt"] for r in again} == {2}


def test_bench_grpc_measures_both_paths_and_every_process(cluster):
    name = topic(cluster, "Rmq5Bench")
    done = cluster.mqctl("bench", "grpc", "--topic", name, "--messages", "200", "--rounds", "1", "--json", timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    for path in ("grpc_send", "remoting_send", "grpc_receive_ack"):
        assert result[path]["msgs_per_s"] > 0
        assert {"broker-a-0", "proxy1", "clients"} <= set(result[path]["cpu_us_per_msg"])
        assert all(round(result[path][p], 2) == result[path][p] for p in ("p50_ms", "p99_ms"))  # no 82.08500000000001


def test_bench_grpc_floor_measures_the_door_alone_with_the_official_client(tmp_path, subprocess_env):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mqctl", "bench", "grpc-floor", "--messages", "200", "--rounds", "1",
                           "--json"], capture_output=True, text=True, timeout=180, env=subprocess_env, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["msgs_per_s"] > 0 and result["door_us_per_call"] > 0
    assert result["rounds"][0]["door_us_per_call"] == result["door_us_per_call"]
