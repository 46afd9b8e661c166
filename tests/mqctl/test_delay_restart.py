"""A delayed message sent to a cluster from `mqctl start` survives broker restarts and is
delivered once."""

import json


def rows(out):
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_delayed_message_survives_a_broker_restart_and_is_delivered_once(cluster):
    text = cluster.config.read_text()
    cluster.config.write_text(text.replace("[store]\n", '[store]\ndelay_levels = "1s 2s 3s"\n', 1))
    assert cluster.mqctl("restart", "broker-a-0").returncode == 0
    (sent,) = rows(cluster.mqctl("send", "Later", "see you in 3 s", "--key", "later-1", "--delay", "3", "--json"))
    assert sent["status"] == "SEND_OK"
    # restart before it is due: the schedule's message and its progress must come back
    assert cluster.mqctl("restart", "broker-a-0").returncode == 0
    (got,) = rows(cluster.mqctl("tail", "Later", "--group", "late-readers", "--from-beginning", "--count", "1",
                                "--json", timeout=60))
    assert got["body"] == "see you in 3 s" and got["msg_id"] == sent["msg_id"]
    assert got["store_timestamp"] - got["born_timestamp"] >= 3000, "held for its delay"
    # restart after delivery: it is not delivered again. A second delayed message, delivered
    # after the restarted schedule's first round, shows that round has run.
    assert cluster.mqctl("restart", "broker-a-0").returncode == 0
    rows(cluster.mqctl("send", "Later", "marker", "--key", "later-2", "--delay", "1", "--json"))
    both = rows(cluster.mqctl("tail", "Later", "--group", "second-look", "--from-beginning", "--count", "2",
                              "--json", timeout=60))
    assert sorted(b["body"] for b in both) == ["marker", "see you in 3 s"]
    found = rows(cluster.mqctl("message", "query", "--key", "later-1", "--topic", "Later", "--json"))
    assert [f["uniq_key"] for f in found] == [sent["msg_id"]], "exactly one copy in the real topic"
