"""A chaos drill's traffic: producers that record every send attempt and a consumer group that
records every delivery, in the shapes :mod:`mqctl.chaos.history` judges."""

from __future__ import annotations

import re

import trio

from core.client.consumer import Handler, PushConsumer
from core.client.producer import Message, Producer
from core.client.runtime import ClientError, ClientRuntime
from core.errors import RemotingError
from formats.record import MessageRecord
from mqctl.chaos.history import Delivery, SendAttempt

TOPIC = "ChaosDrill"
GROUP = "chaos-drill"
SENDERS = 4
SEND_INTERVAL_S = 0.04  # per sender: about 100 messages a second in all

_REPEATED_ADDRESS = re.compile(r" \(\d{1,3}(?:\.\d{1,3}){3}:\d+\)$")
_WITHIN = re.compile(r" within [\d.]+ ?s\b")
_SPENT = "send timeout spent"


def why_not_acknowledged(error: str) -> str:
    """What a failed send was told, so that sends failing alike count together: the last
    attempt's failure (the one that says why, not that the time then ran out), without the
    time that was left. A drill's nodes keep their addresses, so those stay."""
    if error.startswith("sending to ") and " failed: " in error:
        error = error.split(" failed: ", 1)[1]
    failures = [f for f in error.split("; ") if f] or [error]
    telling = [f for f in failures if f != _SPENT]
    last = telling[-1] if telling else failures[-1]
    return _WITHIN.sub("", _REPEATED_ADDRESS.sub("", last))


class History:
    """What the drill saw, times in seconds since ``t0`` (trio's clock)."""

    def __init__(self, t0: float, broker: str) -> None:
        self.t0 = t0
        self.broker = broker
        self.attempts: list[SendAttempt] = []
        self.deliveries: list[Delivery] = []
        self.delivered_keys: set[str] = set()

    def now(self) -> float:
        return round(trio.current_time() - self.t0, 3)

    def acked_keys(self) -> set[str]:
        return {a.key for a in self.attempts if a.outcome == "ok"}


async def produce(runtime: ClientRuntime, history: History, until: trio.Event, sender: int) -> None:
    """Send ``<sender>-<n>`` messages until ``until`` is set. SEND_OK is an acknowledgement; a
    stored-but-not-replicated status (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE) and every error
    are unknown outcomes: the message may or may not be kept."""
    producer = Producer(runtime, f"{GROUP}-producer")
    n = 0
    while not until.is_set():
        key = f"{sender}-{n}"
        n += 1
        started = history.now()
        try:
            result = await producer.send(Message(TOPIC, key.encode(), keys=[key]))
        except (ClientError, RemotingError) as exc:
            history.attempts.append(SendAttempt(key, started, history.now(), "unknown",
                                                why=why_not_acknowledged(str(exc))))
        else:
            if result.status == "SEND_OK":
                history.attempts.append(SendAttempt(key, started, history.now(), "ok",
                                                    f"{result.queue.broker_name}/{result.queue.queue_id}",
                                                    result.queue_offset))
            else:
                history.attempts.append(SendAttempt(key, started, history.now(), "unknown", why=result.status))
        with trio.move_on_after(SEND_INTERVAL_S):
            await until.wait()


def recorder(history: History) -> Handler:
    async def handle(records: list[MessageRecord]) -> bool:
        at = history.now()
        for rec in records:
            key = rec.body.decode(errors="replace")
            history.deliveries.append(Delivery(key, f"{history.broker}/{rec.queue_id}", rec.queue_offset, at))
            history.delivered_keys.add(key)
        return True
    return handle


async def start_consumer(runtime: ClientRuntime, history: History) -> PushConsumer:
    consumer = PushConsumer(runtime, GROUP, recorder(history), from_beginning=True)
    consumer.subscribe(TOPIC)
    await consumer.start()
    return consumer
