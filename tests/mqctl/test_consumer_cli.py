"""``mqctl consumer progress | reset-offset | list`` against real node processes."""

import json
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta

import pytest

from mqctl.common.errors import CliError
from mqctl.common.options import parse_time


def rows(out):
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def lag_of(cluster, group, topic):
    """Per queue of ``topic``: its lag in ``mqctl consumer progress``."""
    return {r["queue_id"]: r["lag"] for r in rows(cluster.mqctl("consumer", "progress", group, "--json"))
            if r["topic"] == topic}


def wait_for_lag(cluster, group, topic, wanted, deadline_s=30.0):
    """Ask progress again until ``wanted(lags)`` holds; each ask is a whole mqctl run."""
    deadline = time.monotonic() + deadline_s
    while True:
        lags = lag_of(cluster, group, topic)
        if wanted(lags):
            return lags
        assert time.monotonic() < deadline, f"progress still shows {lags}"


def test_progress_shows_lag_that_falls_to_zero_and_comes_back_after_a_reset(cluster):
    n = 6
    assert rows(cluster.mqctl("topic", "create", "Lag", "--queues", "2", "--json")) == [{"broker": "broker-a", "result": "ok"}]
    unknown = cluster.mqctl("consumer", "progress", "LagG")
    assert unknown.returncode == 2 and "consumer group LagG is unknown" in unknown.stderr
    # the group reads the one message there is, so it has committed offsets
    rows(cluster.mqctl("send", "Lag", "first", "--json"))
    assert [m["body"] for m in rows(cluster.mqctl("tail", "Lag", "--group", "LagG", "--count", "1", "--json"))] == ["first"]
    assert lag_of(cluster, "LagG", "Lag") == {0: 0, 1: 0}
    sent = rows(cluster.mqctl("send", "Lag", "more", "--count", str(n), "--json"))
    assert len(sent) == n
    progress = rows(cluster.mqctl("consumer", "progress", "LagG", "--json"))
    lag = {r["queue_id"]: r for r in progress if r["topic"] == "Lag"}
    assert sum(r["lag"] for r in lag.values()) == n and all(r["broker"] == "broker-a" for r in lag.values())
    assert all(r["lag"] == r["broker_offset"] - r["consumer_offset"] for r in lag.values())
    assert any(r["last_timestamp"] for r in lag.values()), "the first message was consumed"
    assert {r["topic"] for r in progress} == {"Lag", "%RETRY%LagG"}
    table = cluster.mqctl("consumer", "progress", "LagG")
    header, *body = table.stdout.splitlines()
    assert header.split() == ["TOPIC", "BROKER", "QUEUE_ID", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "LAST_TIMESTAMP"]
    assert body[-1].split() == ["TOTAL", str(n + 1), "1", str(n)]
    # a consumer catches up
    consumed = rows(cluster.mqctl("tail", "Lag", "--group", "LagG", "--count", str(n), "--json"))
    assert [m["body"] for m in consumed] == ["more"] * n
    wait_for_lag(cluster, "LagG", "Lag", lambda lags: lags == {0: 0, 1: 0})
    # and is sent back to the beginning: the whole topic is lag again
    reset = rows(cluster.mqctl("consumer", "reset-offset", "LagG", "Lag", "--to-beginning", "--json"))
    assert reset == [{"topic": "Lag", "broker": "broker-a", "queue_id": q, "offset": 0} for q in (0, 1)]
    assert sum(lag_of(cluster, "LagG", "Lag").values()) == n + 1
    to_end = rows(cluster.mqctl("consumer", "reset-offset", "LagG", "Lag", "--to-end", "--json"))
    assert sum(r["offset"] for r in to_end) == n + 1
    assert lag_of(cluster, "LagG", "Lag") == {0: 0, 1: 0}


class Lines:
    """The stdout lines of a background process, gathered by a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, count: int, deadline_s: float = 30.0) -> list[dict]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.lines) >= count, deadline_s), self.lines
            return [json.loads(line) for line in self.lines]


def test_list_shows_a_live_consumer_and_a_reset_makes_it_read_again(cluster):
    rows(cluster.mqctl("topic", "create", "Live", "--queues", "2", "--json"))
    rows(cluster.mqctl("send", "Live", "hello", "--count", "3", "--json"))
    offline = cluster.mqctl("consumer", "list", "LiveG")
    assert offline.returncode == 2 and "consumer group LiveG has no online member" in offline.stderr
    tail = subprocess.Popen([sys.executable, "-m", "mqctl", "--config", str(cluster.config), "tail", "Live",
                             "--group", "LiveG", "--json"], stdout=subprocess.PIPE, text=True, env=cluster.env)
    try:
        lines = Lines(tail)
        assert [m["body"] for m in lines.wait_for(3)] == ["hello"] * 3
        (member,) = rows(cluster.mqctl("consumer", "list", "LiveG", "--json"))
        assert member["language"] == "PYTHON" and member["message_model"] == "CLUSTERING"
        assert member["consume_type"] == "CONSUME_PASSIVELY" and member["brokers"] == ["broker-a"]
        assert {"topic": "Live", "expression": "*", "type": "TAG"} in member["subscriptions"]
        assert f"@{tail.pid}#" in member["client_id"]
        table = cluster.mqctl("consumer", "list", "LiveG").stdout.splitlines()
        assert table[0].split()[:3] == ["CLIENT_ID", "ADDRESS", "LANGUAGE"] and "Live(*)" in table[1]
        # the running consumer jumps back at once and reads the topic again
        reset = rows(cluster.mqctl("consumer", "reset-offset", "LiveG", "Live", "--to-beginning", "--json"))
        assert [r["offset"] for r in reset] == [0, 0]
        assert [m["body"] for m in lines.wait_for(6)][3:] == ["hello"] * 3
        later = (datetime.now() + timedelta(hours=1)).isoformat(timespec="seconds")
        future = rows(cluster.mqctl("consumer", "reset-offset", "LiveG", "Live", "--to-timestamp", later, "--json"))
        assert sum(r["offset"] for r in future) == 3, "nothing stored after that time: the end of each queue"
    finally:
        tail.send_signal(signal.SIGINT)
        try:
            tail.wait(timeout=20)
        except subprocess.TimeoutExpired:
            tail.kill()
            tail.wait()


def test_errors_are_one_clear_line(cluster):
    rows(cluster.mqctl("send", "Err", "x", "--json"))
    for args, fragment in [
        (("Err",), "choose one of --to-timestamp, --to-beginning and --to-end"),
        (("Err", "--to-beginning", "--to-end"), "choose one of"),
        (("Err", "--to-timestamp", "yesterday"), "epoch milliseconds or an ISO-8601 date-time"),
        (("NoSuchTopic", "--to-end"), "topic NoSuchTopic does not exist"),
        (("Err", "--to-end"), "the consumer group <NoGroup> not exist"),
    ]:
        out = cluster.mqctl("consumer", "reset-offset", "NoGroup", *args)
        assert out.returncode == 2 and fragment in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_timestamps_parse_as_epoch_ms_or_iso_8601():
    assert parse_time("1700000000123", "--to-timestamp") == 1700000000123
    assert parse_time("2023-11-14T22:13:20+00:00", "--to-timestamp") == 1700000000000
    assert parse_time("2023-11-14T22:13:20Z", "--to-timestamp") == 1700000000000
    local = datetime(2024, 5, 1, 12, 0).astimezone()
    assert parse_time("2024-05-01T12:00", "--to-timestamp") == int(local.timestamp() * 1000)
    with pytest.raises(CliError, match="ISO-8601"):
        parse_time("soon", "--to-timestamp")
