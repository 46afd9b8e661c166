"""POP through the proxy on a raft group whose leader is SIGKILLed: every message handed out and
not acked comes back from the new leader (its checkpoints are raft entries like any message)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import trio

from core.config import load_config
from core.remoting.client import open_remoting_client
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.record import MessageRecord, decode_records
from mqctl.nodes.leadership import group_infos, leader_of
from mqctl.nodes.processes import running_pid
from tests.conftest import child_env, running_cluster

GROUP = "PopRaft"


def pop(topic: str, invisible_ms: int) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields={
        "consumerGroup": GROUP, "topic": topic, "queueId": "-1", "maxMsgNums": "32",
        "invisibleTime": str(invisible_ms), "pollTime": "1000", "bornTime": "0", "initMode": "0"})


def with_handles(resp: RemotingCommand) -> list[tuple[MessageRecord, str]]:
    ext = resp.ext_fields
    starts = {(e.split()[0], int(e.split()[1])): e.split()[2] for e in ext["startOffsetInfo"].split(";")}
    out = []
    for rec in decode_records(resp.body):
        flag = "1" if rec.topic.startswith("%RETRY%") else "0"
        out.append((rec, f"{starts[(flag, rec.queue_id)]} {ext['popTime']} {ext['invisibleTime']} "
                         f"{ext['reviveQid']} {flag} broker-a {rec.queue_id} {rec.queue_offset}"))
    return out


@pytest.mark.slow  # make test-long (20 s); make test keeps the 5.x client's POP failovers (test_rmq5_failover.py)
def test_popped_and_not_acked_messages_come_back_after_the_leader_is_killed(tmp_path: Path) -> None:
    with running_cluster(tmp_path, child_env(), mode="dledger", broker_ids=(0, 1, 2), proxies=1) as cluster:
        config = load_config(cluster.config)
        sent = cluster.mqctl("send", "PopRaft", "--proxy", "proxy1", "--json",
                             input="".join(f"m{i}\n" for i in range(10)))
        assert sent.returncode == 0, sent.stderr
        host, port = cluster.proxies[0].rsplit(":", 1)
        door = f"{host}:{int(port) + 1}"

        async def first_round() -> set[str]:
            got: list[tuple[MessageRecord, str]] = []
            async with open_remoting_client() as client:
                with trio.fail_after(30):
                    while len(got) < 10:
                        resp = await client.invoke(door, pop("PopRaft", 5000), timeout_s=10)
                        if resp.code == ResponseCode.SUCCESS:
                            got += with_handles(resp)
                for rec, handle in got[:5]:
                    acked = await client.invoke(door, RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields={
                        "consumerGroup": GROUP, "topic": rec.topic, "queueId": str(rec.queue_id),
                        "extraInfo": handle, "offset": str(rec.queue_offset)}))
                    assert acked.code == ResponseCode.SUCCESS, acked.remark
            return {rec.uniq_key for rec, _ in got[5:] if rec.uniq_key}

        unacked = trio.run(first_round)
        leader = leader_of(group_infos(config, "broker-a"))
        assert leader is not None
        pid = running_pid(config, leader)
        assert pid is not None
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)

        async def second_round() -> list[MessageRecord]:
            back: list[MessageRecord] = []
            async with open_remoting_client() as client:
                with trio.fail_after(60):
                    while not unacked <= {r.uniq_key for r in back}:
                        resp = await client.invoke(door, pop("PopRaft", 60_000), timeout_s=10)
                        if resp.code == ResponseCode.SUCCESS:
                            back += [rec for rec, _ in with_handles(resp)]
            return back

        back = trio.run(second_round)
        again = [r for r in back if r.uniq_key in unacked]
        print(f"the 5 un-acked messages came back {time.monotonic() - killed_at:.1f} s after the kill; "
              f"{len(back) - len(again)} other deliveries (re-handed out by the new leader's older offsets)")
        assert {r.uniq_key for r in again} == unacked
        assert all(r.reconsume_times >= 1 for r in again if r.topic.startswith("%RETRY%"))
