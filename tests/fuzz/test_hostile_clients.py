"""What a hostile client with a plain remoting socket found, each driven through a real broker
process: a system topic written by a client (and through it a folder outside the data
directory), a compressed batch that inflates past any bound, and a topic name ending in a
newline (each test failed before its fix); then a property-based hunt with hostile names,
properties, header fields, declared lengths and compressed bombs, judged by what must hold
whatever a client sends."""

from __future__ import annotations

import collections
import functools
import json
import os
import struct
import time
import zlib
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand, encode_frame
from core.remoting.request_headers import V2_NAMES
from core.topic_names import topic_problem
from formats.batch import BatchItem, encode_batch
from formats.compression import compress
from formats.sysflag import COMPRESSED, COMPRESSION_TYPE_SHIFT, CompressionType
from mqctl.main import app
from tests.conftest import child_env, running_cluster
from tests.fuzz.peer import NodeLog, Peer, send_and_drain

# the RSS a bomb may add to the broker at most: its limit is the store's 4 MiB message size,
# plus the decoder's window and the interpreter's arenas
BOMB_RSS_GROWTH_MAX_MIB = 48


# held pulls answer after this long at most: the hunt's pulls must not wait 15 s each
BROKER_SETTINGS = "long_poll_suspend_max_ms = 300\nshort_polling_ms = 300"


@pytest.fixture(scope="module")
def hostile_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    with running_cluster(tmp, child_env(), broker=BROKER_SETTINGS) as cluster:
        cluster.tmp = tmp
        cluster.status = {row["node"]: row for row in _status(cluster)}
        yield cluster


def _status(cluster) -> list[dict]:
    import json
    done = cluster.mqctl("status", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def broker_address(cluster) -> str:
    return cluster.status["broker-a-0"]["address"]


def broker_pid(cluster) -> int:
    return int(cluster.status["broker-a-0"]["pid"])


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def raw_properties(properties: dict[str, str]) -> str:
    """The properties string as a raw client may write it: separators inside a value too (our
    encoder refuses those; a hostile client has no encoder)."""
    return "".join(f"{name}\x01{value}\x02" for name, value in properties.items())


def send(topic: str, properties: dict[str, str], body: bytes = b"x", *, code: int = RequestCode.SEND_MESSAGE,
         sysflag: int = 0, queue_id: int = 0) -> RemotingCommand:
    fields = {"producerGroup": "hostile", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": str(queue_id), "sysFlag": str(sysflag), "bornTimestamp": str(int(time.time() * 1000)),
              "flag": "0", "properties": raw_properties(properties), "reconsumeTimes": "0",
              "unitMode": "false", "batch": "false"}
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        short = {long: short for short, long in V2_NAMES.items()}
        fields = {short[name]: value for name, value in fields.items()}
    return RemotingCommand(code=code, ext_fields=fields, body=body)


def escaped(cluster) -> list[Path]:
    """Files and folders named like the hostile ones, anywhere outside the broker's own store."""
    return [p for p in cluster.tmp.rglob("*outside*")]


SYSTEM_TOPICS = ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "rmq_sys_wheel_timer"]


@pytest.mark.parametrize("topic", SYSTEM_TOPICS)
def test_a_client_may_not_send_to_a_system_topic(hostile_cluster, topic):
    # found: a send to SCHEDULE_TOPIC_XXXX with REAL_TOPIC=../../../outside was stored, and the
    # schedule service then built data/outside/0/... outside the broker's node directory
    props = {"DELAY": "1", "REAL_TOPIC": "../../../outside", "REAL_QID": "0", "TRAN_MSG": "false"}
    peer = Peer(broker_address(hostile_cluster))
    try:
        answer, = peer.exchange([send(topic, props)])
        assert answer.code == ResponseCode.NO_PERMISSION, (answer.code, answer.remark)
        assert answer.remark == f"Sending message to topic[{topic}] is forbidden."
        # nothing was stored, so nothing can come of it later
        stored, = peer.exchange([RemotingCommand(code=RequestCode.GET_MAX_OFFSET,
                                                 ext_fields={"topic": topic, "queueId": "0"})])
        assert (stored.code, stored.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0")
    finally:
        peer.close()
    assert escaped(hostile_cluster) == []


def zeros_compressed(kind: CompressionType, size: int) -> bytes:
    """``size`` zero bytes compressed with ``kind``, a MiB at a time (never held inflated)."""
    chunk, count = bytes(1024 * 1024), size // (1024 * 1024)
    if kind is CompressionType.ZSTD:
        stream = zstandard.ZstdCompressor(level=3).compressobj()
    elif kind is CompressionType.ZLIB:
        stream = zlib.compressobj(1)
    else:
        import lz4.frame
        stream = lz4.frame.LZ4FrameCompressor()
        return stream.begin() + b"".join(stream.compress(chunk) for _ in range(count)) + stream.flush()
    return b"".join(stream.compress(chunk) for _ in range(count)) + stream.flush()


@pytest.mark.parametrize("kind", list(CompressionType), ids=lambda k: k.name)
def test_a_compressed_batch_that_inflates_past_the_limit_is_refused_within_bounded_memory(hostile_cluster, kind):
    # found: a 16 KB SEND_BATCH_MESSAGE flagged zstd inflated to 512 MiB before the size check,
    # raising the broker's peak memory by about 515 MiB; LZ4 had no limit at all
    bomb = zeros_compressed(kind, 512 * 1024 * 1024)
    assert len(bomb) < 3 * 1024 * 1024
    pid = broker_pid(hostile_cluster)
    before = peak_rss_mib(pid)
    flag = COMPRESSED | (kind << COMPRESSION_TYPE_SHIFT)
    peer = Peer(broker_address(hostile_cluster))
    try:
        answer, = peer.exchange([send("BombTopic", {}, bomb, code=RequestCode.SEND_BATCH_MESSAGE, sysflag=flag)])
        grew = peak_rss_mib(pid) - before
        assert grew < BOMB_RSS_GROWTH_MAX_MIB, f"peak RSS grew by {grew:.0f} MiB"
        assert answer.code == ResponseCode.MESSAGE_ILLEGAL, (answer.code, answer.remark)
        assert answer.remark == f"{kind.name.lower()} body inflates past the 4194304-byte limit"
        # and it keeps serving: a well-formed compressed batch on the same connection is stored
        good = compress(encode_batch([BatchItem(b"fine" * 2000, {"KEYS": "k"})]), kind)
        answer, = peer.exchange([send("BombTopic", {}, good, code=RequestCode.SEND_BATCH_MESSAGE, sysflag=flag)])
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    finally:
        peer.close()


@pytest.mark.parametrize("topic", ["Orders\n", "Orders\r", "Or\nders", "../Orders", "Orders/x", "Orders\x00"])
def test_a_topic_name_with_a_line_end_or_a_path_character_is_refused(hostile_cluster, topic):
    # found: `re.match` with `$` let "Orders\n" through; the broker created a topic and a
    # ConsumeQueue folder whose name ends in a newline
    peer = Peer(broker_address(hostile_cluster))
    try:
        answer, = peer.exchange([send(topic, {})])
    finally:
        peer.close()
    assert answer.code == ResponseCode.SYSTEM_ERROR, (answer.code, answer.remark)
    assert "illegal characters" in answer.remark
    queues = hostile_cluster.tmp / "data" / "broker-a-0" / "consumequeue"
    assert not any("\n" in p.name or "\r" in p.name for p in queues.iterdir())


# ------------------------------------------------------------------ the property-based hunt

MARKER = "mqctl-hostile-marker"  # every path-like hostile value names this, so escapes are found
EXAMPLES = int(os.environ.get("MQ_FUZZ_EXAMPLES", "150"))
HUNT = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# the broker's peak RSS over the whole hunt may pass its warmed-up peak by this much at most:
# a request is bounded by its frame and a batch's inflation by the 4 MiB message size limit
HUNT_RSS_GROWTH_MAX_MIB = 64
VALID_TOPICS = ["HuntTopic", "HuntOther"]
HOSTILE_NAMES = [
    "..", ".", "../" * 6 + MARKER, f"a/../../{MARKER}", f"/tmp/{MARKER}", f"/{MARKER}", f"{MARKER}/x", f"x\x00{MARKER}",
    f"{MARKER}\n", f"\n{MARKER}", f"{MARKER}\r", "x" * 128, "x" * 256, "x" * 5000, f"{MARKER}\u4e2d\u6587",
    f"{MARKER}\U0001f600", "%RETRY%../" + MARKER, "%DLQ%/" + MARKER, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "rmq_sys_" + MARKER, "TBW102", "", " ",
    f"C:\\{MARKER}", f"{MARKER} x", f"{MARKER}.",
]
PATHS = [name for name in HOSTILE_NAMES if "/" in name or "\\" in name or name in ("..", ".")]
names = st.one_of(st.sampled_from(HOSTILE_NAMES), st.sampled_from(VALID_TOPICS),
                  st.text(min_size=1, max_size=12).map(lambda t: MARKER + t))
# where a send goes: hostile names, the hunt's topics, and the system topics only the broker writes
send_topics = st.one_of(names, st.sampled_from(VALID_TOPICS), st.sampled_from(SYSTEM_TOPICS),
                        st.just("SCHEDULE_TOPIC_XXXX"))  # whose messages the broker moves on by themselves
numbers = st.one_of(st.integers(-3, 20), st.sampled_from([2**31 - 1, 2**31, -(2**31), 2**63 - 1, 2**63, -(2**63) - 1]))
values = st.one_of(names, numbers.map(str), st.sampled_from(["", "true", "1", "NaN", "0x10"]))
PROPERTY_NAMES = ["REAL_TOPIC", "REAL_QID", "DELAY", "TRAN_MSG", "KEYS", "TAGS", "UNIQ_KEY", "WAIT", "PGROUP",
                  "RETRY_TOPIC", "CHECK_IMMUNITY_TIME_IN_SECONDS", "MAX_OFFSET", "MIN_OFFSET", "CLUSTER"]


@st.composite
def hostile_properties(draw) -> dict[str, str]:
    props = draw(st.dictionaries(st.sampled_from(PROPERTY_NAMES), values, max_size=5))
    if draw(st.booleans()):  # aimed at the schedule service: due soon or at once, hostile destination
        props.update(REAL_TOPIC=draw(st.one_of(st.sampled_from(PATHS), names)),
                     REAL_QID=str(draw(st.one_of(st.integers(0, 3), numbers))))
        if draw(st.booleans()):
            props["DELAY"] = "1"
        else:
            props.pop("DELAY", None)
    return props


@st.composite
def bombs(draw) -> tuple[bytes, int]:
    """A compressed batch body and its sysflag: a bomb, garbage, or a well-formed small batch."""
    kind = draw(st.sampled_from(list(CompressionType)))
    flag = COMPRESSED | (kind << COMPRESSION_TYPE_SHIFT)
    shape = draw(st.sampled_from(["bomb", "garbage", "good"]))
    if shape == "bomb":
        return bomb(kind), flag
    if shape == "garbage":
        return draw(st.binary(max_size=64)), flag
    items = [BatchItem(draw(st.binary(max_size=32)), draw(hostile_properties())) for _ in range(draw(st.integers(1, 3)))]
    return compress(encode_batch(items), kind), flag


@st.composite
def hostile_requests(draw) -> RemotingCommand:
    which = draw(st.sampled_from(["send", "send", "send", "batch", "pull", "offset", "heartbeat", "lock", "create", "back",
                                  "query", "queue-offset"]))
    # half of them aimed past the name checks, at what lies behind (properties, bodies, queues)
    topic, group = draw(st.one_of(names, st.sampled_from(VALID_TOPICS))), draw(st.one_of(names, st.just("hunters")))
    queue = draw(st.one_of(st.integers(0, 3), numbers))
    if which == "send":
        body = draw(st.binary(max_size=64))
        return send(draw(send_topics), draw(hostile_properties()), body, queue_id=queue,
                    code=draw(st.sampled_from([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])))
    if which == "batch":
        body, flag = draw(bombs())
        return send(draw(st.sampled_from(VALID_TOPICS)) if draw(st.booleans()) else topic, {}, body,
                    code=RequestCode.SEND_BATCH_MESSAGE, sysflag=flag, queue_id=queue)
    if which == "pull":
        return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
            "consumerGroup": group, "topic": topic, "queueId": str(queue), "queueOffset": str(draw(numbers)),
            "maxMsgNums": str(draw(numbers)), "sysFlag": str(draw(st.integers(0, 15))), "commitOffset": "0",
            "suspendTimeoutMillis": "100", "subscription": draw(values), "subVersion": "1"})
    if which == "offset":
        return RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
            "consumerGroup": group, "topic": topic, "queueId": str(queue), "commitOffset": str(draw(numbers))})
    if which == "heartbeat":
        doc = {"clientID": draw(values), "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}]}],
            "producerDataSet": [{"groupName": draw(names)}]}
        return RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(doc).encode())
    if which == "lock":
        doc = {"consumerGroup": group, "clientId": "c", "mqSet": [{"topic": topic, "brokerName": "broker-a",
                                                                    "queueId": queue}]}
        return RemotingCommand(code=draw(st.sampled_from([RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])),
                               body=json.dumps(doc).encode())
    if which == "create":
        return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": topic, "readQueueNums": str(draw(numbers)), "writeQueueNums": str(draw(numbers)),
            "perm": str(draw(numbers))})
    if which == "back":
        return RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields={
            "offset": str(draw(st.sampled_from([0, 1, 2**40]))), "group": group, "delayLevel": str(draw(numbers)),
            "originTopic": topic, "maxReconsumeTimes": "1"})
    if which == "query":
        return RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={
            "topic": topic, "key": draw(values), "maxNum": str(draw(numbers)), "beginTimestamp": "0",
            "endTimestamp": str(2**62)})
    return RemotingCommand(code=draw(st.sampled_from([RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                                                      RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                                      RequestCode.QUERY_CONSUMER_OFFSET])),
                           ext_fields={"topic": topic, "queueId": str(queue), "consumerGroup": group,
                                       "timestamp": str(draw(numbers))})


@functools.cache
def bomb(kind: CompressionType) -> bytes:
    return zeros_compressed(kind, 64 * 1024 * 1024)


@st.composite
def hostile_frames(draw) -> bytes:
    """Frames whose declared lengths lie: huge, negative, past the header, or cut short."""
    frame = bytearray(encode_frame(draw(hostile_requests())))
    kind = draw(st.sampled_from(["huge-length", "negative-length", "huge-header", "cut"]))
    if kind == "huge-length":
        frame[0:4] = struct.pack(">i", draw(st.integers(17 * 1024 * 1024, 2**31 - 1)))
    elif kind == "negative-length":
        frame[0:4] = struct.pack(">i", draw(st.integers(-(2**31), 3)))
    elif kind == "huge-header":
        frame[4:8] = struct.pack(">i", draw(st.integers(len(frame), 2**24 - 1)))
    else:
        frame = frame[: draw(st.integers(1, len(frame) - 1))]
    return bytes(frame)


def outside_marks(cluster, queues: Path) -> list[Path]:
    """Anything named after the marker, anywhere a hostile path could reach, except the
    ConsumeQueue folders of names that are valid topics (checked apart): the whole test folder
    and every ancestor of it (where ../ chains and absolute paths lead)."""
    found = [p for p in cluster.tmp.rglob(f"*{MARKER}*") if not (p.parent == queues and topic_problem(p.name) is None)]
    ancestors = [*cluster.tmp.parents]
    found += [a / MARKER for a in ancestors if (a / MARKER).exists()]
    return found


@pytest.fixture
def hunted_cluster(tmp_path):
    with running_cluster(tmp_path, child_env(), broker=BROKER_SETTINGS) as cluster:
        cluster.tmp = tmp_path
        cluster.status = {row["node"]: row for row in _status(cluster)}
        yield cluster


def wait_schedule_delivered(peer: Peer, node_root: Path, deadline_s: float) -> None:
    """Return once the schedule service has moved on every message of the first delay level
    (1 s; its saved progress reaches the level's queue end): what the hunt made due at once has
    been filed. Later levels fall due after the test."""
    progress = node_root / "config" / "delayOffset.json"
    deadline = time.monotonic() + deadline_s
    while True:
        answer, = peer.exchange([RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={
            "topic": "SCHEDULE_TOPIC_XXXX", "queueId": "0"})])
        end = int(answer.ext_fields.get("offset", "0")) if answer.code == ResponseCode.SUCCESS else 0
        done = json.loads(progress.read_text())["offsetTable"].get("1", 0) if progress.exists() else 0
        if done >= end:
            return
        assert time.monotonic() < deadline, f"the schedule service moved {done} of level 1's {end} messages"
        time.sleep(0.2)


def test_hostile_clients_cannot_escape_the_data_directory_grow_memory_or_damage_the_store(hunted_cluster):
    cluster = hunted_cluster
    pid = broker_pid(cluster)
    address = broker_address(cluster)
    node_root = cluster.tmp / "data" / "broker-a-0"
    log = NodeLog(cluster.tmp / "data" / "logs" / "broker-a-0.log")
    peer = Peer(address)
    try:
        for topic in VALID_TOPICS:  # warm: the hunt's valid topics exist and the segment is mapped
            assert peer.exchange([send(topic, {"KEYS": "warm"})])[0].code == ResponseCode.SUCCESS
    finally:
        peer.close()
    baseline = peak_rss_mib(pid)
    answered: collections.Counter[int] = collections.Counter()
    state = {"peer": Peer(address)}
    # the known ways in, sent every run whatever the hunt draws: a bomb of each kind, and
    # messages the schedule service would move on to a path by itself
    known = [send("HuntTopic", {}, bomb(kind), code=RequestCode.SEND_BATCH_MESSAGE,
                  sysflag=COMPRESSED | (kind << COMPRESSION_TYPE_SHIFT)) for kind in CompressionType]
    known += [send("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC": path, "REAL_QID": "0"}) for path in PATHS]
    answered.update(a.code for a in state["peer"].exchange(known))

    @HUNT
    @given(st.lists(hostile_requests(), min_size=1, max_size=4), st.one_of(st.none(), hostile_frames()))
    def one_round(cmds, frame):
        try:
            answered.update(a.code for a in state["peer"].exchange(cmds))  # every request answered
        except BaseException:
            state["peer"].close()
            state["peer"] = Peer(address)
            raise
        if frame is not None:  # a lying frame on its own connection: answered or cleanly closed
            send_and_drain(address, frame)
        assert "Traceback" not in (text := log.new()), text[-3000:]

    try:
        one_round()
        wait_schedule_delivered(state["peer"], node_root, deadline_s=20)
    finally:
        state["peer"].close()
    assert outside_marks(cluster, node_root / "consumequeue") == []
    queue_dirs = [p.name for p in (node_root / "consumequeue").iterdir()]
    assert all(topic_problem(name) is None for name in queue_dirs), queue_dirs
    grew = peak_rss_mib(pid) - baseline
    assert grew < HUNT_RSS_GROWTH_MAX_MIB, f"the broker's peak RSS grew by {grew:.0f} MiB"
    print(f"hunt: {EXAMPLES} examples, answers by code {dict(answered)}, peak RSS +{grew:.1f} MiB")
    # the hunt reached the handlers: some requests were served, some refused for what they said
    assert answered[ResponseCode.SUCCESS] > 0 and answered[ResponseCode.SYSTEM_ERROR] > 0, answered
    assert answered[ResponseCode.NO_PERMISSION] > 0 and answered[ResponseCode.MESSAGE_ILLEGAL] > 0, answered
    stopped = cluster.mqctl("stop", timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    verified = CliRunner().invoke(app, ["dump", "--verify", str(node_root)])
    assert verified.exit_code == 0, verified.output[-2000:]
    for queue_file in (node_root / "consumequeue").rglob("0" * 20):
        verified = CliRunner().invoke(app, ["dump", "--verify", str(queue_file)])
        assert verified.exit_code == 0, verified.output[-2000:]
