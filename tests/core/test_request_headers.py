"""The declared header types (core/remoting/request_headers.py): one per request code the broker
serves, frozen and slotted; the hand-read ones (sends, pulls) read what their declarations say;
and no handler reads a request's header fields but through its declared type."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from core.broker.wire.request_table import HANDLERS
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.header_fields import HeaderFieldError, RequestHeader, parse_declared, wire_names
from core.remoting.pop_headers import AckHeader, NotificationHeader, PopHeader
from core.remoting.request_headers import (
    HEADER_TYPES,
    V2_NAMES,
    EndTransactionHeader,
    PullHeader,
    SendHeader,
    wire_name,
)

REPO = Path(__file__).resolve().parents[2]
HANDLER_ROOM = REPO / "core" / "broker"
# reads header fields by name before any handler runs, whatever the code: the name check
RAW_FIELD_READERS = {"core/broker/wire/request_names.py"}


def test_every_code_the_broker_serves_has_a_declared_header_type():
    assert set(HEADER_TYPES) == set(HANDLERS)
    for code, header_type in HEADER_TYPES.items():
        assert issubclass(header_type, RequestHeader), RequestCode(code).name
        params = header_type.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen and "__slots__" in header_type.__dict__, header_type.__name__


def raw_field_reads(source: str) -> list[str]:
    """``request.ext_fields`` / ``request.field(...)`` in ``source``, where ``request`` is a
    parameter annotated RemotingCommand or any name ``request``: what a handler must not do."""
    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
        requests = {"request"} | {a.arg for a in args if a.annotation is not None
                                  and "RemotingCommand" in ast.unparse(a.annotation)}
        for node in ast.walk(func):
            if (isinstance(node, ast.Attribute) and node.attr in ("ext_fields", "field")
                    and isinstance(node.value, ast.Name) and node.value.id in requests):
                found.append(f"{func.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_raw_field_finder_finds_raw_reads():
    assert raw_field_reads("def h(b, header, req: RemotingCommand, c):\n    return req.ext_fields['topic']\n")
    assert raw_field_reads("async def h(b, h, request, c):\n    return request.field('topic')\n")
    assert not raw_field_reads("def h(b, header, request, c):\n    return request.reply(1, ext_fields={})\n")


def test_no_handler_reads_its_requests_header_fields_but_through_the_declared_type():
    reads = {}
    for path in sorted(HANDLER_ROOM.rglob("*.py")):
        name = str(path.relative_to(REPO))
        if name not in RAW_FIELD_READERS and (found := raw_field_reads(path.read_text())):
            reads[name] = found
    assert reads == {}, "handlers must read header fields from the header the broker hands them"


SEND = {"producerGroup": "PG", "topic": "T", "defaultTopic": "D", "defaultTopicQueueNums": "8", "queueId": "3",
        "sysFlag": "4", "bornTimestamp": "1700000000000", "flag": "5", "properties": "TAGS\x01t\x02",
        "reconsumeTimes": "2", "unitMode": "false", "maxReconsumeTimes": "7", "batch": "true"}
PULL = {"consumerGroup": "G", "topic": "T", "queueId": "1", "queueOffset": "9", "maxMsgNums": "16", "sysFlag": "6",
        "commitOffset": "4", "suspendTimeoutMillis": "3000", "subscription": "a || b", "expressionType": "TAG",
        "subVersion": "12"}
SHORT = {long: short for short, long in V2_NAMES.items()}


@pytest.mark.parametrize(("code", "fields"), [
    (RequestCode.SEND_MESSAGE, SEND),
    (RequestCode.SEND_MESSAGE_V2, {SHORT[k]: v for k, v in SEND.items()}),
    (RequestCode.SEND_BATCH_MESSAGE, {SHORT[k]: v for k, v in SEND.items()}),
    (RequestCode.SEND_MESSAGE, {"topic": "T"}),  # every default
    (RequestCode.PULL_MESSAGE, PULL),
    (RequestCode.PULL_MESSAGE, {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0"}),
], ids=lambda value: str(value)[:24])
def test_the_hand_read_headers_read_what_they_declare(code, fields):
    header_type = HEADER_TYPES[code]
    request = RemotingCommand(code=code, ext_fields=dict(fields))
    declared = wire_names(header_type)  # attribute -> SEND_MESSAGE's (long) field name
    sent = {declared[a]: fields[wire_name(code, a)] for a in declared if wire_name(code, a) in fields}
    assert header_type.of(request) == parse_declared(header_type, sent)


def test_headers_refuse_missing_and_malformed_fields_by_name():
    def refused(header_type: type[RequestHeader], code: int, **fields: str) -> str:
        with pytest.raises(HeaderFieldError) as caught:
            header_type.of(RemotingCommand(code=code, ext_fields=fields))
        return str(caught.value)

    end = {"tranStateTableOffset": "1", "commitLogOffset": "2", "commitOrRollback": "8"}
    assert refused(EndTransactionHeader, RequestCode.END_TRANSACTION, **end) == \
        "the request lacks the field producerGroup"  # RocketMQ's @CFNotNull
    assert "commitOrRollback='x' is not an integer" in refused(
        EndTransactionHeader, RequestCode.END_TRANSACTION, **dict(end, producerGroup="P", commitOrRollback="x"))
    assert "out of range for a 32-bit integer" in refused(SendHeader, RequestCode.SEND_MESSAGE, topic="T",
                                                          queueId=str(2**31))
    assert "queueId -2" in refused(NotificationHeader, RequestCode.NOTIFICATION, consumerGroup="g", topic="T",
                                   queueId="-2")
    assert "extraInfo" in refused(AckHeader, RequestCode.ACK_MESSAGE, consumerGroup="g", topic="T", queueId="0",
                                  offset="0", extraInfo="not a handle")
    pop = {"consumerGroup": "g", "topic": "T", "queueId": "-1", "maxMsgNums": "1", "invisibleTime": "0"}
    assert "invisibleTime 0 ms" in refused(PopHeader, RequestCode.POP_MESSAGE, **pop)
    assert PullHeader.of(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=dict(PULL))).consumer_group == "G"


def test_a_headers_attributes_name_rocketmqs_fields_and_a_v2_sends_letters():
    assert wire_name(RequestCode.SEND_MESSAGE, "topic") == "topic"
    assert wire_name(RequestCode.SEND_MESSAGE_V2, "topic") == "b"
    assert wire_name(RequestCode.PULL_MESSAGE, "consumer_group") == "consumerGroup"
    assert wire_name(RequestCode.POP_MESSAGE, "group") == "consumerGroup"
    assert dataclasses.is_dataclass(HEADER_TYPES[RequestCode.HEART_BEAT]) and not wire_names(
        HEADER_TYPES[RequestCode.HEART_BEAT])
