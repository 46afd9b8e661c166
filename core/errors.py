"""Errors of the broker kernel. Each names what went wrong in words an operator can act on;
the broker maps them to RocketMQ response codes in one place."""

from __future__ import annotations

from pathlib import Path


class CoreError(Exception):
    """Base of the kernel's errors."""


class ConfigError(CoreError):
    """A configuration file or value that cannot be used."""


class StoreError(CoreError):
    """The store cannot do what was asked."""


class DiskFullError(StoreError):
    """The disk is full, or above the configured usage ratio: writes refused, reads served."""


class MessageTooLargeError(StoreError):
    """A record larger than the configured maximum, or than a segment can hold."""


class ReadOnlyStoreError(StoreError):
    """A replica's store refuses local writes (they go to its master)."""


class InSyncReplicasError(StoreError):
    """Too few replicas hold the log for a put to be taken (controller mode's min_in_sync_replicas)."""


class UnsafePathError(StoreError):
    """A name that would make the store open a path outside its folder (or no valid path at all)."""


class StoreClosedError(StoreError):
    """The store was used after it was closed."""


class StoreCorruptError(StoreError):
    """Bytes in the store that are not what the store wrote: names the file and offset."""

    def __init__(self, message: str, path: Path | None = None, offset: int | None = None) -> None:
        self.path = path
        self.offset = offset
        where = ""
        if path is not None:
            where += f" in {path}"
        if offset is not None:
            where += f" at offset {offset}"
        super().__init__(f"{message}{where}")


class RemotingError(CoreError):
    """A remote call failed."""


class RemotingTimeoutError(RemotingError):
    """No response arrived in time."""


class RemotingConnectError(RemotingError):
    """The peer could not be reached."""


class ConnectionClosedError(RemotingError):
    """The connection closed before the response arrived."""


class RpcRejected(RemotingError):
    """A before-request hook refused a request; the peer gets ``code`` and ``remark``."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class FilterError(CoreError):
    """A subscription's filter expression cannot be used."""


class SelectorSyntaxError(FilterError, ValueError):
    """An SQL92 selector that does not parse, or breaks one of RocketMQ's parse-time rules;
    ``position`` is the 0-based character where it fails."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at column {position + 1})")
        self.position = position


class SelectorEvalError(FilterError):
    """Evaluating a selector on one message failed where RocketMQ's evaluator throws (a
    property that does not convert to the number it is compared with): the message does not match."""
