"""What a push consumer does with messages its handler did not consume (RECONSUME_LATER, or an
orderly consumer's SUSPEND_CURRENT_QUEUE_A_MOMENT): give them back to the broker, keep them
here to offer again, dead-letter or skip them after too many tries.

Messages kept here are offered again with their local tries counted in ``reconsume_times``, as
RocketMQ's orderly consumer counts its suspends.
"""

from __future__ import annotations

import logging

from core.client.pull import send_back
from core.client.route import MessageQueue
from core.client.runtime import ClientRuntime
from formats.record import MessageRecord

log = logging.getLogger(__name__)


class Unconsumed:
    """The unconsumed-message policy of one consumer group's member.

    ``give_back``: clustering, not orderly: unconsumed messages go back to the broker
    (CONSUMER_SEND_MSG_BACK). Otherwise an orderly or broadcasting consumer keeps them here up
    to ``max_reconsume_times`` tries, then dead-letters (orderly) or skips (broadcasting) the
    first; a clustering consumer with ``give_back=False`` keeps them for as long as it takes.
    """

    def __init__(self, runtime: ClientRuntime, group: str, *, give_back: bool, orderly: bool,
                 broadcasting: bool, max_reconsume_times: int) -> None:
        self.runtime = runtime
        self.group = group
        self.give_back = give_back
        self.keep_counting = orderly or broadcasting
        self.broadcasting = broadcasting
        self.max_reconsume_times = max_reconsume_times
        self._attempts: dict[MessageQueue, tuple[int, int]] = {}  # queue -> (offset kept here, tries)

    def with_local_tries(self, mq: MessageQueue, messages: list[MessageRecord]) -> list[MessageRecord]:
        """``messages`` with the tries of a batch offered again here added to its first one's
        reconsume times."""
        kept = self._attempts.get(mq)
        if kept is not None and messages[0].queue_offset == kept[0]:
            messages[0].reconsume_times += kept[1]
        return messages

    def forget(self, mq: MessageQueue) -> None:
        """The queue left this member: its local tries go with it."""
        self._attempts.pop(mq, None)

    async def settle(self, mq: MessageQueue, later: list[MessageRecord]) -> int:
        """Deal with messages the handler did not consume; returns how many, from the start,
        are settled (given back, dead-lettered, skipped); the rest stay here."""
        if self.give_back:
            return await send_back(self.runtime, self.group, mq, later, max_reconsume_times=self.max_reconsume_times)
        if not self.keep_counting:
            return 0  # give_back=False: kept in the queue for as long as it takes
        first = later[0]
        offset, tries = self._attempts.get(mq, (first.queue_offset, 0))
        tries = tries + 1 if offset == first.queue_offset else 1
        if tries < self.max_reconsume_times:
            self._attempts[mq] = (first.queue_offset, tries)
            return 0
        self._attempts.pop(mq, None)
        if self.broadcasting:
            log.warning("consumer %s skips %s@%d after %d tries", self.group, mq, first.queue_offset, tries)
            return 1
        return await send_back(self.runtime, self.group, mq, [first], max_reconsume_times=self.max_reconsume_times,
                               dead_letter=True)
