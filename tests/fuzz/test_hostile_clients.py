"""What a hostile client with a plain remoting socket found, each driven through a real broker
process: a system topic written by a client (and through it a folder outside the data
directory), a compressed batch that inflates past any bound, and a topic name ending in a
newline. Each test failed before its fix."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import pytest
import zstandard

from core.broker.headers import V2_NAMES
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.batch import BatchItem, encode_batch
from formats.compression import compress
from formats.properties import encode_properties
from formats.sysflag import COMPRESSED, COMPRESSION_TYPE_SHIFT, CompressionType
from tests.conftest import running_cluster
from tests.fuzz.peer import Peer

# the RSS a bomb may add to the broker at most: its limit is the store's 4 MiB message size,
# plus the decoder's window and the interpreter's arenas
BOMB_RSS_GROWTH_MAX_MIB = 48


@pytest.fixture(scope="module")
def hostile_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    from tests.conftest import child_env
    with running_cluster(tmp, child_env()) as cluster:
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


def send(topic: str, properties: dict[str, str], body: bytes = b"x", *, code: int = RequestCode.SEND_MESSAGE,
         sysflag: int = 0, queue_id: int = 0) -> RemotingCommand:
    fields = {"producerGroup": "hostile", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": str(queue_id), "sysFlag": str(sysflag), "bornTimestamp": str(int(time.time() * 1000)),
              "flag": "0", "properties": encode_properties(properties), "reconsumeTimes": "0",
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
    finally:
        peer.close()
    assert answer.code == ResponseCode.NO_PERMISSION, (answer.code, answer.remark)
    assert answer.remark == f"Sending message to topic[{topic}] is forbidden."
    # nothing may come of it either: the schedule service's first level is due after 1 s
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert escaped(hostile_cluster) == []
        time.sleep(0.2)


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
