"""The one place where errors become RocketMQ response codes."""

from __future__ import annotations

import logging

from core.broker.timers.schedule import TimerRefused
from core.errors import (
    DiskFullError,
    InSyncReplicasError,
    MessageTooLargeError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreError,
)
from core.remoting.codes import ResponseCode
from core.remoting.header_fields import HeaderFieldError
from formats.errors import DecompressedTooLargeError, FormatError

log = logging.getLogger(__name__)


def response_code(exc: Exception) -> tuple[int, str]:
    """The response code and remark for an error met while handling a request."""
    if isinstance(exc, InSyncReplicasError):  # RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH put status
        return ResponseCode.SYSTEM_ERROR, f"in-sync replicas not enough: {exc}"
    if isinstance(exc, (DiskFullError, ReadOnlyStoreError)):
        return ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {exc}"
    if isinstance(exc, StoreClosedError):
        return ResponseCode.SERVICE_NOT_AVAILABLE, "service not available now: the store is shutting down"
    if isinstance(exc, (MessageTooLargeError, DecompressedTooLargeError, TimerRefused)):
        return ResponseCode.MESSAGE_ILLEGAL, str(exc)
    if isinstance(exc, (HeaderFieldError, FormatError)):
        return ResponseCode.SYSTEM_ERROR, str(exc)
    if isinstance(exc, StoreError):
        return ResponseCode.SYSTEM_ERROR, str(exc)
    # anything else is a bug met on the way: the request still gets an answer, the log the trace
    log.error("unexpected %s while handling a request", type(exc).__name__, exc_info=exc)
    return ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
