"""``mqctl bench failover``: how long a group that elects (a raft group, or a master-slave group
under a controller) is without a leader and without sends after its leader is killed, measured
on the running cluster of the config.

```
 producer:  send idx=0,1,2,...  one at a time; each ack (queue, offset) and each failure noted
 killer:    leader? --SIGKILL--> poll every member's runtime info (every POLL_S)
            |  elected_s: a survivor reports leader of a newer term
            |  writable_s: it takes writes (its term's first entry committed)
            |  sends_ok_s: the first send started after the kill is acknowledged
            restart the killed node, wait until it holds the leader's last index, next kill
```
The acknowledged sends can be written to a file (``--record``) so a drill can check that every
one of them is consumed afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from core.client.producer import Message, Producer, SendError
from core.client.runtime import open_client
from core.config import Config
from core.node_specs import BrokerNode
from mqctl.common import probe
from mqctl.common.context import load
from mqctl.common.errors import CliError
from mqctl.common.options import JsonOutput
from mqctl.common.output import print_rows
from mqctl.common.progress import Bar, progress_bar
from mqctl.nodes.commands import start_nodes
from mqctl.nodes.leadership import caught_up_with_leader, leader_of
from mqctl.nodes.processes import nodes_of, running_pid
from mqctl.nodes.replication_view import controller_master

POLL_S = 0.02
RESTART_TIMEOUT_S = 60.0
Infos = dict[str, dict[str, str] | None]


@dataclass(frozen=True, slots=True)
class Watch:
    """How a mode's members say who leads (from their runtime tables), and its targets."""

    leader: Callable[[Infos], str | None]
    term: Callable[[dict[str, str]], int]
    leads: Callable[[dict[str, str]], bool]  # elected (a raft leader may not take writes yet)
    writable: Callable[[dict[str, str]], bool]
    caught_up: Callable[[Infos, BrokerNode], bool]
    election_target_s: float
    sends_target_s: float


def _in_sync_set(infos: Infos, node: BrokerNode) -> bool:
    master = controller_master(infos)
    info = infos.get(master) if master else None
    return bool(info) and node.id in json.loads((info or {}).get("haSyncStateSet") or "[]")


RAFT = Watch(leader_of, lambda i: int(i.get("raftTerm", "0")), lambda i: i.get("haRole") == "leader",
             lambda i: i.get("raftWritable") == "true", lambda infos, n: caught_up_with_leader(infos, n.node) is not None,
             2.5, 3.5)
CONTROLLER = Watch(controller_master, lambda i: int(i.get("haMasterEpoch", "0")), lambda i: i.get("haRole") == "master",
                   lambda i: i.get("haRole") == "master", _in_sync_set, 1.0, 1.0)


@dataclass(slots=True)
class Kill:
    node: str
    killed_at: float  # monotonic
    term_before: int
    new_leader: str | None = None
    elected_s: float | None = None
    writable_s: float | None = None
    sends_ok_s: float | None = None


@dataclass(slots=True)
class Tally:
    acked: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0
    sent: int = 0


async def _member_infos(members: list[BrokerNode]) -> dict[str, dict[str, str] | None]:
    return await probe.runtime_infos({m.node: m.listen for m in members})


async def _wait_leader(members: list[BrokerNode], watch: Watch, timeout_s: float) -> tuple[str, dict[str, str]]:
    with trio.fail_after(timeout_s):
        while True:
            infos = await _member_infos(members)
            leader = watch.leader(infos)
            if leader is not None:
                return leader, infos[leader] or {}
            await trio.sleep(POLL_S)


async def _produce(namesrv: list[str], topic: str, body_size: int, tally: Tally, kills: list[Kill],
                   stop: trio.Event) -> None:
    body = b"f" * body_size
    async with open_client(namesrv, instance="bench-failover") as client:
        producer = Producer(client, "mqctl-bench-failover", compression=None, timeout_s=3.0, retries=2)
        idx = 0
        while not stop.is_set():
            started, mine = time.monotonic(), idx
            idx += 1
            tally.sent += 1
            try:
                result = await producer.send(Message(topic, body, properties={"idx": str(mine)}))
            except SendError:
                tally.failures += 1
                await trio.sleep(POLL_S)
                continue
            tally.acked.append({"idx": mine, "queue_id": result.queue.queue_id, "queue_offset": result.queue_offset,
                                "broker": result.queue.broker_name, "msg_id": result.msg_id})
            for kill in kills:
                if kill.sends_ok_s is None and started >= kill.killed_at:
                    kill.sends_ok_s = time.monotonic() - kill.killed_at


async def _drill(config: Config, members: list[BrokerNode], watch: Watch, kills_wanted: int, tally: Tally,
                 kills: list[Kill], warmup: int, bar: Bar) -> None:
    for _ in range(kills_wanted):
        with trio.fail_after(RESTART_TIMEOUT_S):
            while len(tally.acked) < warmup * (len(kills) + 1):
                await trio.sleep(POLL_S)
        leader, info = await _wait_leader(members, watch, RESTART_TIMEOUT_S)
        pid = running_pid(config, leader)
        if pid is None:
            raise CliError(f"leader {leader} has no pid file: start the cluster with mqctl start")
        kill = Kill(leader, time.monotonic(), watch.term(info))
        os.kill(pid, signal.SIGKILL)
        kills.append(kill)
        survivors = [m for m in members if m.node != leader]
        with trio.fail_after(RESTART_TIMEOUT_S):
            while kill.writable_s is None:
                for node, member in (await _member_infos(survivors)).items():
                    if not member or watch.term(member) <= kill.term_before:
                        continue
                    if kill.elected_s is None and watch.leads(member):
                        kill.elected_s, kill.new_leader = time.monotonic() - kill.killed_at, node
                    if watch.writable(member):
                        kill.writable_s = time.monotonic() - kill.killed_at
                        kill.new_leader = node
                        if kill.elected_s is None:
                            kill.elected_s = kill.writable_s
                await trio.sleep(POLL_S)
        with trio.fail_after(RESTART_TIMEOUT_S):
            while kill.sends_ok_s is None:
                await trio.sleep(POLL_S)
        await trio.to_thread.run_sync(
            start_nodes, config, nodes_of(config, [leader]), time.monotonic() + RESTART_TIMEOUT_S)
        killed = next(m for m in members if m.node == leader)
        with trio.fail_after(RESTART_TIMEOUT_S):  # it holds what the group holds before the next kill
            while not watch.caught_up(await _member_infos(members), killed):
                await trio.sleep(POLL_S * 5)
        bar.advance()


def bench_failover(
    ctx: typer.Context,
    group: Annotated[str | None, typer.Option(help="Broker group to drill (default: the first).")] = None,
    kills: Annotated[int, typer.Option(help="Leaders to kill, one after another.")] = 3,
    topic: Annotated[str, typer.Option(help="Topic the producer sends to.")] = "BenchFailover",
    warmup: Annotated[int, typer.Option(help="Acknowledged sends before each kill.")] = 200,
    body_size: Annotated[int, typer.Option(help="Body bytes of each message.")] = 1024,
    record: Annotated[Path | None, typer.Option(help="Write each acknowledged send here (JSON lines).")] = None,
    as_json: JsonOutput = False,
) -> None:
    """Time failovers: SIGKILL the leader (dledger) or master (controller) N times.

    Kill the leader (raft) or master (controller mode) of a group with SIGKILL KILLS times
    (restarting it each time) while a producer sends, and time the election, the new
    leader's first write and the first acknowledged send after each kill. Targets: dledger,
    elected < 2.5 s and sends again < 3.5 s; controller mode, both < 1 s."""
    config = load(ctx)
    if config.replication.mode == "dledger":
        watch = RAFT
    elif config.replication.controller:
        watch = CONTROLLER
    else:
        raise CliError(f"replication.mode is {config.replication.mode!r} without a controller: nobody is "
                       "elected (failover drills need dledger or replication.controller)")
    name = group or (config.brokers[0].name if config.brokers else None)
    members = [b for b in config.brokers if b.name == name]
    if len(members) < 3:
        raise CliError(f"group {name} has {len(members)} members: a drill needs at least 3")
    tally, done = Tally(), list[Kill]()

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_produce, config.namesrv_addresses, topic, body_size, tally, done, stop)
            try:
                await _drill(config, members, watch, kills, tally, done, warmup, bar)
                acked = len(tally.acked)
                with trio.fail_after(RESTART_TIMEOUT_S):
                    while len(tally.acked) < acked + warmup:  # sends go on after the last restart
                        await trio.sleep(POLL_S)
            finally:
                stop.set()

    with progress_bar("bench failover: leaders killed", kills, quiet=as_json) as bar:
        trio.run(main)
    if record is not None:
        record.write_text("".join(json.dumps(row) + "\n" for row in tally.acked))
    rows = [{"kill": i + 1, **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(k).items()
                               if k != "killed_at"}} for i, k in enumerate(done)]
    summary = {"acked": len(tally.acked), "failed_sends": tally.failures, "sent": tally.sent,
               "elected_s_max": max(k.elected_s or 0 for k in done), "sends_ok_s_max": max(k.sends_ok_s or 0 for k in done),
               "election_target_s": watch.election_target_s, "sends_target_s": watch.sends_target_s}
    if as_json:
        typer.echo(json.dumps({"kills": rows, **summary}))
        return
    print_rows(rows, ("kill", "node", "term_before", "new_leader", "elected_s", "writable_s", "sends_ok_s"),
               as_json=False)
    typer.echo(f"acknowledged {summary['acked']} of {summary['sent']} sends ({summary['failed_sends']} failed "
               f"while no leader took writes); worst election {summary['elected_s_max']:.3f} s "
               f"(target {watch.election_target_s} s), worst time to sends again {summary['sends_ok_s_max']:.3f} s "
               f"(target {watch.sends_target_s} s)")
