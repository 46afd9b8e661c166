"""What a name server needs from the controller it hosts (RocketMQ 5's controller mode, made by
the ``mq_controller`` hook; the ``ha_controller`` plugin's lives in ``replication/controller``).

The name server hands the controller every request whose code is in :attr:`codes`, after the
ACL checked it (the codes that change state need an admin account), and tells it of every
connection that closes (a broker's dropped connection is the quickest sign that it died).
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

from core.remoting.command import RemotingCommand
from core.remoting.processor import Reply


class HostedController(Protocol):
    """One member of the controller group, running inside a name server."""

    @property
    def codes(self) -> frozenset[int]:
        """The request codes it answers."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve its raft port and elect until cancelled; ``started`` once it listens."""

    def process(self, request: RemotingCommand, conn: Any) -> Reply:
        """Answer a request of one of :attr:`codes`."""

    def connection_closed(self, conn: Any) -> None:
        """A connection to the name server closed."""

    def metrics(self) -> dict[str, float]:
        """Its samples for the name server's metrics: catalogue name (``rocketmq_controller_*``)
        -> value."""
