"""The ACL's request table (core/acl/requests.py) against the broker's request table: every code a
broker serves is classified, every rule names attributes of its code's declared header type
(core/remoting/request_headers.py), and every code that names topics or groups is refused to an
account without the permissions, whichever field or body names them; docs/security.md shows the
table. That a rule's field is what the handler acts on: tests/core/test_acl_acts_on.py."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from core.acl.file import parse_acl
from core.acl.permissions import PUB, SUB
from core.acl.requests import ADMIN_CODES, NAMES_NOTHING, RULES, request_resources, rules_table
from core.broker.wire.request_names import GROUP_FIELDS, SHORT_GROUP_FIELDS, SHORT_TOPIC_FIELDS, TOPIC_FIELDS
from core.broker.wire.request_table import HANDLERS
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.header_fields import wire_names
from core.remoting.request_headers import HEADER_TYPES
from core.remoting.signing import Credentials, sign

REPO = Path(__file__).resolve().parents[2]
TOPIC, GROUP = "Secret", "secret-readers"
POLICY = parse_acl({"accounts": [
    # may do nothing at all: signs well, owns nothing
    {"accessKey": "nobody-key", "secretKey": "nobody-secret", "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY"},
    # may use exactly TOPIC and GROUP
    {"accessKey": "owner-key", "secretKey": "owner-secret", "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
     "topicPerms": [f"{TOPIC}=PUB|SUB"], "groupPerms": [f"{GROUP}=SUB"]},
]})
NOBODY, OWNER = Credentials("nobody-key", "nobody-secret"), Credentials("owner-key", "owner-secret")

# every body a served request carries names in, naming TOPIC and GROUP
BODIES = {
    RequestCode.HEART_BEAT: {"clientID": "c", "producerDataSet": [], "consumerDataSet": [
        {"groupName": GROUP, "subscriptionDataSet": [{"topic": TOPIC}]}]},
    RequestCode.LOCK_BATCH_MQ: {"consumerGroup": GROUP, "clientId": "c", "mqSet": [
        {"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}]},
    RequestCode.UNLOCK_BATCH_MQ: {"consumerGroup": GROUP, "clientId": "c", "mqSet": [
        {"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}]},
    RequestCode.QUERY_ASSIGNMENT: {"topic": TOPIC, "consumerGroup": GROUP, "clientId": "c", "strategyName": "AVG",
                                   "messageModel": "CLUSTERING"},
    RequestCode.BATCH_ACK_MESSAGE: {"brokerName": "broker-a", "acks": [
        {"c": GROUP, "t": TOPIC, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 1, "b": "AQ=="}]},
}


# well-formed values of every other field a declared header requires, so that the header parses
WELL_FORMED = {"queueId": "0", "queueOffset": "0", "offset": "0", "key": "k", "maxNum": "1", "beginTimestamp": "0",
               "endTimestamp": "1", "commitOffset": "0", "timestamp": "0", "clientId": "c", "maxMsgNums": "1",
               "invisibleTime": "1000", "extraInfo": "0 1 60000 0 0 broker-a 0 0", "recallHandle": "h"}


def well_formed(code: int, **names: str) -> RemotingCommand:
    """A request of ``code`` whose header parses, naming ``names`` (field: value)."""
    return RemotingCommand(code=code, ext_fields={**WELL_FORMED, **names})


def naming_everything(code: int) -> RemotingCommand:
    """A request of ``code`` with every field any handler reads a topic or group from set to
    TOPIC or GROUP (the other fields its header requires well formed), and its body (if it has
    one) naming them."""
    fields = dict(WELL_FORMED)
    fields |= {f: TOPIC for f in (*TOPIC_FIELDS, *SHORT_TOPIC_FIELDS)}
    fields |= {f: GROUP for f in (*GROUP_FIELDS, *SHORT_GROUP_FIELDS)}
    body = orjson.dumps(BODIES[code]) if code in BODIES else b""
    return RemotingCommand(code=code, ext_fields=fields, body=body)


def judged(code: int, creds: Credentials) -> str | None:
    request = naming_everything(code)
    sign(request, creds)
    return POLICY.check(request, "127.0.0.1")


def test_every_request_code_the_broker_serves_has_exactly_one_acl_row():
    for code in HANDLERS:
        rows = [code in RULES, code in ADMIN_CODES, code in NAMES_NOTHING]
        assert rows.count(True) == 1, (f"request {RequestCode(code).name} is served but the ACL has "
                                       f"{'no row' if not any(rows) else 'several rows'} for it (core/acl/requests.py)")
    for code, why in NAMES_NOTHING.items():
        assert why.strip(), f"{RequestCode(code).name}: say why it names nothing"


@pytest.mark.parametrize("code", sorted(RULES), ids=lambda c: RequestCode(c).name)
def test_every_rule_names_attributes_of_its_codes_declared_header_type(code):
    rule, declared = RULES[code], HEADER_TYPES[code]
    attributes = wire_names(declared)
    for field in (*rule.topics, *rule.groups):
        assert field in attributes, f"{RequestCode(code).name}: {field!r} is not an attribute of {declared.__name__}"
    assert rule.topics or rule.groups or rule.body is not None, RequestCode(code).name


def test_a_header_that_does_not_parse_names_nothing_and_the_broker_refuses_it():
    # the proxy's door judges what it forwards: a header the handler never gets names nothing
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"consumerGroup": GROUP, "topic": TOPIC})
    assert request_resources(pull) == []
    assert request_resources(well_formed(RequestCode.PULL_MESSAGE, consumerGroup=GROUP, topic=TOPIC)) == [
        (TOPIC, SUB), (f"%RETRY%{GROUP}", SUB)]


@pytest.mark.parametrize("code", sorted(RULES), ids=lambda c: RequestCode(c).name)
def test_a_request_that_names_topics_or_groups_needs_their_permissions(code):
    refused = judged(code, NOBODY)
    assert refused is not None and "ACL:" in refused, RequestCode(code).name
    assert judged(code, OWNER) is None, RequestCode(code).name  # refused for the names, not by accident
    named = {resource for resource, _ in request_resources(naming_everything(code))}
    assert named & {TOPIC, f"%RETRY%{GROUP}"}, named


@pytest.mark.parametrize("code", sorted(ADMIN_CODES & set(HANDLERS)), ids=lambda c: RequestCode(c).name)
def test_admin_requests_are_refused_to_an_account_that_is_not_admin(code):
    assert "needs an admin account" in judged(code, OWNER)


@pytest.mark.parametrize("code", sorted(NAMES_NOTHING), ids=lambda c: RequestCode(c).name)
def test_requests_that_name_nothing_need_only_a_signature(code):
    assert judged(code, NOBODY) is None


def test_pop_family_rules_name_the_topic_and_group_and_the_topic_a_pop_retry_topic_retries():
    for code in (RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                 RequestCode.NOTIFICATION):
        request = well_formed(code, consumerGroup="g", topic="T")
        assert request_resources(request) == [("T", SUB), ("%RETRY%g", SUB)]
    for retry in ("%RETRY%g_T", "%RETRY%g+T"):  # V1 and V2: the topic retried, not a group "g_T"
        ack = well_formed(RequestCode.ACK_MESSAGE, consumerGroup="g", topic=retry)
        assert request_resources(ack) == [("T", SUB), ("%RETRY%g", SUB)]
    # another group's retry topic is judged as that group's
    foreign = well_formed(RequestCode.ACK_MESSAGE, consumerGroup="g", topic="%RETRY%h_T")
    assert request_resources(foreign) == [("%RETRY%h_T", SUB), ("%RETRY%g", SUB)]
    batch = RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=orjson.dumps({"brokerName": "b", "acks": [
        {"c": "g", "t": "T"}, {"c": "h", "t": "U"}]}))
    assert request_resources(batch) == [("%RETRY%g", SUB), ("T", SUB), ("%RETRY%h", SUB), ("U", SUB)]
    send = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "producers", "b": "T"})
    assert request_resources(send) == [("T", PUB)]  # the producer group carries no permission


def test_a_malformed_body_names_nothing_and_the_handler_refuses_it():
    for code in BODIES:
        assert request_resources(RemotingCommand(code=code, body=b"{not json")) == []


def test_docs_security_shows_the_table():
    doc = (REPO / "docs" / "security.md").read_text()
    assert rules_table() in doc, "docs/security.md must show core.acl.requests.rules_table() as it is:\n" + rules_table()
    for code, why in NAMES_NOTHING.items():
        assert f"| {RequestCode(code).name} ({int(code)}) | {why} |" in doc
