"""Errors of the replication engines."""

from __future__ import annotations

from core.errors import CoreError


class ReplicationError(CoreError):
    """Replication cannot go on as configured."""


class ProtocolError(ReplicationError):
    """A peer sent bytes the HA protocol does not allow; the link is dropped."""


class DivergedLogError(ReplicationError):
    """A replica's log forks from its master's and no common prefix can be found."""
