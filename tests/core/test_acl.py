"""ACL without a broker: signatures, address patterns, the policy's answers, the ACL file."""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson
import pytest

from core.acl.file import AclFileError, load_acl, parse_acl
from core.acl.permissions import DENY, PUB, SUB, parse_perm
from core.acl.policy import AddressPattern
from core.acl.requests import request_resources
from core.errors import ConfigError
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials, sign, signature_matches, signed_content

ACL = {
    "globalWhiteRemoteAddresses": ["10.10.103.*"],
    "accounts": [
        {"accessKey": "producer-key", "secretKey": "producer-secret", "defaultTopicPerm": "DENY",
         "defaultGroupPerm": "DENY", "topicPerms": ["Orders=PUB", "Audit=PUB|SUB", "Secret=DENY"],
         "whiteRemoteAddress": "192.168.0.{5,6}"},
        {"accessKey": "consumer-key", "secretKey": "consumer-secret", "defaultTopicPerm": "SUB",
         "defaultGroupPerm": "DENY", "groupPerms": ["billing=SUB"]},
        {"accessKey": "admin-key", "secretKey": "admin-secret", "admin": True},
    ],
}
POLICY = parse_acl(ACL)
PRODUCER = Credentials("producer-key", "producer-secret")
CONSUMER = Credentials("consumer-key", "consumer-secret")


def send(topic: str, body: bytes = b"hello", code: int = RequestCode.SEND_MESSAGE_V2) -> RemotingCommand:
    fields = {"a": "PID", "b": topic, "e": "1", "i": "TAGS\x01x"} if code != RequestCode.SEND_MESSAGE else {
        "producerGroup": "PID", "topic": topic, "queueId": "1"}
    return RemotingCommand(code=code, ext_fields=fields, body=body)


def signed(cmd: RemotingCommand, creds: Credentials) -> RemotingCommand:
    sign(cmd, creds)
    return cmd


def test_the_signature_is_hmac_sha1_of_the_sorted_values_then_the_body():
    cmd = RemotingCommand(code=10, ext_fields={"topic": "T", "OnsChannel": "ALIYUN", "queueId": "3"}, body=b"B")
    sign(cmd, Credentials("ak-123456", "sk-123456"))
    # by field name: AccessKey, OnsChannel, queueId, topic (upper case sorts first, as in Java and C++)
    content = b"ak-123456" + b"ALIYUN" + b"3" + b"T" + b"B"
    assert signed_content(cmd.ext_fields, cmd.body) == content
    expected = base64.b64encode(hmac.new(b"sk-123456", content, hashlib.sha1).digest()).decode()
    assert cmd.ext_fields["Signature"] == expected
    assert signature_matches(cmd, "sk-123456") and not signature_matches(cmd, "sk-654321")
    cmd.body = b"C"  # a changed body no longer matches
    assert not signature_matches(cmd, "sk-123456")


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", ["1.2.3.4", "::1"], []),
    ("10.10.103.*", ["10.10.103.1", "10.10.103.255"], ["10.10.104.1", "::1"]),
    ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.101", "192.168.2.50"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
    ("127.0.0.1,::1", ["127.0.0.1", "::1", "0:0:0:0:0:0:0:1"], ["127.0.0.2"]),
    ("", [], ["127.0.0.1"]),
])
def test_address_patterns(pattern, yes, no):
    p = AddressPattern(pattern)
    assert all(p.matches(a) for a in yes) and not any(p.matches(a) for a in no)


def test_permission_words_read_as_rocketmq_reads_them():
    assert parse_perm("PUB") == PUB and parse_perm("SUB|PUB") == PUB | SUB and parse_perm(" pub | sub ") == PUB | SUB
    assert parse_perm("DENY") == parse_perm("ANY") == parse_perm(None) == parse_perm("nonsense") == DENY


def test_allowed_denied_unsigned_and_badly_signed():
    ip = "127.0.0.1"
    assert POLICY.check(signed(send("Orders"), PRODUCER), ip) is None
    assert POLICY.check(signed(send("Orders", code=RequestCode.SEND_MESSAGE), PRODUCER), ip) is None
    assert "no PUB permission on topic 'Payments'" in POLICY.check(signed(send("Payments"), PRODUCER), ip)
    assert "topic 'Secret'" in POLICY.check(signed(send("Secret"), PRODUCER), ip)
    assert "not signed" in POLICY.check(send("Orders"), ip)
    assert "no account" in POLICY.check(signed(send("Orders"), Credentials("stranger-key", "producer-secret")), ip)
    assert "signature check failed" in POLICY.check(signed(send("Orders"), Credentials("producer-key", "guessed!")), ip)
    tampered = signed(send("Orders"), PRODUCER)
    tampered.body = b"something else"
    assert "signature check failed" in POLICY.check(tampered, ip)
    # batches are checked too (RocketMQ 4.x lets SEND_BATCH_MESSAGE through unchecked)
    assert POLICY.check(signed(send("Payments", code=RequestCode.SEND_BATCH_MESSAGE), PRODUCER), ip) is not None


def test_white_listed_addresses():
    # the global list needs no account at all
    assert POLICY.check(send("Anything"), "10.10.103.7") is None
    # an account's list spares the signature, not the permissions
    unsigned = send("Orders")
    unsigned.ext_fields["AccessKey"] = "producer-key"
    assert POLICY.check(unsigned, "192.168.0.5") is None
    assert "signature check failed" in POLICY.check(unsigned, "192.168.0.7")
    denied = send("Payments")
    denied.ext_fields["AccessKey"] = "producer-key"
    assert "no PUB permission" in POLICY.check(denied, "192.168.0.5")


def test_consumers_need_their_group_and_their_topics():
    ip = "127.0.0.1"
    queue = {"queueId": "0", "queueOffset": "0"}  # a header that parses: only those are judged
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"consumerGroup": "billing", "topic": "Orders",
                                                                      **queue})
    assert POLICY.check(signed(pull, CONSUMER), ip) is None
    other = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"consumerGroup": "audit", "topic": "Orders",
                                                                       **queue})
    assert "group 'audit'" in POLICY.check(signed(other, CONSUMER), ip)
    assert "no SUB permission on topic 'Orders'" in POLICY.check(signed(
        RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"consumerGroup": "billing", "topic": "Orders",
                                                                   **queue}), PRODUCER), ip)
    beat = {"clientID": "c", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "billing", "subscriptionDataSet": [{"topic": "Orders"}, {"topic": "%RETRY%billing"}]}]}
    heartbeat = RemotingCommand(code=RequestCode.HEART_BEAT, body=orjson.dumps(beat))
    assert request_resources(heartbeat) == [("%RETRY%billing", SUB), ("Orders", SUB), ("%RETRY%billing", SUB)]
    assert POLICY.check(signed(heartbeat, CONSUMER), ip) is None
    offsets = RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields={"consumerGroup": "x", "topic": "T",
                                                                                  "queueId": "0"})
    assert "group 'x'" in POLICY.check(signed(offsets, CONSUMER), ip)
    # a consumer sending a message back to its retry topic needs its group, not PUB
    back = send("%RETRY%billing")
    assert POLICY.check(signed(back, CONSUMER), ip) is None


def test_admin_requests_need_an_admin_account():
    create = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={"topic": "New"})
    assert "needs an admin account" in POLICY.check(signed(create, PRODUCER), "127.0.0.1")
    assert POLICY.check(signed(create, Credentials("admin-key", "admin-secret")), "127.0.0.1") is None


def test_a_bad_file_is_refused_with_its_name_and_entry(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n  - accessKey: short\n    secretKey: 12345678\n")
    with pytest.raises(ConfigError, match=r"plain_acl.yml: accounts\[0\]: accessKey and secretKey"):
        load_acl(path)
    path.write_text("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms: [Orders]\n")
    with pytest.raises(ConfigError, match="is not NAME=PERM"):
        load_acl(path)
    path.write_text("accounts: [unclosed\n")
    with pytest.raises(ConfigError, match="is not YAML"):
        load_acl(path)
    with pytest.raises(ConfigError, match="No such file"):
        load_acl(tmp_path / "missing.yml")
    path.write_text("globalWhiteRemoteAddresses:\n  - 10.10.103.*\naccounts:\n  - accessKey: RocketMQ\n"
                    "    secretKey: 12345678\n    defaultTopicPerm: SUB\n    groupPerms:\n      - groupB=PUB|SUB\n")
    policy = load_acl(path)
    assert policy.accounts["RocketMQ"].owned("AnyTopic") == SUB and policy.accounts["RocketMQ"].owned("%RETRY%groupB") == 12


def test_secret_keys_stay_out_of_reprs_and_errors():
    # found: acl.Account's repr held the secret key, so any log line or error showing an account
    # (or the policy holding it) printed it
    shown = [repr(POLICY), str(POLICY), repr(POLICY.accounts["admin-key"]), repr(PRODUCER), str(PRODUCER)]
    for text in shown:
        assert "secret" not in text.replace("secret_key=***", ""), text
    assert "producer-key" in repr(POLICY.accounts["producer-key"])  # the account is still named
    with pytest.raises(AclFileError) as refused:
        parse_acl({"accounts": [{"accessKey": "someone-key", "secretKey": "sh-42x"}]})
    assert "sh-42x" not in str(refused.value)
