"""``mqctl message query`` against real node processes: by key, by offset msgId, by UNIQ_KEY,
and the errors an operator meets."""

import json

from formats.msgid import decode_offset_msg_id, encode_offset_msg_id


def rows(out):
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def one_line_error(out, fragment):
    assert out.returncode != 0 and not out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], out.stderr


def test_query_by_key_by_offset_msg_id_and_by_uniq_key(cluster):
    first = rows(cluster.mqctl("send", "Orders", "first", "--key", "K1", "--tag", "new", "--json"))[0]
    second = rows(cluster.mqctl("send", "Orders", "second", "--key", "K1", "--key", "K2", "--json"))[0]
    rows(cluster.mqctl("send", "Orders", "unrelated", "--key", "K3", "--json"))

    by_key = rows(cluster.mqctl("message", "query", "--key", "K1", "--topic", "Orders", "--json", "--body"))
    assert [r["body"] for r in by_key] == ["first", "second"]
    assert [r["msg_id"] for r in by_key] == [first["offset_msg_id"], second["offset_msg_id"]]
    assert [r["uniq_key"] for r in by_key] == [first["msg_id"], second["msg_id"]]
    assert by_key[0]["keys"] == ["K1"] and by_key[1]["keys"] == ["K1", "K2"] and by_key[0]["tags"] == "new"
    assert [(r["topic"], r["queue_id"], r["queue_offset"]) for r in by_key] == [
        ("Orders", s["queue_id"], s["queue_offset"]) for s in (first, second)]
    assert by_key[0]["body_size"] == 5 and by_key[0]["reconsume_times"] == 0
    assert by_key[0]["born_host"].startswith(("127.", "[")) or ":" in by_key[0]["born_host"]

    by_offset_id = rows(cluster.mqctl("message", "query", "--id", first["offset_msg_id"], "--json"))
    assert [(r["msg_id"], r["uniq_key"], r["topic"]) for r in by_offset_id] == [
        (first["offset_msg_id"], first["msg_id"], "Orders")]
    assert "body" not in by_offset_id[0]
    with_topic = rows(cluster.mqctl("message", "query", "--id", first["offset_msg_id"], "--topic", "Orders", "--json"))
    assert with_topic == by_offset_id

    by_uniq = rows(cluster.mqctl("message", "query", "--id", second["msg_id"], "--topic", "Orders", "--json",
                                 "--body"))
    assert [(r["msg_id"], r["body"]) for r in by_uniq] == [(second["offset_msg_id"], "second")]

    table = cluster.mqctl("message", "query", "--key", "K2", "--topic", "Orders")
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["MSG_ID", "UNIQ_KEY", "TOPIC", "QUEUE_ID", "QUEUE_OFFSET", "TAGS", "KEYS",
                              "STORE_TIME", "BORN_HOST", "RECONSUME_TIMES", "BODY_SIZE"]
    assert len(lines) == 1 and lines[0].startswith(second["offset_msg_id"]) and "K1 K2" in lines[0]


def test_not_found_and_bad_input_are_one_clear_line(cluster):
    sent = rows(cluster.mqctl("send", "Orders", "kept", "--key", "K1", "--json"))[0]
    one_line_error(cluster.mqctl("message", "query", "--key", "nope", "--topic", "Orders"),
                   "no message of topic Orders has the key nope")
    one_line_error(cluster.mqctl("message", "query", "--key", "K1", "--topic", "Orders", "--end", "2000-01-01"),
                   "in that time range")
    one_line_error(cluster.mqctl("message", "query", "--id", sent["msg_id"]), "--topic is required")
    one_line_error(cluster.mqctl("message", "query", "--key", "K1"), "--key needs --topic")
    one_line_error(cluster.mqctl("message", "query", "--id", "not-an-id"), "neither an offset msgId")
    one_line_error(cluster.mqctl("message", "query", "--id", sent["msg_id"], "--topic", "NoSuchTopic"),
                   "topic NoSuchTopic does not exist")
    where = decode_offset_msg_id(sent["offset_msg_id"])
    inside = encode_offset_msg_id(where.host, where.port, where.phys_offset + 1)
    one_line_error(cluster.mqctl("message", "query", "--id", inside), f"no message at commitlog offset "
                                                                      f"{where.phys_offset + 1}")
    missing_uniq = "0" * 31 + "1"
    one_line_error(cluster.mqctl("message", "query", "--id", missing_uniq, "--topic", "Orders"), "no message")
    one_line_error(cluster.mqctl("message", "query", "--key", "K1", "--topic", "Orders", "--begin", "someday"),
                   "--begin takes epoch milliseconds or an ISO-8601 date-time")
