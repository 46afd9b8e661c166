"""The proxy's and the brokers' doors tried as an attacker would, on real processes: POP requests
from raw 4.x frames are held to the ACL (at a broker and through the proxy), so are a stranger's
END_TRANSACTION on another producer's half and a send-back of another topic's message (issue
47), nothing a 5.x client sends becomes a reserved property, a client id cannot be used by
another account, and a 5.x producer's topics need PUB before it is sent their transactions'
check-backs."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import grpc
import pytest
import trio

from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials, sign
from core.topic_names import TRANS_OP_TOPIC
from formats.msgid import decode_offset_msg_id
from formats.properties import encode_properties
from formats.recall import RecallHandle
from formats.record import decode_records
from formats.rocketmq_v2 import messaging_pb2 as pb
from tests.conftest import Cluster, child_env, running_cluster
from tests.interop.grpc_raw import RawGrpc, settings_publishing
from tests.interop.test_proxy_failover import wait_for
from tests.mqctl.test_acl_cluster import max_offset

ACL_FILE = """\
accounts:
  - accessKey: reader-key          # may read Public as the group readers, nothing else
    secretKey: reader-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Public=SUB]
    groupPerms: [readers=SUB]
  - accessKey: producer-key        # may publish to Orders, nothing else
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=PUB]
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"""
READER = Credentials("reader-key", "reader-secret")
ADMIN = Credentials("admin-key", "admin-secret")
PRODUCER = Credentials("producer-key", "producer-secret")
PRODUCER_ACCOUNT = ("producer-key", "producer-secret")
READER_ACCOUNT = ("reader-key", "reader-secret")


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[Cluster]:
    """ACL on, one broker, a proxy with a gRPC door; open transactions are checked after 1 s."""
    where = tmp_path_factory.mktemp("secure")
    (where / "plain_acl.yml").write_text(ACL_FILE)
    acl = 'enabled = true\nfile = "plain_acl.yml"\naccess_key = "admin-key"\nsecret_key = "admin-secret"'
    with running_cluster(where, child_env(), acl=acl, proxies=1, grpc=True,
                         broker="transaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000") as cluster:
        for topic in ("Secret", "Public", "Orders"):
            assert cluster.mqctl("topic", "create", topic).returncode == 0
        yield cluster


def addresses(cluster: Cluster) -> tuple[str, str]:
    """The broker's address, and the proxy's door for broker-a (the port after the proxy's)."""
    status = [json.loads(line) for line in cluster.mqctl("status", "--json").stdout.splitlines()]
    broker = next(r["address"] for r in status if r.get("role") == "master")
    host, port = cluster.proxies[0].rsplit(":", 1)
    return broker, f"{host}:{int(port) + 1}"


def signed(request: RemotingCommand, creds: Credentials) -> RemotingCommand:
    sign(request, creds)
    return request


def pop(topic: str, group: str = "readers", poll_ms: int = 0) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields={
        "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "32", "invisibleTime": "60000",
        "pollTime": str(poll_ms), "bornTime": "0", "initMode": "0", "expType": "TAG", "exp": "*"})


async def test_pop_requests_need_sub_on_the_topic_and_the_group_at_the_broker_and_through_the_proxy(secure):
    for topic in ("Secret", "Public"):
        assert secure.mqctl("send", topic, f"for {topic}", "--count", "2").returncode == 0
    broker, door = addresses(secure)
    async with open_remoting_client() as client:
        # the admin account pops Secret as the readers' group: real receipt handles to ack with
        popped = await client.invoke(broker, signed(pop("Secret"), ADMIN))
        assert popped.code == ResponseCode.SUCCESS, popped.remark
        record = decode_records(popped.body)[0]
        ext = popped.ext_fields
        start = ext["startOffsetInfo"].split(";")[0].split()[2]
        handle = (f"{start} {ext['popTime']} {ext['invisibleTime']} {ext['reviveQid']} 0 broker-a {record.queue_id} "
                  f"{record.queue_offset}")
        ack_fields = {"consumerGroup": "readers", "topic": "Secret", "queueId": str(record.queue_id),
                      "extraInfo": handle, "offset": str(record.queue_offset)}
        batch = {"brokerName": "broker-a", "acks": [{
            "c": "readers", "t": "Secret", "r": "0", "so": int(start), "q": record.queue_id,
            "rq": int(ext["reviveQid"]), "pt": int(ext["popTime"]), "it": 60000,
            "b": base64.b64encode(bytes([1 << (record.queue_offset - int(start))])).decode()}]}
        def hostile() -> dict[str, RemotingCommand]:
            return {
                "POP_MESSAGE": pop("Secret"),
                "NOTIFICATION": RemotingCommand(code=RequestCode.NOTIFICATION, ext_fields={
                    "consumerGroup": "readers", "topic": "Secret", "queueId": "-1", "pollTime": "0", "bornTime": "0"}),
                "ACK_MESSAGE": RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=dict(ack_fields)),
                "CHANGE_MESSAGE_INVISIBLETIME": RemotingCommand(code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                                                ext_fields=dict(ack_fields, invisibleTime="1000")),
                "BATCH_ACK_MESSAGE": RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE,
                                                     body=json.dumps(batch).encode()),
            }

        stored = max_offset(secure)
        for where in (broker, door):
            for name, request in hostile().items():
                answer = await client.invoke(where, signed(request, READER))
                assert answer.code == ResponseCode.NO_PERMISSION, (where, name, answer.code, answer.remark)
                assert "no SUB permission on topic 'Secret'" in answer.remark, (where, name, answer.remark)
        # nothing refused wrote a checkpoint or an ack record
        assert max_offset(secure) == stored
        for where in (broker, door):  # what the account may read it reads: the same group on Public
            allowed = await client.invoke(where, signed(pop("Public"), READER))
            assert allowed.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), allowed.remark
        assert max_offset(secure) > stored  # that POP's checkpoint


def raw_send(topic: str, body: bytes, **properties: str) -> RemotingCommand:
    """SEND_MESSAGE to queue 0 of ``topic``, as a stock producer sends it."""
    return RemotingCommand(code=RequestCode.SEND_MESSAGE, body=body, ext_fields={
        "producerGroup": properties.get("PGROUP", "PG"), "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "4" if "TRAN_MSG" in properties else "0",
        "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": encode_properties({"WAIT": "true", **properties}), "reconsumeTimes": "0"})


async def queue_end(client, broker: str, topic: str) -> int:
    """``topic``'s queue 0 max offset, asked as the admin."""
    answer = await client.invoke(broker, signed(RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={
        "topic": topic, "queueId": "0"}), ADMIN))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return int(answer.ext_fields["offset"])


async def queue_bodies(client, broker: str, topic: str) -> list[bytes]:
    answer = await client.invoke(broker, signed(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": "auditors", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "0", "suspendTimeoutMillis": "0"}), ADMIN))
    return [r.body for r in decode_records(answer.body)] if answer.code == ResponseCode.SUCCESS else []


async def topic_names(client, broker: str) -> set[str]:
    answer = await client.invoke(broker, signed(RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG), ADMIN))
    return set(json.loads(answer.body)["topicConfigTable"])


async def test_a_stranger_cannot_end_another_producers_transaction(secure):
    """Issue 47: END_TRANSACTION named a topic field its handler never read, and the producer
    group was checked only when sent. Now the half found at the offsets is checked as a send to
    its real topic: the reader (no PUB on Orders) is refused with and without the owner's group,
    at the broker and through the proxy's door, and the half stays open for its owner."""
    broker, door = addresses(secure)
    uniq = "47" * 16
    async with open_remoting_client() as client:
        half = await client.invoke(broker, signed(raw_send("Orders", b"owner's order", TRAN_MSG="true",
                                                           PGROUP="order-makers", UNIQ_KEY=uniq), PRODUCER))
        assert half.code == ResponseCode.SUCCESS, half.remark

        def end(group: str | None, decision: str = "8") -> RemotingCommand:
            fields = {"tranStateTableOffset": half.ext_fields["queueOffset"], "commitOrRollback": decision,
                      "commitLogOffset": str(decode_offset_msg_id(half.ext_fields["msgId"]).phys_offset),
                      "fromTransactionCheck": "false", "msgId": uniq, "transactionId": uniq}
            return RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=fields | (
                {"producerGroup": group} if group is not None else {}))

        orders, ops = await queue_end(client, broker, "Orders"), await queue_end(client, broker, TRANS_OP_TOPIC)
        for where in (broker, door):
            for group in ("order-makers", "readers"):  # the owner's group, and another
                for decision in ("8", "12"):
                    answer = await client.invoke(where, signed(end(group, decision), READER))  # two-way: answered
                    assert answer.code == ResponseCode.NO_PERMISSION, (where, group, answer.code, answer.remark)
                    assert "no PUB permission on topic 'Orders'" in answer.remark, answer.remark
            missing = await client.invoke(where, signed(end(None), READER))
            assert missing.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in missing.remark, missing.remark
        # nothing was decided: no message in Orders, no op record, and the owner still can
        assert (await queue_end(client, broker, "Orders"), await queue_end(client, broker, TRANS_OP_TOPIC)) == (orders, ops)
        assert b"owner's order" not in await queue_bodies(client, broker, "Orders")
        wrong = await client.invoke(broker, signed(end("other-makers"), PRODUCER))
        assert wrong.code == ResponseCode.SYSTEM_ERROR and "producer group wrong" in wrong.remark, wrong.remark
        committed = await client.invoke(door, signed(end("order-makers"), PRODUCER))
        assert committed.code == ResponseCode.SUCCESS, committed.remark
        assert (await queue_bodies(client, broker, "Orders")).count(b"owner's order") == 1


async def test_a_send_back_needs_sub_on_the_topic_of_the_message_it_copies(secure):
    """Issue 47: CONSUMER_SEND_MSG_BACK copied the message at any CommitLog offset into the
    caller's own retry topic or DLQ, whatever topic it came from. The reader (SUB on Public and
    its group readers, nothing on Secret) is refused another topic's message, at the broker and
    through the proxy's door, and nothing lands in its retry topic or DLQ; a message of its
    group's own %RETRY% topic, and one of Public, it still sends back."""
    broker, door = addresses(secure)
    retry, dead = "%RETRY%readers", "%DLQ%readers"
    async with open_remoting_client() as client:
        offsets = {}
        for topic in ("Secret", "Public", retry):  # the admin may send anywhere, the group's retry topic too
            sent = await client.invoke(broker, signed(raw_send(topic, f"back from {topic}".encode()), ADMIN))
            assert sent.code == ResponseCode.SUCCESS, (topic, sent.remark)
            offsets[topic] = decode_offset_msg_id(sent.ext_fields["msgId"]).phys_offset

        def back(topic: str, delay: str) -> RemotingCommand:
            return RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields={
                "group": "readers", "offset": str(offsets[topic]), "delayLevel": delay, "originTopic": "Public",
                "originMsgId": "", "unitMode": "false", "maxReconsumeTimes": "16"})

        before = {t: await queue_end(client, broker, t) for t in (retry, dead)}
        topics = await topic_names(client, broker)
        for where in (broker, door):
            for delay in ("0", "-1"):  # to the retry topic (delayed), or straight to the DLQ
                answer = await client.invoke(where, signed(back("Secret", delay), READER))
                assert answer.code == ResponseCode.NO_PERMISSION, (where, delay, answer.code, answer.remark)
                assert "no SUB permission on topic 'Secret'" in answer.remark, answer.remark
        assert {t: await queue_end(client, broker, t) for t in (retry, dead)} == before
        assert (await topic_names(client, broker)) - topics == set(), "a refused send-back created a topic"
        for topic, where in ((retry, broker), ("Public", door)):
            answer = await client.invoke(where, signed(back(topic, "-1"), READER))
            assert answer.code == ResponseCode.SUCCESS, (topic, answer.remark)
        dead_letters = await queue_bodies(client, broker, dead)
        assert {b"back from %RETRY%readers", b"back from Public"} <= set(dead_letters)
        assert b"back from Secret" not in dead_letters


def send_request(topic: str, message_id: str, **system: object) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=topic), body=b"5x body",
        system_properties=pb.SystemProperties(message_id=message_id, **system))])


def test_nothing_a_5x_producer_sends_becomes_a_reserved_property(secure):
    """trace_context and born_host went into the stored properties as they came: their \\x01/\\x02
    would plant UNIQ_KEY, PGROUP, DELAY or a far TIMER_DELIVER_MS."""
    planted = {"trace_context": "t\x02PGROUP\x01other-producers", "born_host": "10.0.0.1\x02DELAY\x014"}
    stored = max_offset(secure)
    with RawGrpc(secure.grpc[0]) as door:
        for field, value in planted.items():
            answer = door.unary("SendMessage", send_request("Orders", f"ID-{field}", **{field: value}),
                                pb.SendMessageResponse, "planter-1", PRODUCER_ACCOUNT)
            assert answer.status.code == pb.BAD_REQUEST and field in answer.status.message, (field, answer.status)
        assert max_offset(secure) == stored  # nothing was stored
        timer = {"trace_context": "t\x02TIMER_DELIVER_MS\x01" + str(int(time.time() * 1000) + 30 * 86400_000)}
        answer = door.unary("SendMessage", send_request("Orders", "ID-timer", **timer), pb.SendMessageResponse,
                            "planter-1", PRODUCER_ACCOUNT)
        assert answer.status.code == pb.BAD_REQUEST, answer.status
        fine = door.unary("SendMessage", send_request("Orders", "ID-fine", trace_context="00-abc-def-01",
                                                      born_host="10.0.0.1"),
                          pb.SendMessageResponse, "planter-1", PRODUCER_ACCOUNT)
        assert fine.status.code == pb.OK, fine.status
        door.unary("NotifyClientTermination", pb.NotifyClientTerminationRequest(), pb.NotifyClientTerminationResponse,
                   "planter-1", PRODUCER_ACCOUNT)
    assert max_offset(secure) > stored


def transactional(topic: str, message_id: str) -> pb.SendMessageRequest:
    return send_request(topic, message_id, message_type=pb.TRANSACTION,
                        orphaned_transaction_recovery_duration={"seconds": 1})


def check_back_within(stream, deadline_s: float) -> pb.RecoverOrphanedTransactionCommand | None:
    """The next check-back on ``stream`` (skipping other commands) within ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while (left := end - time.monotonic()) > 0:
        command = stream.next(left)
        if command is None:
            return None
        assert isinstance(command, pb.TelemetryCommand), command
        if command.HasField("recover_orphaned_transaction_command"):
            return command.recover_orphaned_transaction_command
    return None


def open_producer(door: RawGrpc, client_id: str, account: tuple[str, str], topic: str):
    stream = door.telemetry(client_id, account)
    stream.start_reading()
    stream.send(settings_publishing(topic))
    applied = stream.next(15)
    assert isinstance(applied, pb.TelemetryCommand), applied
    return stream, applied


def test_a_client_id_in_use_belongs_to_its_account(secure):
    """Another account naming a producer's client id can neither end its session nor take its
    record; the producer's check-backs keep coming."""
    with RawGrpc(secure.grpc[0]) as door:
        victim, applied = open_producer(door, "victim-1", PRODUCER_ACCOUNT, "Orders")
        assert applied.status.code == pb.OK, applied.status
        try:
            sent = door.unary("SendMessage", transactional("Orders", "TX-victim"), pb.SendMessageResponse,
                              "victim-1", PRODUCER_ACCOUNT)
            assert sent.status.code == pb.OK, sent.status
            for method, request, answer_type in (
                    ("NotifyClientTermination", pb.NotifyClientTerminationRequest(), pb.NotifyClientTerminationResponse),
                    ("Heartbeat", pb.HeartbeatRequest(client_type=pb.PRODUCER), pb.HeartbeatResponse)):
                answer = door.unary(method, request, answer_type, "victim-1", READER_ACCOUNT)
                assert answer.status.code == pb.FORBIDDEN and "another account" in answer.status.message, \
                    (method, answer.status)
            check = check_back_within(victim, 20)
            assert check is not None and check.transaction_id, "the victim lost its check-backs"
            ended = door.unary("EndTransaction", pb.EndTransactionRequest(
                topic=pb.Resource(name="Orders"), message_id="TX-victim", transaction_id=check.transaction_id,
                resolution=pb.ROLLBACK, source=pb.SOURCE_SERVER_CHECK),
                pb.EndTransactionResponse, "victim-1", PRODUCER_ACCOUNT)
            assert ended.status.code == pb.OK, ended.status
            # its own account may end it
            mine = door.unary("NotifyClientTermination", pb.NotifyClientTerminationRequest(),
                              pb.NotifyClientTerminationResponse, "victim-1", PRODUCER_ACCOUNT)
            assert mine.status.code == pb.OK, mine.status
        finally:
            victim.close()


def test_a_5x_producers_topics_need_pub_before_it_gets_their_check_backs(secure):
    """Settings naming a topic the account may not publish to are refused: the proxy would
    register the client as that topic's producer, and brokers send producers the half messages."""
    with RawGrpc(secure.grpc[0]) as door:
        spy, refused = open_producer(door, "spy-1", READER_ACCOUNT, "Orders")
        producer, applied = open_producer(door, "producer-2", PRODUCER_ACCOUNT, "Orders")
        try:
            assert refused.status.code == pb.FORBIDDEN and "no PUB permission on topic 'Orders'" in \
                refused.status.message, refused.status
            assert applied.status.code == pb.OK, applied.status
            sent = door.unary("SendMessage", transactional("Orders", "TX-2"), pb.SendMessageResponse,
                              "producer-2", PRODUCER_ACCOUNT)
            assert sent.status.code == pb.OK, sent.status
            check = check_back_within(producer, 20)
            assert check is not None and check.message.body == b"5x body"
            assert check_back_within(spy, 3) is None, "the spy was sent a half message"
            door.unary("EndTransaction", pb.EndTransactionRequest(
                topic=pb.Resource(name="Orders"), message_id="TX-2", transaction_id=check.transaction_id,
                resolution=pb.ROLLBACK, source=pb.SOURCE_SERVER_CHECK), pb.EndTransactionResponse, "producer-2",
                PRODUCER_ACCOUNT)
            # and the route query of a topic the account may neither publish to nor read is refused too
            route = door.unary("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="Secret"), endpoints=pb.Endpoints(
                scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)])), pb.QueryRouteResponse,
                "producer-2", PRODUCER_ACCOUNT)
            assert route.status.code == pb.FORBIDDEN and "Secret" in route.status.message, route.status
        finally:
            spy.close()
            producer.close()


# --------------------------------------------------------------------------- bounds

@pytest.fixture(scope="module")
def bounded(tmp_path_factory) -> Iterator[Cluster]:
    """Tiny limits, to be hit: 2 held requests per broker connection, 4 gRPC calls at once, 3
    5.x clients per address, 1 telemetry stream per client, 2 commands waiting per stream."""
    where = tmp_path_factory.mktemp("bounded")
    proxy = ("grpc_calls_max = 4\ngrpc_clients_per_host_max = 3\ngrpc_streams_per_client_max = 1\n"
             "telemetry_outbox_max = 2")
    with running_cluster(where, child_env(), proxies=1, grpc=True, proxy=proxy,
                         broker="held_pulls_per_connection_max = 2") as cluster:
        assert cluster.mqctl("topic", "create", "Quiet").returncode == 0
        yield cluster


def proxy_table(cluster: Cluster) -> dict[str, str]:
    async def ask() -> dict[str, str]:
        async with open_remoting_client() as client:
            answer = await client.invoke(cluster.proxies[0], RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
            return json.loads(answer.body)["table"]
    return trio.run(ask)


def receive(group: str = "quiet-readers", poll_s: int = 4) -> pb.ReceiveMessageRequest:
    return pb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=1, invisible_duration={"seconds": 30},
        long_polling_timeout={"seconds": poll_s}, message_queue=pb.MessageQueue(
            topic=pb.Resource(name="Quiet"), id=-1, broker=pb.Broker(name="broker-a")))


def terminate(door: RawGrpc, *client_ids: str) -> None:
    for client_id in client_ids:
        door.unary("NotifyClientTermination", pb.NotifyClientTerminationRequest(), pb.NotifyClientTerminationResponse,
                   client_id)


async def test_polling_pops_and_notifications_count_against_a_connections_held_requests(bounded):
    broker, _ = addresses(bounded)
    answers: list[RemotingCommand] = []
    async with open_remoting_client() as client, trio.open_nursery() as nursery:
        async def one(request: RemotingCommand) -> None:
            answers.append(await client.invoke(broker, request, timeout_s=20))
        for _ in range(3):  # one connection: two may wait, the third is answered at once
            nursery.start_soon(one, pop("Quiet", "quiet-readers", poll_ms=3000))
        with trio.fail_after(2):
            while not answers:
                await trio.sleep(0.01)
        assert answers[0].code == ResponseCode.POLLING_FULL and "held_pulls_per_connection_max" in answers[0].remark
        notified = await client.invoke(broker, RemotingCommand(code=RequestCode.NOTIFICATION, ext_fields={
            "consumerGroup": "quiet-readers", "topic": "Quiet", "queueId": "-1", "pollTime": "3000", "bornTime": "0"}),
            timeout_s=20)
        assert notified.ext_fields.get("pollingFull") == "true" and notified.ext_fields.get("hasMsg") == "false"
    assert sorted(a.code for a in answers) == sorted([ResponseCode.POLLING_FULL] + [ResponseCode.POLLING_TIMEOUT] * 2)
    # once they answered, the connection may hold again
    async with open_remoting_client() as client:
        again = await client.invoke(broker, pop("Quiet", "quiet-readers", poll_ms=200))
        assert again.code == ResponseCode.POLLING_TIMEOUT


def test_grpc_calls_in_progress_and_clients_per_address_are_bounded(bounded):
    with RawGrpc(bounded.grpc[0]) as door:
        try:
            # four long-polling receives (two clients, two each: each client's upstream connection
            # may hold two): the proxy's limit of calls in progress
            waiting = [door.receive_future(receive(), f"poller-{i % 2}") for i in range(4)]
            wait_for(lambda: proxy_table(bounded).get("grpcCallsNow") == "4", 10, "four calls in progress")
            route = pb.QueryRouteRequest(topic=pb.Resource(name="Quiet"), endpoints=pb.Endpoints(
                scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)]))
            busy = door.unary("QueryRoute", route, pb.QueryRouteResponse, "poller-0")
            assert busy.status.code == pb.TOO_MANY_REQUESTS and "grpc_calls_max" in busy.status.message, busy.status
            for frames in waiting:
                assert [f.status.code for f in frames if f.HasField("status")] == [pb.MESSAGE_NOT_FOUND]
            assert door.unary("QueryRoute", route, pb.QueryRouteResponse, "poller-0").status.code == pb.OK
            # a third client from this address still fits; a fourth does not
            assert door.unary("QueryRoute", route, pb.QueryRouteResponse, "third").status.code == pb.OK
            fourth = door.unary("QueryRoute", route, pb.QueryRouteResponse, "fourth")
            assert fourth.status.code == pb.TOO_MANY_REQUESTS and "grpc_clients_per_host_max" in fourth.status.message
            # a client's receives beyond what its broker connection may hold: POLLING_FULL there
            held = [door.receive_future(receive(poll_s=3), "poller-0") for _ in range(3)]
            codes = sorted(f.status.code for frames in held for f in frames if f.HasField("status"))
            assert codes == sorted([pb.TOO_MANY_REQUESTS, pb.MESSAGE_NOT_FOUND, pb.MESSAGE_NOT_FOUND]), codes
        finally:
            terminate(door, "poller-0", "poller-1", "third")
        wait_for(lambda: proxy_table(bounded).get("grpcClients") == "0", 10, "the clients gone")


def test_telemetry_streams_per_client_and_their_waiting_commands_are_bounded(bounded):
    with RawGrpc(bounded.grpc[0]) as door:
        first = door.telemetry("streamer")
        first.start_reading()
        first.send(settings_publishing("Quiet"))
        assert isinstance(first.next(10), pb.TelemetryCommand)
        second = door.telemetry("streamer")
        second.start_reading()
        refused = second.next(10)
        assert isinstance(refused, grpc.RpcError) and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        first.close()
        second.close()

        # a client that writes settings and never reads the answers: the stream's outbox keeps two
        silent = door.telemetry("silent")
        big = settings_publishing("Quiet")
        big.settings.user_agent.platform = "x" * 60_000  # each answer copies it: the client's window fills
        dropped_before = int(proxy_table(bounded).get("grpcTelemetryDropped", "0"))
        for _ in range(200):
            silent.send(big)
        wait_for(lambda: int(proxy_table(bounded).get("grpcTelemetryDropped", "0")) > dropped_before, 20,
                   "telemetry answers dropped")
        silent.close()
        terminate(door, "streamer", "silent")


def test_every_rpc_that_names_a_topic_or_group_is_refused_without_its_permission(secure):
    """The gRPC door's own walk of its request table (the service in our .proto): each RPC sent
    naming a topic or group the account may not use is refused FORBIDDEN; the one that names
    neither (NotifyClientTermination names only the client, its own) is held to its owner."""
    handle = "0 1 60000 0 0 broker-a 0 0 0"  # well formed; checked only after the permissions
    secret, group = pb.Resource(name="Secret"), pb.Resource(name="readers")
    queue = pb.MessageQueue(topic=secret, id=-1, broker=pb.Broker(name="broker-a"))
    endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)])
    unary = {
        "QueryRoute": (pb.QueryRouteRequest(topic=secret, endpoints=endpoints), pb.QueryRouteResponse),
        "Heartbeat": (pb.HeartbeatRequest(group=pb.Resource(name="writers"), client_type=pb.SIMPLE_CONSUMER),
                      pb.HeartbeatResponse),
        "SendMessage": (send_request("Secret", "ID-walk"), pb.SendMessageResponse),
        "QueryAssignment": (pb.QueryAssignmentRequest(topic=secret, group=group, endpoints=endpoints),
                            pb.QueryAssignmentResponse),
        "AckMessage": (pb.AckMessageRequest(group=group, topic=secret, entries=[pb.AckMessageEntry(
            message_id="m", receipt_handle=handle)]), pb.AckMessageResponse),
        "ForwardMessageToDeadLetterQueue": (pb.ForwardMessageToDeadLetterQueueRequest(
            group=group, topic=secret, receipt_handle=handle, message_id="m"), pb.ForwardMessageToDeadLetterQueueResponse),
        "EndTransaction": (pb.EndTransactionRequest(topic=secret, message_id="m", transaction_id="t",
                                                    resolution=pb.COMMIT), pb.EndTransactionResponse),
        "RecallMessage": (pb.RecallMessageRequest(topic=secret, recall_handle=RecallHandle(
            "Secret", "broker-a", 2**40, "U").text()), pb.RecallMessageResponse),
        "ChangeInvisibleDuration": (pb.ChangeInvisibleDurationRequest(
            group=group, topic=secret, receipt_handle=handle, invisible_duration={"seconds": 30}),
            pb.ChangeInvisibleDurationResponse),
    }
    streams = {"ReceiveMessage", "Telemetry"}
    owner_only = {"NotifyClientTermination"}
    served = {m.name for m in pb.DESCRIPTOR.services_by_name["MessagingService"].methods}
    assert served == set(unary) | streams | owner_only, "an RPC of the service has no row in this walk"
    with RawGrpc(secure.grpc[0]) as door:
        for name, (request, answer_type) in unary.items():
            answer = door.unary(name, request, answer_type, "walker-1", READER_ACCOUNT)
            assert answer.status.code == pb.FORBIDDEN and "permission" in answer.status.message, (name, answer.status)
        frames = list(door.receive_future(pb.ReceiveMessageRequest(
            group=group, message_queue=queue, invisible_duration={"seconds": 30}), "walker-1", READER_ACCOUNT))
        assert frames[0].status.code == pb.FORBIDDEN, frames[0]
        stream, refused = open_producer(door, "walker-1", READER_ACCOUNT, "Secret")
        stream.close()
        assert refused.status.code == pb.FORBIDDEN, refused.status
        mine = door.unary("NotifyClientTermination", pb.NotifyClientTerminationRequest(),
                          pb.NotifyClientTerminationResponse, "walker-1", READER_ACCOUNT)
        assert mine.status.code == pb.OK  # its own id (another account's: test_a_client_id_in_use_...)


def test_hostile_http2_gets_goaway_and_the_door_keeps_serving(bounded):
    """Bytes no gRPC client sends, straight to the gRPC port: each connection is ended (a GOAWAY
    where it got as far as HTTP/2) and the next client is served."""
    import random
    import socket

    from formats import http2 as h2
    from formats.hpack import encode_literal

    host, port = bounded.grpc[0].rsplit(":", 1)
    headers = b"".join(encode_literal(k, v) for k, v in [(b":method", b"POST"), (b":path", b"/x/y"),
                                                         (b"content-type", b"application/grpc")])
    rng = random.Random(34)
    hostile = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        h2.PREFACE + h2.frame(h2.DATA, 0, 1, b"x" * 20_000),  # past the frame size
        h2.PREFACE + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, b"\xff\xff\xff\xff\xff\x7f"),  # bad HPACK
        h2.PREFACE + h2.frame(h2.HEADERS, 0, 1, headers) + h2.frame(h2.DATA, 0, 1, b"x"),  # no CONTINUATION
        h2.PREFACE + h2.frame(h2.WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff") * 2,  # window past 2^31-1
        h2.PREFACE + h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, headers)
        + h2.frame(h2.DATA, 0, 3, b"late"),  # DATA on an idle stream
    ] + [h2.PREFACE + bytes(rng.randrange(256) for _ in range(rng.randrange(9, 400))) for _ in range(20)]
    for i, data in enumerate(hostile):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        kinds, pos = [], 0
        while pos + h2.FRAME_HEADER_SIZE <= len(answer):
            length, kind, _, _ = h2.parse_header(answer, pos)
            kinds.append(kind)
            pos += h2.FRAME_HEADER_SIZE + length
        if 1 <= i <= 5:  # broken HTTP/2: our SETTINGS first, and a GOAWAY
            assert kinds[0] == h2.SETTINGS and h2.GOAWAY in kinds, (i, kinds)
    route = pb.QueryRouteRequest(topic=pb.Resource(name="Quiet"), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)]))
    with RawGrpc(bounded.grpc[0]) as door:
        assert door.unary("QueryRoute", route, pb.QueryRouteResponse, "after-hostile").status.code == pb.OK
        terminate(door, "after-hostile")
