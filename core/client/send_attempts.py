"""The attempts of one send (RocketMQ's sendDefaultImpl loop), sans-IO: how many are left,
how much of the one overall timeout each may spend, what a broker's answer means, and the
error that names every broker tried and why.

```
 attempt 1 ---- fails ----> attempt 2 (another broker) ---- fails ----> ... up to 1 + retries
    |  <------------------- one timeout, spent by every attempt ------------------->  |
    +-- SEND_OK: done.  FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE: done, unless
        retry_another_broker_when_not_store_ok (then the last such answer is returned
        when the attempts run out).  MESSAGE_ILLEGAL: the same message fails everywhere.
```
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from core.remoting.codes import ResponseCode

SEND_STATUS: Mapping[int, str] = MappingProxyType({
    ResponseCode.SUCCESS: "SEND_OK", ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT", ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE"})
_FINAL_CODES = frozenset({ResponseCode.MESSAGE_ILLEGAL})  # the message, not the broker, is at fault
_ROUTE_STALE_CODES = frozenset({ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.TOPIC_NOT_EXIST})


class Verdict(enum.Enum):
    DONE = "done"  # return this answer
    RETRY = "retry"  # try another broker if attempts and time are left
    STOP = "stop"  # give up now


class SendAttempts:
    """The attempts of one send that started at ``now`` (seconds, the caller's clock)."""

    def __init__(self, topic: str, retries: int, timeout_s: float, now: float, *,
                 retry_not_store_ok: bool = False) -> None:
        self.topic = topic
        self.deadline = now + timeout_s
        self.attempts_left = 1 + max(0, retries)
        self.retry_not_store_ok = retry_not_store_ok
        self.last_broker: str | None = None  # of the latest failed attempt: the next one avoids it
        self.failures: list[str] = []

    def next_attempt(self, now: float) -> float | None:
        """Start an attempt: the seconds it may take, or None when none is left (count or time)."""
        if self.attempts_left <= 0:
            return None
        left = self.deadline - now
        if left <= 0:
            self.failures.append("send timeout spent")
            self.attempts_left = 0
            return None
        self.attempts_left -= 1
        return left

    def note(self, why: str) -> None:
        """An attempt failed before it reached a broker."""
        self.failures.append(why)

    def failed(self, broker: str, why: str) -> None:
        """The attempt on ``broker`` failed for a reason to retry elsewhere."""
        self.failures.append(f"{broker}: {why}")
        self.last_broker = broker

    def answered(self, broker: str, address: str, code: int, remark: str | None) -> Verdict:
        """The broker answered ``code``. After a RETRY of a stored answer (a status in
        :data:`SEND_STATUS`), the caller keeps that answer to return if nothing better comes."""
        status = SEND_STATUS.get(code)
        if status == "SEND_OK":
            return Verdict.DONE
        if status is not None:  # stored, but not flushed or replicated as asked
            if not self.retry_not_store_ok:
                return Verdict.DONE
            self.failed(broker, f"{status} from {address}")
            return Verdict.RETRY
        self.failed(broker, f"code {code} {remark or ''} from {address}".rstrip())
        return Verdict.STOP if code in _FINAL_CODES else Verdict.RETRY

    @staticmethod
    def route_stale(code: int) -> bool:
        """Whether the answer means the cached route is wrong (a slave now, a deposed leader)."""
        return code in _ROUTE_STALE_CODES

    @staticmethod
    def broker_at_fault(code: int) -> bool:
        """Whether a failing answer counts against the broker in the fault table."""
        return code not in _FINAL_CODES and code not in SEND_STATUS

    def error(self) -> str:
        return f"sending to {self.topic} failed: " + "; ".join(self.failures)
