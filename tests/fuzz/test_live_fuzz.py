"""Hostile requests against a live name server and broker (real processes): every request code we
know and some we do not, with fields missing, of the wrong type, huge, negative or pointing
nowhere, and random or mutated bodies; then frames cut, mutated and oversized at the byte level.

Each request must get an answer with its own opaque (a oneway none), no handler may fail with an
unexpected exception (the node logs a traceback when one does), the node must keep serving, and
after it stops its CommitLog must verify clean."""

from __future__ import annotations

import collections
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import load_config
from core.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from core.remoting.command import RemotingCommand, encode_frame
from formats.batch import BatchItem, encode_batch
from tests.conftest import running_cluster
from tests.fuzz.peer import NodeLog, Peer, send_and_drain

EXAMPLES = int(os.environ.get("MQ_FUZZ_EXAMPLES", "100"))  # CI's count; raise it for a longer hunt
LIVE = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# held pulls answer after this long at most: the fuzzer's pulls must not wait 20 s each
BROKER_SETTINGS = "long_poll_suspend_max_ms = 300\nshort_polling_ms = 300"

FIELD_NAMES = [
    "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis",
    "subscription", "subVersion", "expressionType", "consumerGroup", "producerGroup", "defaultTopic",
    "defaultTopicQueueNums", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "batch",
    "maxReconsumeTimes", "offset", "delayLevel", "originMsgId", "originTopic", "group", "timestamp", "key",
    "maxNum", "beginTimestamp", "endTimestamp", "msgId", "commitLogOffset", "tranStateTableOffset",
    "commitOrRollback", "fromTransactionCheck", "transactionId", "readQueueNums", "writeQueueNums", "perm",
    "topicFilterType", "order", "clientId", "clientID", "brokerName", "brokerAddr", "brokerId", "clusterName",
    "haServerAddr", "namespace", "value", "isForce", "jstack", "target", "compressed", "a", "b", "c", "d",
    "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "AccessKey", "Signature",
]
TOPICS = ["FuzzTopic", "TBW102", "%RETRY%fuzz", "%DLQ%fuzz", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
          "", " ", "a" * 300, "bad/topic", "\u4e2d\u6587", "x\x00y"]
numbers = st.one_of(st.integers(-2, 40), st.integers(-(2**80), 2**80), st.sampled_from([2**31, 2**63, -(2**63) - 1]))
values = st.one_of(numbers.map(str), st.sampled_from(TOPICS), st.text(max_size=30), st.sampled_from(
    ["true", "false", "", "1.5", "NaN", "0x10", "*", "TAGA || TAGB", "SQL92", "a=b\x01c=d\x02", "{}", "[]"]))

CODES = [int(c) for c in RequestCode] + [28, 50000, 50001, 50002, 50003, 50004, 50005, 50006, 60000]
unknown_codes = st.one_of(st.integers(-(2**15), 2**15 - 1), st.integers(2**15, 2**31 - 1))


def json_body(draw) -> bytes:
    doc = draw(st.recursive(
        st.one_of(st.none(), st.booleans(), numbers, st.sampled_from(TOPICS), st.text(max_size=10)),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
            st.sampled_from(["clientID", "consumerDataSet", "producerDataSet", "groupName", "consumeType",
                             "messageModel", "subscriptionDataSet", "topic", "subString", "tagsSet", "codeSet",
                             "mqSet", "brokerName", "queueId", "consumerGroup", "offsetTable", "topicConfigTable",
                             "dataVersion", "filterServerList"]), inner, max_size=5)),
        max_leaves=12))
    return json.dumps(doc).encode()


@st.composite
def bodies(draw) -> bytes:
    kind = draw(st.sampled_from(["none", "random", "json", "batch", "huge-count"]))
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "json":
        return json_body(draw)
    if kind == "batch":
        items = draw(st.lists(st.builds(BatchItem, body=st.binary(max_size=20), properties=st.dictionaries(
            st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "DELAY", "TRAN_MSG"]),
            st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=8), max_size=3)),  # then mutated
            max_size=3))
        data = bytearray(encode_batch(items))
        for _ in range(draw(st.integers(0, 3))):
            if data:
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == "huge-count":
        return struct.pack(">iiii", 2**31 - 1, 0, 2**31 - 1, 2**31 - 1)
    return b""


HEARTBEAT = {"clientID": "127.0.0.1@fuzz", "producerDataSet": [{"groupName": "fuzz-producer"}],
             "consumerDataSet": [{"groupName": "fuzz-group", "consumeType": "CONSUME_PASSIVELY",
                                  "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                  "unitMode": False, "subscriptionDataSet": [
                                      {"topic": "FuzzTopic", "subString": "TAGA || TAGB", "tagsSet": ["TAGA", "TAGB"],
                                       "codeSet": [2598, 2599], "subVersion": 1, "expressionType": "TAG",
                                       "classFilterMode": False}]}]}
LOCKS = {"consumerGroup": "fuzz-group", "clientId": "127.0.0.1@fuzz",
         "mqSet": [{"topic": "FuzzTopic", "brokerName": "broker-a", "queueId": 1}]}
SEND_V1 = {"producerGroup": "fuzz-producer", "topic": "FuzzTopic", "defaultTopic": "TBW102",
           "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
           "properties": "KEYS\x01k1\x02TAGS\x01TAGA\x02", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
SEND_V2 = dict(zip("abcdefghijklm", SEND_V1.values(), strict=False))
SEND_BATCH = dict(SEND_V2, m="true")
PULL = {"consumerGroup": "fuzz-group", "topic": "FuzzTopic", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "100", "subscription": "*", "subVersion": "1",
        "expressionType": "TAG"}
QUEUE = {"topic": "FuzzTopic", "queueId": "0"}
GROUP_QUEUE = {"consumerGroup": "fuzz-group", "topic": "FuzzTopic", "queueId": "0"}
TEMPLATES: dict[int, tuple[dict[str, str], dict | None]] = {
    RequestCode.SEND_MESSAGE: (SEND_V1, None),
    RequestCode.SEND_MESSAGE_V2: (SEND_V2, None),
    RequestCode.SEND_BATCH_MESSAGE: (SEND_BATCH, None),
    RequestCode.PULL_MESSAGE: (PULL, None),
    RequestCode.QUERY_MESSAGE: ({"topic": "FuzzTopic", "key": "k1", "maxNum": "32", "beginTimestamp": "0",
                                 "endTimestamp": "9999999999999"}, None),
    RequestCode.QUERY_CONSUMER_OFFSET: (GROUP_QUEUE, None),
    RequestCode.UPDATE_CONSUMER_OFFSET: (dict(GROUP_QUEUE, commitOffset="1"), None),
    RequestCode.UPDATE_AND_CREATE_TOPIC: ({"topic": "FuzzTopic", "defaultTopic": "TBW102", "readQueueNums": "4",
                                           "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                           "topicSysFlag": "0", "order": "false"}, None),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: (dict(QUEUE, timestamp="1700000000000"), None),
    RequestCode.GET_MAX_OFFSET: (QUEUE, None),
    RequestCode.GET_MIN_OFFSET: (QUEUE, None),
    RequestCode.GET_EARLIEST_MSG_STORETIME: (QUEUE, None),
    RequestCode.VIEW_MESSAGE_BY_ID: ({"offset": "0"}, None),
    RequestCode.HEART_BEAT: ({}, HEARTBEAT),
    RequestCode.CONSUMER_SEND_MSG_BACK: ({"offset": "0", "group": "fuzz-group", "delayLevel": "0",
                                          "originMsgId": "7F00000100002A9F0000000000000000", "originTopic": "FuzzTopic",
                                          "unitMode": "false", "maxReconsumeTimes": "16"}, None),
    RequestCode.END_TRANSACTION: ({"producerGroup": "fuzz-producer", "tranStateTableOffset": "0",
                                   "commitLogOffset": "0", "commitOrRollback": "8", "fromTransactionCheck": "false",
                                   "msgId": "7F00000100002A9F0000000000000000", "transactionId": "t1"}, None),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: ({"consumerGroup": "fuzz-group"}, None),
    RequestCode.LOCK_BATCH_MQ: ({}, LOCKS),
    RequestCode.UNLOCK_BATCH_MQ: ({}, LOCKS),
    RequestCode.GET_CONSUME_STATS: ({"consumerGroup": "fuzz-group", "topic": "FuzzTopic"}, None),
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ({"topic": "FuzzTopic", "group": "fuzz-group", "timestamp": "0",
                                                 "isForce": "true"}, None),
    RequestCode.GET_CONSUMER_RUNNING_INFO: ({"consumerGroup": "fuzz-group", "clientId": "127.0.0.1@fuzz",
                                             "jstackEnable": "false"}, None),
    RequestCode.REGISTER_BROKER: ({"brokerName": "broker-fuzz", "brokerAddr": "127.0.0.1:1", "clusterName": "Fuzz",
                                   "haServerAddr": "127.0.0.1:2", "brokerId": "0", "compressed": "false"},
                                  {"topicConfigSerializeWrapper": {"topicConfigTable": {"FuzzTopic": {
                                      "topicName": "FuzzTopic", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
                                      "dataVersion": {"timestamp": 0, "counter": 0}}, "filterServerList": []}),
    RequestCode.GET_ROUTEINFO_BY_TOPIC: ({"topic": "FuzzTopic"}, None),
    RequestCode.PUT_KV_CONFIG: ({"namespace": "fuzz", "key": "k", "value": "v"}, None),
    RequestCode.GET_KV_CONFIG: ({"namespace": "fuzz", "key": "k"}, None),
}


def mutate_fields(draw, fields: dict[str, str]) -> dict[str, str]:
    """Each field kept, replaced by a hostile value or dropped; then a few foreign fields."""
    out = {}
    for name, value in fields.items():
        fate = draw(st.sampled_from(["keep"] * 6 + ["hostile", "drop"]))
        if fate == "keep":
            out[name] = value
        elif fate == "hostile":
            out[name] = draw(values)
    out.update(draw(st.dictionaries(st.sampled_from(FIELD_NAMES), values, max_size=2)))
    return out


def mutate_document(draw, doc):
    """One leaf (or branch) of a JSON document replaced by something of another kind."""
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(doc)))
        return dict(doc, **{key: mutate_document(draw, doc[key])})
    if isinstance(doc, list) and doc and draw(st.booleans()):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], mutate_document(draw, doc[i]), *doc[i + 1:]]
    return json.loads(json_body(draw))


@st.composite
def requests(draw, codes: list[int], served: list[int] | None = None) -> RemotingCommand:
    """Mostly requests a handler reads (from ``served``, else every template), some it does not
    know."""
    pick = draw(st.integers(0, 9))
    code = draw(st.sampled_from(served or sorted(TEMPLATES)) if pick < 8 else st.sampled_from(codes) if pick < 9
                else unknown_codes)
    fields, doc = TEMPLATES.get(code, ({}, None))
    fields = mutate_fields(draw, fields) if fields else draw(st.dictionaries(st.sampled_from(FIELD_NAMES), values,
                                                                          max_size=10))
    if doc is not None and draw(st.integers(0, 3)):
        body = json.dumps(doc if draw(st.booleans()) else mutate_document(draw, doc)).encode()
    else:
        body = draw(bodies())
    binary_fits = -(2**15) <= code < 2**15  # the binary header has two bytes for the code
    return RemotingCommand(code=code, ext_fields=fields, body=body,
                           flag=draw(st.sampled_from([0, 0, 0, FLAG_ONEWAY])),
                           serialize_type=draw(st.sampled_from([0, 1])) if binary_fits else 0,
                           language=draw(st.sampled_from(["JAVA", "CPP"])))


def alive(peer: Peer, code: int) -> bool:
    answer, = peer.exchange([RemotingCommand(code=code)])
    return answer.code == 0


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    with running_cluster(tmp, env, broker=BROKER_SETTINGS) as cluster:
        cluster.tmp = tmp
        yield cluster
    verify = subprocess.run([sys.executable, "-m", "mqctl", "dump", "--verify", str(tmp / "data" / "broker-a-0" / "commitlog")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


def node_address(cluster, node: str) -> str:
    config = load_config(cluster.config)
    return next(n.listen for n in (*config.nameservers, *config.brokers) if n.name == node or getattr(n, "node", "") == node)


def hunt(cluster, node: str, codes: list[int], health_code: int, served: list[int] | None = None):
    log = NodeLog(cluster.tmp / "data" / "logs" / f"{node}.log")
    peer = Peer(node_address(cluster, node))
    answered: collections.Counter[int] = collections.Counter()

    @LIVE
    @given(st.lists(requests(codes, served), min_size=1, max_size=4))
    def one_round(cmds):
        nonlocal peer
        try:
            answered.update(a.code for a in peer.exchange(cmds))
        except BaseException:
            peer.close()  # answers may still be on their way: the next example starts afresh
            peer = Peer(peer.address_text)
            raise
        finally:
            failed = log.new()
        assert "Traceback" not in failed, failed[-3000:]

    try:
        one_round()
        assert alive(peer, health_code)
    finally:
        peer.close()
    # the requests got past the framing into the handlers: some succeeded, some were refused
    # for what they said, not only for a code the node does not know
    assert answered[ResponseCode.SUCCESS] > 0, answered
    assert sum(n for code, n in answered.items() if code not in (ResponseCode.SUCCESS,
                                                                 ResponseCode.REQUEST_CODE_NOT_SUPPORTED)) > 0, answered


def test_the_broker_answers_hostile_requests_and_keeps_serving(fuzz_cluster):
    hunt(fuzz_cluster, "broker-a-0", CODES, RequestCode.GET_ALL_TOPIC_CONFIG)


# what the name server reads: drawn mostly from these, its answers do not hang on how many of
# the broker's requests a run happens to draw (each of those is only REQUEST_CODE_NOT_SUPPORTED)
NAME_SERVER_TEMPLATES = [RequestCode.REGISTER_BROKER, RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.PUT_KV_CONFIG,
                         RequestCode.GET_KV_CONFIG]


def test_the_name_server_answers_hostile_requests_and_keeps_serving(fuzz_cluster):
    hunt(fuzz_cluster, "ns1", CODES, RequestCode.GET_BROKER_CLUSTER_INFO, sorted(NAME_SERVER_TEMPLATES))


@st.composite
def broken_streams(draw) -> bytes:
    frames = draw(st.lists(requests(CODES), min_size=1, max_size=3))
    data = bytearray(b"".join(encode_frame(c) for c in frames))
    kind = draw(st.sampled_from(["random", "truncate", "mutate", "huge-length", "bad-header-length"]))
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=300))
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    if kind == "mutate":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == "huge-length":
        return struct.pack(">ii", draw(st.integers(17 * 1024 * 1024, 2**31 - 1)), 4) + bytes(data)
    return struct.pack(">ii", 8, draw(st.integers(9, 2**24 - 1))) + bytes(8) + bytes(data)


@pytest.mark.parametrize("node, health_code", [("broker-a-0", RequestCode.GET_ALL_TOPIC_CONFIG),
                                               ("ns1", RequestCode.GET_BROKER_CLUSTER_INFO)])
def test_broken_byte_streams_close_one_connection_only(fuzz_cluster, node, health_code):
    address = node_address(fuzz_cluster, node)
    log = NodeLog(fuzz_cluster.tmp / "data" / "logs" / f"{node}.log")
    bystander = Peer(address)  # a connection open all along: others' garbage must not end it

    @LIVE
    @given(broken_streams())
    def one_stream(data):
        send_and_drain(address, data)
        assert "Traceback" not in log.new()
        assert alive(bystander, health_code)

    try:
        one_stream()
    finally:
        bystander.close()
