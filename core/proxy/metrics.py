"""A proxy's metrics as a scrape reads them: both doors' latency and refusals
(core/proxy/meters.py), and the forwarder's view of the groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from core.metrics.exposition import Samples
from core.metrics.labels import GRPC, REMOTING, rpc_labels
from core.proxy.forwarder import Forwarder
from core.proxy.grpc.service import MessagingService
from core.proxy.meters import ACL_CODES, ProxyMeters
from core.proxy.remoting.door import RemotingDoor
from formats.rocketmq_v2 import messaging_pb2 as pb


@dataclass(slots=True)
class ProxyParts:
    meters: ProxyMeters
    forwarder: Forwarder
    door: RemotingDoor
    service: MessagingService | None = None


def grpc_code_label(code: object) -> str:
    try:
        return pb.Code.Name(code)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return str(code)


def fill_proxy(parts: ProxyParts, out: Samples) -> None:
    meters = parts.meters
    out.answers(meters.remoting, rpc_labels(REMOTING))
    out.answers(meters.grpc, rpc_labels(GRPC, grpc_code_label))
    refusals = {str(name): row[0] for name, row in meters.acl_refusals.items()}
    if meters.grpc is not None:  # a 5.x refusal is an answer with an access-control status
        for key, row in meters.grpc.items():
            rpc, code = cast(tuple[str, int], key)
            if grpc_code_label(code) in ACL_CODES:
                refusals[str(rpc)] = refusals.get(str(rpc), 0) + int(sum(row[:-1]))
    for name, count in refusals.items():
        out.add("rocketmq_acl_refusals_total", count, name)
    view = parts.forwarder.view
    grpc_clients = len(parts.service.clients) if parts.service is not None else 0
    out.add("rocketmq_proxy_upstream_sessions", parts.door.sessions + grpc_clients)  # a 5.x client has one
    for group in sorted({*view.groups, *view.failovers}):
        out.add("rocketmq_proxy_failovers_total", view.failovers.get(group, 0), group)
    out.add("rocketmq_proxy_resent_total", parts.forwarder.resent)
    out.add("rocketmq_proxy_writes_waiting", view.writes_waiting)
    out.add("rocketmq_proxy_grpc_clients", grpc_clients)
