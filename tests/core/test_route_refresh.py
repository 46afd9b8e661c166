"""The client runtime fetches every route in use again every 30 s, on trio's MockClock (an
in-process name server and brokers on loopback; the clock jumps only when everything has been
idle for 5 ms of real time, longer than a loopback answer takes; a jump goes to the next
deadline, mostly the connections' 50 ms sweeps, so a reply 3 s of timeout away is never overtaken)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio
import trio.testing

from core.client.consumer import REBALANCE_S, PushConsumer
from core.client.producer import Message, Producer, SendError
from core.client.runtime import ROUTE_REFRESH_S, ClientRuntime
from core.config import BrokerSettings
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from tests.core.cluster_harness import SMALL_STORE, InProcessCluster, start_cluster


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.005)


async def two_brokers_with_topic(nursery: trio.Nursery, tmp_path: Path) -> tuple[InProcessCluster, ClientRuntime]:
    """broker-a and broker-b, each with topic Refresh (2 queues), and a client runtime."""
    # few timers of their own, so the clock gets to 30 s in few jumps
    cluster = await start_cluster(nursery, tmp_path, broker=BrokerSettings(register_interval_ms=10_000),
                                  store=dataclasses.replace(SMALL_STORE, flush_interval_ms=1000, checkpoint_interval_ms=5000))
    brokers = [await cluster.start_broker("broker-a"), await cluster.start_broker("broker-b")]
    runtime = ClientRuntime(nursery, cluster.namesrv)
    for broker in brokers:
        created = await runtime.invoke(broker.address, RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_TOPIC,
            ext_fields={"topic": "Refresh", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}))
        assert created.code == ResponseCode.SUCCESS
    with trio.fail_after(30):
        while True:  # virtual seconds: until both brokers registered the topic
            route = await runtime.route("Refresh", refresh=True)
            if route is not None and set(route.brokers) == {"broker-a", "broker-b"}:
                return cluster, runtime
            await trio.sleep(1)


async def test_a_broker_that_left_is_dropped_from_routes_and_fault_table_by_the_periodic_refresh(
        tmp_path, nursery, mock_clock):
    cluster, runtime = await two_brokers_with_topic(nursery, tmp_path)
    nursery.start_soon(runtime.route_refresh_loop)
    producer = Producer(runtime, "PG", latency_fault=True)
    changes: list[str] = []
    runtime.route_listeners.append(lambda topic, route: changes.append(topic))
    sent = [await producer.send(Message("Refresh", b"x")) for _ in range(8)]
    assert {r.queue.broker_name for r in sent} == {"broker-a", "broker-b"}
    assert {r.broker for r in producer.fault_rows()} == {"broker-a", "broker-b"}

    await cluster.stop_broker("broker-b-0")  # its registration connection closes: the name server drops it
    nursery.start_soon(runtime.route_refresh_loop)  # its first round falls 30 s from now
    fetched_before = trio.current_time()
    changes.clear()
    await trio.sleep(ROUTE_REFRESH_S - 1)
    assert not changes and {r.broker for r in producer.fault_rows()} == {"broker-a", "broker-b"}
    await trio.sleep(2)  # past the 30 s mark: the loop asked the name servers again, unprompted
    assert "Refresh" in changes
    assert [r.broker for r in producer.fault_rows()] == ["broker-a"]
    route = await runtime.route("Refresh")
    assert route is not None and set(route.brokers) == {"broker-a"}
    assert trio.current_time() - fetched_before < ROUTE_REFRESH_S + 5


async def test_a_consumer_rebalances_as_soon_as_a_route_it_reads_changes(tmp_path, nursery, mock_clock):
    cluster, runtime = await two_brokers_with_topic(nursery, tmp_path)
    async def consume(messages: list) -> bool:
        return True

    consumer = PushConsumer(runtime, "CG", consume)
    consumer.subscribe("Refresh")
    await consumer.start()

    def held() -> set[str]:
        return {q["brokerName"] for q in consumer.running_info()["mqTable"] if q["topic"] == "Refresh"}

    assert held() == {"broker-a", "broker-b"}
    await cluster.stop_broker("broker-b-0")
    started = trio.current_time()
    await runtime.route("Refresh", refresh=True)  # as a producer's failure or the 30 s refresh would
    with trio.fail_after(1):  # well before the periodic rebalance (every REBALANCE_S)
        while held() != {"broker-a"}:
            await trio.sleep(0.01)
    assert trio.current_time() - started < REBALANCE_S
    await consumer.stop()


async def test_a_master_that_registers_again_is_written_to_at_once_not_after_the_refresh(
        tmp_path, nursery, mock_clock):
    """While only its slave is registered, a group's route has no writable queue. The route
    without one is asked for again on every send, so sends resume as soon as the master is back."""
    cluster = await start_cluster(nursery, tmp_path, broker=BrokerSettings(register_interval_ms=10_000),
                                  store=dataclasses.replace(SMALL_STORE, flush_interval_ms=1000, checkpoint_interval_ms=5000))
    master = await cluster.start_broker("broker-a")
    await cluster.start_broker("broker-a", broker_id=1)
    runtime = ClientRuntime(nursery, cluster.namesrv)
    created = await runtime.invoke(master.address, RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_TOPIC,
        ext_fields={"topic": "Gap", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}))
    assert created.code == ResponseCode.SUCCESS
    producer = Producer(runtime, "PG")
    with trio.fail_after(30):
        while (await runtime.route("Gap", refresh=True)) is None:
            await trio.sleep(1)
    assert (await producer.send(Message("Gap", b"before"))).status == "SEND_OK"

    await cluster.stop_broker("broker-a-0")  # the name server drops it; the slave stays
    with pytest.raises(SendError):
        await producer.send(Message("Gap", b"no master"))
    route = await runtime.route("Gap")
    assert route is not None and set(route.brokers["broker-a"]) == {1} and not route.write_queues

    port = master.address.rsplit(":", 1)[1]
    await cluster.start_broker("broker-a", port=int(port))  # registers as it starts
    back = trio.current_time()
    with trio.fail_after(ROUTE_REFRESH_S):
        while True:
            try:
                result = await producer.send(Message("Gap", b"after"))
            except SendError:
                await trio.sleep(0.1)
                continue
            break
    assert result.status == "SEND_OK" and trio.current_time() - back < 2
