"""Whether a store takes local writes now, and why not: not open yet (or closed), a replica's
role, a full disk, too few in-sync replicas (controller mode), or a failed flush (after which nothing written could be promised durable).
The put path reads one field, :attr:`WriteGate.refusal` (None while writes are taken)."""

from __future__ import annotations

from typing import NoReturn

from core.errors import DiskFullError, InSyncReplicasError, ReadOnlyStoreError, StoreClosedError, StoreError
from core.store.store_types import StoreStatistics


class WriteGate:
    """The reasons a store refuses writes; :attr:`refusal` is the one that counts now."""

    __slots__ = ("disk_full", "flush_failed", "open", "read_only", "refusal", "replicas_short", "stats")

    def __init__(self, stats: StoreStatistics) -> None:
        self.stats = stats
        self.refusal: str | None = "the store is not open"  # None while writes are allowed
        self.open = False
        self.read_only: str | None = None  # why a replica refuses local writes
        self.disk_full: str | None = None
        self.replicas_short: str | None = None  # why too few replicas are in sync to take a put
        self.flush_failed = False

    def opened(self) -> None:
        """Recovery is over: writes are taken unless something else refuses them."""
        self.open = True
        self._settle()

    def closed(self) -> None:
        self.open = False
        self.refusal = "the store is closed"

    def set_read_only(self, reason: str | None) -> None:
        self.read_only = reason
        self._settle()

    def set_disk_full(self, reason: str | None) -> None:
        self.disk_full = reason
        self._settle()

    def set_replicas_short(self, reason: str | None) -> None:
        self.replicas_short = reason
        self._settle()

    def fail_flush(self, reason: str) -> None:
        """A flush failed: writes are refused until the store is reopened."""
        self.flush_failed = True
        self.refusal = reason

    def _settle(self) -> None:
        if self.open and not self.flush_failed:
            self.refusal = self.read_only or self.disk_full or self.replicas_short

    def refuse(self) -> NoReturn:
        """Raise the error :attr:`refusal` stands for."""
        if not self.open:
            raise StoreClosedError("the store is not open")
        if self.refusal is self.read_only:
            raise ReadOnlyStoreError(self.read_only)
        if self.refusal is self.disk_full:
            self.stats.refused_disk_full += 1
            raise DiskFullError(self.refusal)
        if self.refusal is self.replicas_short:
            raise InSyncReplicasError(self.replicas_short)
        raise StoreError(self.refusal or "writes refused")
