"""A broker's remoting answer as a RocketMQ 5 ``Status`` (the codes RocketMQ's proxy answers)."""

from __future__ import annotations

from types import MappingProxyType

from core.proxy.grpc.messages import Refused
from core.remoting.codes import ResponseCode
from core.remoting.command import RemotingCommand
from formats.rocketmq_v2 import messaging_pb2 as pb

# a remoting answer's code as a 5.x status code (RocketMQ's proxy's ResponseBuilder)
STATUS_OF = MappingProxyType({
    ResponseCode.SUCCESS: pb.OK, ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN, ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.ILLEGAL_FILTER_EXPRESSION, ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.NO_MESSAGE: pb.INVALID_RECEIPT_HANDLE, ResponseCode.POLLING_FULL: pb.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.PROXY_TIMEOUT, ResponseCode.ILLEGAL_OPERATION: pb.BAD_REQUEST,
})
NOT_FOUND = frozenset({ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND, ResponseCode.NO_MESSAGE})


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=pb.OK, message=message)


def status_of(resp: RemotingCommand | None, what: str) -> pb.Status:
    if resp is None:
        return pb.Status(code=pb.INTERNAL_SERVER_ERROR, message=f"{what}: no answer")
    if resp.code == ResponseCode.SUCCESS:
        return ok()
    return pb.Status(code=STATUS_OF.get(resp.code, pb.INTERNAL_SERVER_ERROR),
                     message=f"{what}: {resp.remark or 'refused'} (code {resp.code})")


def overall(statuses: list[pb.Status]) -> pb.Status:
    """A request's status from its entries': theirs when they agree, else MULTIPLE_RESULTS."""
    if not statuses:
        return ok()
    return statuses[0] if len({s.code for s in statuses}) == 1 else \
        pb.Status(code=pb.MULTIPLE_RESULTS, message="results differ")


def refused(exc: Refused) -> pb.Status:
    return pb.Status(code=exc.code, message=exc.message)
