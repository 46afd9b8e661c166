"""The stock C++ RocketMQ client (PyPI rocketmq 0.4.4 wrapping librocketmq 1.2.3), driven as a
child process so the tests see it exactly as an application would.

    python cpp_client.py produce NAMESRV TOPIC COUNT [START [DELAY_LEVEL]]
    python cpp_client.py produce-orderly NAMESRV TOPIC COUNT KEYS
    python cpp_client.py consume NAMESRV GROUP TOPIC EXPRESSION COUNT TIMEOUT_S [later|orderly]

``later``: the first delivery of each message fails (RECONSUME_LATER), later ones succeed.
``orderly``: an orderly push consumer (queue locks, one queue at a time per consumer).
``produce-orderly``: message i goes with ``send_orderly`` and sharding key i % KEYS.

Each message sent or received is printed as one JSON line.
"""

import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def produce(namesrv: str, topic: str, count: int, start: int = 0, delay_level: int = 0) -> None:
    producer = Producer("PID_interop")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(start, start + count):
            msg = Message(topic)
            msg.set_keys(f"key-{i}")
            msg.set_tags("TagA" if i % 2 == 0 else "TagB")
            msg.set_property("idx", str(i))
            msg.set_body(f"message {i} from the C++ client")
            if delay_level:
                msg.set_delay_time_level(delay_level)
            result = producer.send_sync(msg)
            print(json.dumps({"i": i, "status": int(result.status), "msg_id": result.msg_id,
                              "offset": result.offset, "sent_at": time.time()}), flush=True)
    finally:
        producer.shutdown()


def produce_orderly(namesrv: str, topic: str, count: int, keys: int) -> None:
    producer = Producer("PID_orderly")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_keys(f"key-{i % keys}")
            msg.set_property("idx", str(i))
            msg.set_body(f"ordered {i}")
            result = producer.send_orderly(msg, i % keys)
            print(json.dumps({"i": i, "status": int(result.status), "msg_id": result.msg_id}), flush=True)
    finally:
        producer.shutdown()


def consume(namesrv: str, group: str, topic: str, expression: str, count: int, timeout_s: float,
            fail_first: bool = False, orderly: bool = False) -> None:
    got = []
    lock = threading.Lock()

    def text(value) -> str:  # type: ignore[no-untyped-def]
        return value.decode() if isinstance(value, bytes) else (value or "")

    def on_message(msg) -> None:  # type: ignore[no-untyped-def]
        row = {"body": text(msg.body), "tags": text(msg.tags), "keys": text(msg.keys),
               "idx": text(msg.get_property("idx")), "queue_id": msg.queue_id,
               "queue_offset": msg.queue_offset, "msg_id": text(msg.id), "topic": text(msg.topic),
               "reconsume_times": msg.reconsume_times, "received_at": time.time()}
        with lock:
            got.append(row)
            print(json.dumps(row), flush=True)
        if fail_first and msg.reconsume_times == 0:
            raise RuntimeError("RECONSUME_LATER")

    consumer = PushConsumer(group, orderly=orderly)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message, expression)
    consumer.start()
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with lock:
            if len(got) >= count:
                break
        time.sleep(0.05)
    time.sleep(0.5)  # let a duplicate, if any, arrive before we stop
    consumer.shutdown()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "produce-orderly":
        produce_orderly(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "produce":
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 0,
                int(sys.argv[6]) if len(sys.argv) > 6 else 0)
    else:
        consume(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), float(sys.argv[7]),
                len(sys.argv) > 8 and sys.argv[8] == "later", len(sys.argv) > 8 and sys.argv[8] == "orderly")
