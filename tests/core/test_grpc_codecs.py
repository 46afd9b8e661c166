"""The gRPC front door without a server: 5.x messages to and from the stored form, signed
metadata, routes and assignments, and the client records (their bounds and their owners)."""

from __future__ import annotations

import gzip
import hashlib
import hmac

import pytest

from core.acl.permissions import PUB, SUB
from core.acl.policy import Account, AclPolicy
from core.config import ProxySettings
from core.proxy.grpc.auth import Caller, caller_of, check_permission
from core.proxy.grpc.clients import GrpcClients
from core.proxy.grpc.messages import BODY_SIZE_MAX, Refused, incoming, outgoing
from core.proxy.grpc.routes import QueueSpan, assignments, message_queues, queue_spans, writable
from core.remoting.signing import Credentials
from formats import sysflag
from formats.record import decode_record, encode_record
from formats.rocketmq_v2 import messaging_pb2 as pb

NOW_MS = 1_700_000_000_000


def message(**sp) -> pb.Message:
    body = sp.pop("body", b"hello")
    user = sp.pop("user", {})
    return pb.Message(topic=pb.Resource(name="T"), body=body, user_properties=user,
                      system_properties=pb.SystemProperties(message_id=sp.pop("message_id", "ID1"), **sp))


def test_a_5x_message_is_stored_as_a_4x_client_would_store_it_and_read_back_the_same():
    msg = message(tag="TagA", keys=["k1", "k2"], message_group="g1", user={"color": "blue"},
                  delivery_timestamp={"seconds": NOW_MS // 1000 + 5}, trace_context="tc")
    out = outgoing(msg, "10.0.0.9", NOW_MS)
    assert out.properties["TAGS"] == "TagA" and out.properties["KEYS"] == "k1 k2"
    assert out.properties["UNIQ_KEY"] == "ID1" and out.properties["__SHARDINGKEY"] == "g1"
    assert out.properties["TIMER_DELIVER_MS"] == str(NOW_MS + 5000) and out.properties["__BORNHOST"] == "10.0.0.9"
    assert out.properties["PGROUP"] == "T" and out.message_group == "g1" and out.sysflag == 0
    from formats.record import MessageRecord
    stored = decode_record(encode_record(MessageRecord(topic="T", body=out.body, properties=out.properties,
                                                       born_timestamp=NOW_MS, store_timestamp=NOW_MS + 1)))
    back = incoming(stored, "T", receipt_handle="h", delivery_attempt=2)
    sp = back.system_properties
    assert (back.body, sp.tag, list(sp.keys), sp.message_id, sp.message_group) == (b"hello", "TagA", ["k1", "k2"],
                                                                                   "ID1", "g1")
    assert dict(back.user_properties) == {"color": "blue"} and sp.delivery_attempt == 2
    assert sp.body_digest.checksum == hashlib.md5(b"hello").hexdigest().upper()
    assert sp.message_type == pb.DELAY and sp.delivery_timestamp.seconds == NOW_MS // 1000 + 5


def test_a_transactional_message_is_a_prepared_half():
    out = outgoing(message(message_type=pb.TRANSACTION), "h", NOW_MS)
    assert out.transactional and out.properties["TRAN_MSG"] == "true"
    assert sysflag.transaction_type(out.sysflag) == sysflag.TRANSACTION_PREPARED


@pytest.mark.parametrize(("msg", "code"), [
    (message(body=b""), pb.MESSAGE_BODY_EMPTY),
    (message(body=b"x" * (BODY_SIZE_MAX + 1)), pb.MESSAGE_BODY_TOO_LARGE),
    (message(message_id=""), pb.ILLEGAL_MESSAGE_ID),
    (message(tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
    (message(keys=["has space"]), pb.ILLEGAL_MESSAGE_KEY),
    (message(message_group="g" * 64), pb.ILLEGAL_MESSAGE_GROUP),
    (message(user={"UNIQ_KEY": "forged"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (message(trace_context="t\x02PGROUP\x01other"), pb.BAD_REQUEST),
    (message(born_host="h\x02DELAY\x014"), pb.BAD_REQUEST),
    (message(trace_context="t" * 1025), pb.BAD_REQUEST),
    (message(delivery_timestamp={"seconds": NOW_MS // 1000 + 25 * 3600}), pb.ILLEGAL_DELIVERY_TIME),
    (pb.Message(topic=pb.Resource(name="rmq_sys_REVIVE_LOG_x"), body=b"x",
                system_properties=pb.SystemProperties(message_id="a")), pb.ILLEGAL_TOPIC),
    (pb.Message(topic=pb.Resource(name="bad topic"), body=b"x",
                system_properties=pb.SystemProperties(message_id="a")), pb.ILLEGAL_TOPIC),
])
def test_what_rocketmq_refuses_is_refused_with_its_code(msg, code):
    with pytest.raises(Refused) as refused:
        outgoing(msg, "h", NOW_MS)
    assert refused.value.code == code


def test_a_gzip_body_is_inflated_and_bounded_before_it_is_kept():
    assert outgoing(message(body=gzip.compress(b"abc"), body_encoding=pb.GZIP), "h", NOW_MS).body == b"abc"
    bomb = gzip.compress(b"\0" * (BODY_SIZE_MAX + 10))  # a few KiB that inflate past the limit
    with pytest.raises(Refused) as refused:
        outgoing(message(body=bomb, body_encoding=pb.GZIP), "h", NOW_MS)
    assert refused.value.code == pb.MESSAGE_BODY_TOO_LARGE


def signed(ak: str, sk: str, date: str = "20261126T010203Z") -> dict[str, str]:
    signature = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
    return {"x-mq-client-id": "c1", "x-mq-date-time": date,
            "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"}


POLICY = AclPolicy({"alice": Account("alice", "secret-a", topic_perms={"T": PUB}, group_perms={"G": SUB}),
                    "root": Account("root", "secret-r", admin=True)})


def test_signed_metadata_names_the_account_and_a_wrong_secret_is_refused():
    caller = caller_of(signed("alice", "secret-a"), "127.0.0.1", POLICY)
    assert caller.credentials is not None and caller.credentials.access_key == "alice"
    assert "secret-a" not in repr(caller)
    for metadata, code in ((signed("alice", "wrong"), pb.UNAUTHORIZED), (signed("nobody", "x"), pb.UNAUTHORIZED),
                           ({"x-mq-client-id": "c1"}, pb.UNAUTHORIZED), ({}, pb.CLIENT_ID_REQUIRED)):
        with pytest.raises(Refused) as refused:
            caller_of(metadata, "127.0.0.1", POLICY)
        assert refused.value.code == code
    assert caller_of({"x-mq-client-id": "c1"}, "127.0.0.1", None).credentials is None  # ACL off


def test_permissions_follow_the_accounts_file():
    alice = caller_of(signed("alice", "secret-a"), "127.0.0.1", POLICY)
    check_permission(POLICY, alice, topic="T", topic_perm=PUB)
    check_permission(POLICY, alice, group="G")
    with pytest.raises(Refused):
        check_permission(POLICY, alice, topic="T", group="G")  # may publish to T, not subscribe
    check_permission(POLICY, caller_of(signed("root", "secret-r"), "127.0.0.1", POLICY), topic="X", group="Y")


def test_routes_keep_4x_queue_ids_with_their_permissions_and_the_dialled_endpoints():
    spans = queue_spans(b'{"queueDatas":[{"brokerName":"b","readQueueNums":4,"writeQueueNums":2,"perm":6},'
                        b'{"brokerName":"a","readQueueNums":2,"writeQueueNums":2,"perm":4}],"brokerDatas":[]}')
    assert spans == [QueueSpan("a", 2, 2, 4), QueueSpan("b", 4, 2, 6)]
    endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=8081)])
    queues = message_queues("T", spans, endpoints)
    assert [(q.broker.name, q.id, q.permission) for q in queues] == [
        ("a", 0, pb.READ), ("a", 1, pb.READ), ("b", 0, pb.READ_WRITE), ("b", 1, pb.READ_WRITE),
        ("b", 2, pb.READ), ("b", 3, pb.READ)]
    assert all(q.broker.endpoints == endpoints and q.broker.id == 0 for q in queues)
    assert writable(spans) == [("b", 0), ("b", 1)]
    assert [a.message_queue.id for a in assignments("T", spans, endpoints, fifo=False)] == [-1, -1]
    assert [a.message_queue.id for a in assignments("T", spans, endpoints, fifo=True)] == [0, 1, 0, 1, 2, 3]


async def test_client_ids_are_bounded_in_all_and_per_address_and_belong_to_their_account(nursery):
    clients = GrpcClients(nursery, ProxySettings(grpc_clients_max=3, grpc_clients_per_host_max=2))
    alice, bob = Credentials("alice", "secret-a"), Credentials("bob-key", "secret-b")
    clients.get(Caller("a1", "10.0.0.1", alice))
    clients.get(Caller("a2", "10.0.0.1", alice))
    with pytest.raises(Refused, match="grpc_clients_per_host_max") as per_host:
        clients.get(Caller("a3", "10.0.0.1", alice))
    assert per_host.value.code == pb.TOO_MANY_REQUESTS
    clients.get(Caller("b1", "10.0.0.2", bob))
    with pytest.raises(Refused, match="grpc_clients_max") as in_all:
        clients.get(Caller("c1", "10.0.0.3", bob))
    assert in_all.value.code == pb.TOO_MANY_REQUESTS and len(clients) == 3
    # another account naming a1 is refused and changes nothing; alice with a new key takes it over
    for refused in (lambda: clients.get(Caller("a1", "10.0.0.9", bob)), lambda: clients.terminate(Caller("a1", "x", bob))):
        with pytest.raises(Refused, match="another account") as other:
            refused()
        assert other.value.code == pb.FORBIDDEN
    rotated = Credentials("alice", "new-secret")
    assert clients.get(Caller("a1", "10.0.0.1", rotated)).caller.credentials == rotated
    clients.terminate(Caller("a1", "10.0.0.1", rotated))
    assert len(clients) == 2
    clients.get(Caller("c1", "10.0.0.3", bob))  # room again
