"""What a consumer group receives again after its master dies, in each replicated mode: a
consumer crashes (no last commit) at the moment its group's master is SIGKILLed; a new member of
the group goes on from the offsets the surviving brokers hold. It must receive again no more
than the crashed one had received and not yet committed (acknowledged by the broker) at the
kill, and together they receive every message. Printed per mode. Before the offsets travelled
with the log (core/broker/consume/offset_journal.py), slaves held the table as of their last
10 s copy and the 5-minute drills counted 196,940 (sync) and 32,647 (dledger) replays."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from core.client.consumer import PushConsumer
from core.client.producer import Message, Producer
from core.client.runtime import ClientRuntime, open_client
from core.config import Config, load_config
from core.nursery import open_unwrapped_nursery
from mqctl.nodes.leadership import group_infos, leader_of
from mqctl.nodes.processes import running_pid
from tests.conftest import Cluster, running_cluster
from tests.controller_cluster import controlled_cluster, master_of, wait_for

TOPIC = "Redelivered"
GROUP = "redelivery-readers"
MESSAGES = 4000
# 20-30 s each: make test-long measures every mode; make test keeps tests/core/test_offset_journal.py
# (a commit on the slave within tens of milliseconds, and the journal read back after a lost save)
MODES = [pytest.param(mode, marks=pytest.mark.slow) for mode in ("controller", "dledger", "sync", "async")]


@contextlib.contextmanager
def cluster_in(mode: str, tmp_path: Path, env: dict[str, str]) -> Iterator[Cluster]:
    if mode == "controller":
        with controlled_cluster(tmp_path, env) as cluster:
            yield cluster
    else:
        with running_cluster(tmp_path, env, mode=mode, broker_ids=(0, 1, 2) if mode == "dledger" else (0, 1)) as c:
            yield c


def master_node(config: Config, mode: str) -> str:
    if mode == "controller":
        return wait_for(lambda: master_of(config))[0]
    if mode == "dledger":
        return wait_for(lambda: leader_of(group_infos(config, "broker-a")))
    return "broker-a-0"


Seen = dict[tuple[int, int], int]  # (queue id, queue offset) -> times received


async def consume(config: Config, seen: Seen, started: trio.Event, scope: trio.CancelScope,
                  out: dict[str, PushConsumer]) -> None:
    """A member of GROUP that counts what it receives, until ``scope`` is cancelled (a crash:
    no last commit, no goodbye)."""
    one_at_a_time = trio.Lock()

    async def handler(messages):
        async with one_at_a_time:  # a consumer slower than the backlog (500 a second): the kill finds it mid-way
            await trio.sleep(0.002 * len(messages))
            for rec in messages:
                key = (rec.queue_id, rec.queue_offset)
                seen[key] = seen.get(key, 0) + 1
        return True

    with scope:
        async with open_unwrapped_nursery() as nursery:
            runtime = ClientRuntime(nursery, config.namesrv_addresses, instance=f"member-{len(out)}")
            nursery.start_soon(runtime.heartbeat_loop)
            nursery.start_soon(runtime.route_refresh_loop)
            consumer = PushConsumer(runtime, GROUP, handler, from_beginning=True)
            consumer.subscribe(TOPIC)
            await consumer.start()
            out[f"member-{len(out)}"] = consumer
            started.set()
            await trio.sleep_forever()


@pytest.mark.parametrize("mode", MODES)
def test_a_group_receives_again_only_what_it_had_not_committed_when_the_master_died(mode, tmp_path, subprocess_env):
    with cluster_in(mode, tmp_path, subprocess_env) as cluster:
        config = load_config(cluster.config)
        cluster.mqctl("topic", "create", TOPIC)
        master = master_node(config, mode)
        first: Seen = {}
        second: Seen = {}
        facts: dict[str, int] = {}

        async def drill() -> None:
            async with open_client(config.namesrv_addresses, instance="redelivery-producer") as client:
                producer = Producer(client, "redelivery-producer", compression=None)
                for i in range(MESSAGES):
                    await producer.send(Message(TOPIC, f"m{i}".encode()))
            members: dict[str, PushConsumer] = {}
            async with trio.open_nursery() as nursery:
                crash, started = trio.CancelScope(), trio.Event()
                nursery.start_soon(consume, config, first, started, crash, members)
                await started.wait()
                a = members["member-0"]
                with trio.fail_after(60):  # a commit acknowledged, and more received since
                    while not any(a._committed.values()):
                        await trio.sleep(0.02)
                    committed_once = len(first)
                    while len(first) < committed_once + 300:
                        await trio.sleep(0.02)
                committed = {mq.queue_id: offset for mq, offset in a._committed.items()}
                facts["uncommitted"] = sum(1 for (q, o) in first if o >= committed.get(q, 0))
                pid = running_pid(config, master)
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                crash.cancel()
                facts["received_before"] = len(first)
                again_started = trio.Event()
                nursery.start_soon(consume, config, second, again_started, trio.CancelScope(), members)
                with trio.fail_after(120):
                    while len(set(first) | set(second)) < MESSAGES:
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

        trio.run(drill)
        again = sum(1 for key in second if key in first)
        print(f"{mode}: the crashed member had received {facts['received_before']} messages, "
              f"{facts['uncommitted']} not committed at the kill; the group received {again} again")
        assert len(set(first) | set(second)) == MESSAGES
        assert again <= facts["uncommitted"], (again, facts)
