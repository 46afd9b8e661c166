"""What a proxy's doors count, per request or call (core/proxy/metrics.py renders it)."""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

from core.metrics.catalogue import OTHER
from core.metrics.counters import CappedRows, answer_latency

ACL_CODES = frozenset({"FORBIDDEN", "UNAUTHORIZED"})  # a 5.x answer that access control refused


class ProxyMeters:
    """Latency by door (remoting: (request code, response code); gRPC: (RPC, status code)),
    and access-control refusals by request name."""

    def __init__(self, keys_max: int, *, timed: bool = True) -> None:
        self.remoting = answer_latency(keys_max, timed=timed)
        self.grpc = answer_latency(keys_max, timed=timed, other=(OTHER, -1))
        self.acl_refusals = CappedRows(1, keys_max=keys_max)  # request (4.x) or RPC (5.x) name

    def grpc_answered(self, rpc: str, answer: Any, started: float) -> None:
        """One gRPC call answered ``answer`` (a response, or a list of them for a stream)."""
        if self.grpc is None:
            return
        code = _status_code(answer)
        self.grpc.observe((rpc, code), perf_counter() - started)


def _status_code(answer: Any) -> int:
    """The status code of a 5.x answer: its ``status``, or a streamed list's status item."""
    items: Sequence[Any] = answer if isinstance(answer, list) else [answer]
    for item in items:
        try:
            if item.HasField("status"):
                return int(item.status.code)
        except ValueError:  # a message without a status field
            continue
    return 0
