"""SQL92 subscriptions with real processes started by ``mqctl start``: ``mqctl tail --sql``
receives exactly the matching messages of a mixed stream, across a broker restart and from the
slave after the master is killed; a malformed selector and a broker without property filtering
each end ``tail`` with one clear error."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import trio

from core.client.producer import Message, Producer
from core.client.runtime import open_client
from tests.conftest import Cluster, running_cluster
from tests.core.test_property_filter import SELECTOR, mixed_properties, wanted
from tests.mqctl.test_replication import broker_addresses, tail_json, wait_slave_caught_up

BATCH = 210


def send_mixed(cluster: Cluster, first: int, count: int) -> list[int]:
    """Send messages ``first..first+count-1`` with mixed properties; returns the matching ones."""

    async def run() -> None:
        async with open_client([cluster.namesrv]) as client:
            producer = Producer(client, "sql-producer")
            for i in range(first, first + count):
                result = await producer.send(Message("Mixed", f"m{i}".encode(), properties=mixed_properties(i)))
                assert result.status == "SEND_OK", result

    trio.run(run)
    return [i for i in range(first, first + count) if wanted(mixed_properties(i))]


def tail_sql(cluster: Cluster, count: int, *args: str) -> list[int]:
    rows = tail_json(cluster, "Mixed", "--sql", SELECTOR, "--count", str(count), *args)
    return sorted(int(r["properties"]["idx"]) for r in rows)


@pytest.mark.slow  # make test-long (21 s); make test keeps the selector tests below and bench consume's SQL92 run
def test_an_sql92_consumer_gets_exactly_the_matching_messages_across_a_restart_and_a_failover(
        tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker_ids=(0, 1),
                         broker="enable_property_filter = true") as cluster:
        first = send_mixed(cluster, 0, BATCH)
        assert tail_sql(cluster, len(first), "--group", "sql-group", "--from-beginning") == first

        restarted = cluster.mqctl("restart", "broker-a-0")
        assert restarted.returncode == 0, restarted.stderr
        second = send_mixed(cluster, BATCH, BATCH)
        # the group resumes where it committed: the second batch's matches, none of the first's
        assert tail_sql(cluster, len(second), "--group", "sql-group") == second

        third = send_mixed(cluster, 2 * BATCH, BATCH)
        nodes = broker_addresses(cluster)
        wait_slave_caught_up(nodes["broker-a-0"], nodes["broker-a-1"])
        killed = cluster.mqctl("stop", "broker-a-0", "--force")
        assert killed.returncode == 0, killed.stderr
        # a new group reads everything from the slave, filtered there
        assert tail_sql(cluster, len(first + second + third), "--group", "after-failover",
                        "--from-beginning") == first + second + third


def test_tail_ends_with_one_clear_line_for_a_malformed_selector_and_shows_the_selector_while_it_runs(
        tmp_path, subprocess_env):
    with running_cluster(tmp_path, subprocess_env, broker="enable_property_filter = true") as cluster:
        send_mixed(cluster, 0, 20)
        bad = cluster.mqctl("tail", "Mixed", "--sql", "region = = 'eu'", "--count", "1", timeout=60)
        assert bad.returncode != 0
        assert "parse the consumer's subscription failed: expected a property, a literal or (, found '=' " \
               "(at column 10)" in bad.stderr
        assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr

        both = cluster.mqctl("tail", "Mixed", "--sql", SELECTOR, "--tags", "a", "--count", "1", timeout=60)
        assert both.returncode != 0 and "give --tags or --sql, not both" in both.stderr

        # a running SQL92 consumer is listed with its selector
        tail = subprocess.Popen([sys.executable, "-m", "mqctl", "--config", str(cluster.config), "tail", "Mixed",
                                 "--group", "watchers", "--sql", SELECTOR], env=cluster.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            listed = wait_listed(cluster, "watchers")
            text = cluster.mqctl("consumer", "list", "watchers")
        finally:
            tail.kill()
            tail.wait(10)
        assert {"topic": "Mixed", "expression": SELECTOR, "type": "SQL92"} in listed["subscriptions"]
        assert text.returncode == 0 and f"Mixed(SQL92: {SELECTOR})" in text.stdout, text.stdout


def wait_listed(cluster: Cluster, group: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = cluster.mqctl("consumer", "list", group, "--json")
        if listed.returncode == 0 and listed.stdout.strip():
            return json.loads(listed.stdout.splitlines()[0])
        time.sleep(0.2)
    raise AssertionError(f"group {group} never came online")


def test_tail_by_sql92_on_a_broker_without_property_filtering_is_refused_clearly(cluster):
    send_mixed(cluster, 0, 5)
    refused = cluster.mqctl("tail", "Mixed", "--sql", SELECTOR, "--count", "1", timeout=60)
    assert refused.returncode != 0
    assert "The broker does not support consumer to filter message by SQL92 " \
           "(broker.enable_property_filter = false)" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    by_tag = tail_json(cluster, "Mixed", "--from-beginning", "--count", "5")  # tags still served
    assert len(by_tag) == 5
