"""Label values of request and response codes: RocketMQ's names, numbers for unknown codes, and
the capped rest as OTHER."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from core.metrics.catalogue import OTHER
from core.remoting.codes import RequestCode, ResponseCode

REMOTING = "remoting"
GRPC = "grpc"


def request_label(code: object) -> str:
    """A 4.x request code's RocketMQ name (an RPC's name passes as it is)."""
    return code if isinstance(code, str) else _name(RequestCode, code)


def response_label(code: object) -> str:
    return _name(ResponseCode, code)


def _name(codes: type[RequestCode] | type[ResponseCode], code: object) -> str:
    if code == -1 or not isinstance(code, int):
        return OTHER
    try:
        return codes(code).name
    except ValueError:
        return str(code)


def rpc_labels(protocol: str, status_label: Callable[[object], str] = response_label) -> Callable[[object], tuple[str, ...]]:
    """(protocol, request, code) of a latency histogram's key (request code, response code)."""
    def labels(key: object) -> tuple[str, ...]:
        request, response = cast(tuple[object, object], key)
        return protocol, request_label(request), status_label(response)
    return labels
