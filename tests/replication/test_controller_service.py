"""The controller hosted by three real name servers (in one process, over loopback), asked as a
broker asks it: registration, heartbeats, the first election (the configured id 0), a
SyncStateSet change, an election when the master's connection drops (timed), fencing, and the
state surviving the death of the controller's raft leader."""

from __future__ import annotations

import time

import orjson
import pytest
import trio

from core.acl.requests import ADMIN_CODES, NAMES_NOTHING
from core.config import parse_config
from core.errors import CoreError
from core.plugin_manager import PluginHost
from core.plugin_markers import hookimpl
from core.remoting.client import RemotingClient
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import Credentials
from core.servers.namesrv import serve_nameserver
from plugins import plugin_host, routing
from replication.controller.service import ControllerService
from tests.conftest import free_port

GROUP = "broker-a"


def controller_config(tmp_path, count: int = 3, acl: dict | None = None):
    nodes = [{"name": f"ns{i}", "listen": f"127.0.0.1:{free_port()}"} for i in range(count)]
    raw = {"cluster": {"data_dir": str(tmp_path)}, "replication": {"mode": "sync", "controller": True},
           "nameservers": nodes, "acl": acl or {}}
    return parse_config(raw, source=tmp_path / "conf.toml")


class NameServers:
    """The name servers of ``config``, each stoppable on its own."""

    def __init__(self, config, tmp_path) -> None:
        self.config, self.tmp_path = config, tmp_path
        self.scopes: dict[str, trio.CancelScope] = {}
        self.stopped: dict[str, trio.Event] = {}

    async def start(self, nursery: trio.Nursery, name: str) -> None:
        node = self.config.nameserver(name)
        scope, stopped = trio.CancelScope(), trio.Event()
        self.scopes[name], self.stopped[name] = scope, stopped

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await serve_nameserver(node, self.config, plugin_host(load_entry_points=False),
                                           data_dir=self.tmp_path, task_status=task_status)
            finally:
                stopped.set()
        await nursery.start(run)

    async def stop(self, name: str) -> None:
        self.scopes[name].cancel()
        with trio.fail_after(5):
            await self.stopped[name].wait()


class FakeBroker:
    """A broker as the controller sees it: its own connection, its heartbeats, the notices it gets."""

    def __init__(self, nursery: trio.Nursery, config, broker_id: int, credentials: Credentials | None = None) -> None:
        self.id = broker_id
        self.address = f"127.0.0.1:{10911 + 10 * broker_id}"
        self.notices: list[RemotingCommand] = []
        self.told: list[tuple[str, str]] = []  # (master epoch, master id) as heartbeat answers said
        self.noticed = trio.Event()
        self.client = RemotingClient(nursery, self, credentials=credentials)
        self.namesrvs = config.namesrv_addresses
        self.leader = self.namesrvs[0]

    def process(self, request, conn):
        if request.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            self.notices.append(request)
            self.noticed.set()
        return None

    async def ask(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        """Ask the controller's leader, following NOT_LEADER answers."""
        with trio.fail_after(10):
            while True:
                try:
                    reply = await self.client.invoke(self.leader, RemotingCommand(code=code, ext_fields=dict(fields),
                                                                                 body=body), 2.0)
                except Exception:  # that name server is down: try the next
                    reply = None
                if reply is not None and reply.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    return reply
                hint = reply.ext_fields.get("controllerLeaderAddress") if reply is not None else None
                self.leader = hint or self.namesrvs[(self.namesrvs.index(self.leader) + 1) % len(self.namesrvs)]
                await trio.sleep(0.05)

    async def register(self) -> RemotingCommand:
        return await self.ask(RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": "DefaultCluster", "brokerName": GROUP, "brokerId": str(self.id),
            "brokerAddress": self.address})

    async def beat(self, max_offset: int = 0, epoch: int = 0, confirm: int = -1) -> RemotingCommand:
        reply = await self.ask(RequestCode.BROKER_HEARTBEAT, {
            "clusterName": "DefaultCluster", "brokerName": GROUP, "brokerId": str(self.id),
            "brokerAddr": self.address, "epoch": str(epoch), "maxOffset": str(max_offset),
            "confirmOffset": str(confirm)})
        if reply.code == ResponseCode.SUCCESS and "masterBrokerId" in reply.ext_fields:
            self.told.append((reply.ext_fields["masterEpoch"], reply.ext_fields["masterBrokerId"]))
        return reply

    async def beat_forever(self, max_offset: int = 0) -> None:
        while True:
            await self.beat(max_offset)
            await trio.sleep(0.2)


async def replica_info(broker: FakeBroker) -> RemotingCommand:
    return await broker.ask(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})


async def wait_master(broker: FakeBroker, epoch: int) -> RemotingCommand:
    with trio.fail_after(10):
        while True:
            info = await replica_info(broker)
            if info.code == ResponseCode.SUCCESS and int(info.ext_fields["masterEpoch"]) >= epoch:
                return info
            await trio.sleep(0.05)


async def test_controller_elects_fences_and_fails_over_within_a_second(tmp_path):
    config = controller_config(tmp_path)
    servers = NameServers(config, tmp_path)
    async with trio.open_nursery() as nursery:
        for ns in config.nameservers:
            await servers.start(nursery, ns.name)
        brokers = [FakeBroker(nursery, config, i) for i in (1, 2, 0)]  # id 0 registers last
        beats: dict[int, trio.CancelScope] = {}
        for b in brokers:
            assert (await b.register()).code == ResponseCode.SUCCESS
            # the lagging slave beats with the longest log: the first election still picks id 0
            assert (await b.beat(max_offset=500 if b.id == 1 else 100)).code == ResponseCode.SUCCESS
        for b in brokers:
            scope = trio.CancelScope()
            beats[b.id] = scope

            async def beat(b=b, scope=scope) -> None:
                with scope:
                    await b.beat_forever()
            nursery.start_soon(beat)
        by_id = {b.id: b for b in brokers}
        info = await wait_master(by_id[0], 1)
        assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterAddress"]) == ("0", by_id[0].address)
        with trio.fail_after(5):
            await by_id[2].noticed.wait()
        assert by_id[2].notices[-1].ext_fields["masterBrokerId"] == "0"
        # the master's confirm offset reaches its slaves with their heartbeats' answers
        assert "confirmOffset" not in (await by_id[2].beat()).ext_fields
        await by_id[0].beat(max_offset=900, epoch=0, confirm=800)  # an epoch it is not master of: ignored
        assert "confirmOffset" not in (await by_id[2].beat()).ext_fields
        await by_id[0].beat(max_offset=900, epoch=1, confirm=800)
        assert (await by_id[2].beat()).ext_fields["confirmOffset"] == "800"

        # the master adds broker 1 to its SyncStateSet; a stale epoch is fenced
        def alter(members, epoch, master_epoch="1"):
            return by_id[0].ask(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                                {"brokerName": GROUP, "masterBrokerId": "0", "masterEpoch": master_epoch},
                                orjson.dumps({"syncStateSet": members, "syncStateSetEpoch": epoch}))
        assert (await alter([0, 1], 0)).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        assert (await alter([0, 1], 1, master_epoch="0")).code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
        altered = await alter([0, 1], 1)
        assert altered.code == ResponseCode.SUCCESS and altered.ext_fields["newSyncStateSetEpoch"] == "2"

        # the master dies: its heartbeats stop and its connection drops
        by_id[1].noticed = trio.Event()
        beats[0].cancel()
        dropped = time.monotonic()
        by_id[0].client.close()
        with trio.fail_after(5):
            await by_id[1].noticed.wait()
        took = time.monotonic() - dropped
        print(f"controller failover: master's connection dropped -> notice at the new master in {took * 1000:.0f} ms")
        assert took < 1.0
        notice = by_id[1].notices[-1]
        assert notice.ext_fields["masterBrokerId"] == "1" and notice.ext_fields["masterEpoch"] == "2"
        assert orjson.loads(notice.body) == {"syncStateSet": [1], "syncStateSetEpoch": 3}
        # broker 2 was never in sync: it was not a candidate
        # the old master's SyncStateSet change under its old epoch is fenced
        assert (await alter([0], 3)).code == ResponseCode.CONTROLLER_INVALID_MASTER

        # the controller's raft leader dies: another member leads with the same state
        leader = next(ns.name for ns in config.nameservers if ns.address == by_id[1].leader)
        await servers.stop(leader)
        info = await wait_master(by_id[2], 2)
        assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("1", "2")
        assert orjson.loads(info.body) == {"syncStateSet": [1], "syncStateSetEpoch": 3}
        nursery.cancel_scope.cancel()


async def test_a_non_leader_says_where_the_leader_is_and_bad_requests_are_refused(tmp_path):
    config = controller_config(tmp_path)
    servers = NameServers(config, tmp_path)
    async with trio.open_nursery() as nursery:
        for ns in config.nameservers:
            await servers.start(nursery, ns.name)
        broker = FakeBroker(nursery, config, 0)
        await broker.register()
        leader = broker.leader
        follower = next(a for a in config.namesrv_addresses if a != leader)
        reply = await broker.client.invoke(follower, RemotingCommand(
            code=RequestCode.CONTROLLER_GET_REPLICA_INFO, ext_fields={"brokerName": GROUP}))
        assert reply.code == ResponseCode.CONTROLLER_NOT_LEADER
        assert reply.ext_fields["controllerLeaderAddress"] == leader
        meta = await broker.client.invoke(follower, RemotingCommand(code=RequestCode.CONTROLLER_GET_METADATA_INFO))
        assert meta.code == ResponseCode.SUCCESS and meta.ext_fields["isLeader"] == "false"
        assert meta.ext_fields["controllerLeaderAddress"] == leader
        for code, fields, body in [
            (RequestCode.CONTROLLER_REGISTER_BROKER, {"brokerName": "a b", "brokerId": "0", "brokerAddress": "x:1"}, b""),
            (RequestCode.CONTROLLER_REGISTER_BROKER, {"brokerName": GROUP, "brokerId": "x", "brokerAddress": "x:1"}, b""),
            (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": GROUP, "masterBrokerId": "0",
                                                           "masterEpoch": "1"}, b'{"syncStateSet": "all"}'),
            (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"[1, 2]"),
            (RequestCode.CLEAN_BROKER_DATA, {"brokerName": GROUP, "brokerControllerIdsToClean": "1;x"}, b""),
        ]:
            reply = await broker.ask(code, fields, body)
            assert reply.code == ResponseCode.CONTROLLER_INVALID_REQUEST, (code, reply.remark)
        unknown = await broker.ask(RequestCode.BROKER_HEARTBEAT, {
            "clusterName": "c", "brokerName": GROUP, "brokerId": "7", "brokerAddr": "127.0.0.1:1"})
        assert unknown.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        data = await broker.ask(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, orjson.dumps([GROUP, "nobody"]))
        table = orjson.loads(data.body)["replicasInfoTable"]
        assert list(table) == [GROUP] and table[GROUP]["notInSyncReplicas"][0]["brokerId"] == 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("count", [1, 2])
def test_one_or_two_name_servers_still_form_a_controller_group(tmp_path, count):
    config = controller_config(tmp_path, count)
    assert config.listens_of("ns0") == [config.nameservers[0].listen,
                                       f"127.0.0.1:{int(config.nameservers[0].listen.rsplit(':', 1)[1]) + 1}"]


def test_every_controller_code_has_one_acl_row(tmp_path):
    codes = ControllerService(controller_config(tmp_path).nameservers[0], controller_config(tmp_path), tmp_path).codes
    assert len(codes) == 12
    for code in codes | {RequestCode.NOTIFY_BROKER_ROLE_CHANGED, RequestCode.GET_BROKER_EPOCH_CACHE}:
        assert (code in ADMIN_CODES) + (code in NAMES_NOTHING) == 1, RequestCode(code).name


async def test_with_acl_on_state_changes_need_an_admin_and_reads_a_signature(tmp_path):
    (tmp_path / "plain_acl.yml").write_text(
        "accounts:\n  - accessKey: cluster-admin\n    secretKey: cluster-secret\n    admin: true\n"
        "  - accessKey: reader-key\n    secretKey: reader-secret\n")
    config = controller_config(tmp_path, acl={"enabled": True, "access_key": "cluster-admin",
                                              "secret_key": "cluster-secret"})
    servers = NameServers(config, tmp_path)
    async with trio.open_nursery() as nursery:
        for ns in config.nameservers:
            await servers.start(nursery, ns.name)
        admin = FakeBroker(nursery, config, 0, Credentials("cluster-admin", "cluster-secret"))
        reader = FakeBroker(nursery, config, 1, Credentials("reader-key", "reader-secret"))
        nobody = FakeBroker(nursery, config, 2)
        assert (await admin.register()).code == ResponseCode.SUCCESS
        for broker in (reader, nobody):
            refused = await broker.register()
            assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
            assert (await broker.beat()).code == ResponseCode.NO_PERMISSION
        assert (await replica_info(reader)).code == ResponseCode.SUCCESS
        assert (await replica_info(nobody)).code == ResponseCode.NO_PERMISSION
        nursery.cancel_scope.cancel()


class NoController:
    """A plugin that makes no controller: a name server asked to host one refuses to start."""

    @staticmethod
    @hookimpl
    def mq_controller(node, config, data_dir):
        return None


async def test_a_name_server_whose_plugins_make_no_controller_refuses_to_start(tmp_path):
    config = controller_config(tmp_path, 1)
    plugins = PluginHost([routing, NoController()], load_entry_points=False)
    with pytest.raises(CoreError, match="no plugin makes the controller"):
        await serve_nameserver(config.nameservers[0], config, plugins, data_dir=tmp_path)


# before, around and after the election's commit; make test runs the middle one
@pytest.mark.parametrize("after_s", [pytest.param(0.0, marks=pytest.mark.slow), 0.17,
                                     pytest.param(0.25, marks=pytest.mark.slow)])
async def test_the_controller_leader_killed_during_an_election_leaves_one_master_per_epoch(tmp_path, after_s):
    config = controller_config(tmp_path)
    servers = NameServers(config, tmp_path)
    async with trio.open_nursery() as nursery:
        for ns in config.nameservers:
            await servers.start(nursery, ns.name)
        brokers = {i: FakeBroker(nursery, config, i) for i in (0, 1, 2)}
        beats = {}
        for b in brokers.values():
            await b.register()
            scope = beats[b.id] = trio.CancelScope()

            async def beat(b=b, scope=scope) -> None:
                with scope:
                    await b.beat_forever(max_offset=100)
            nursery.start_soon(beat)
        await wait_master(brokers[1], 1)
        altered = await brokers[0].ask(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": GROUP, "masterBrokerId": "0", "masterEpoch": "1"},
            orjson.dumps({"syncStateSet": [0, 1, 2], "syncStateSetEpoch": 1}))
        assert altered.code == ResponseCode.SUCCESS
        # the master dies, and with it (as the election starts) the controller's raft leader
        leader = next(ns.name for ns in config.nameservers if ns.address == brokers[1].leader)
        beats[0].cancel()
        brokers[0].client.close()
        await trio.sleep(after_s)  # the second fault's timing (the dropped connection counts after 150 ms)
        await servers.stop(leader)
        info = await wait_master(brokers[1], 2)
        assert info.ext_fields["masterBrokerId"] in ("1", "2")
        await servers.start(nursery, leader)  # the old leader returns, as a follower
        # what the brokers were told, pushed or in their heartbeats' answers (a leader that died
        # between committing an election and pushing its notices leaves the answers to tell)
        with trio.fail_after(10):
            while True:
                said = [(n.ext_fields["masterEpoch"], n.ext_fields["masterBrokerId"])
                        for b in (brokers[1], brokers[2]) for n in b.notices]
                said += brokers[1].told + brokers[2].told
                by_epoch: dict[str, set[str]] = {}
                for epoch, master in said:
                    by_epoch.setdefault(epoch, set()).add(master)
                if all(any(e == "2" for e, _ in b.told) for b in (brokers[1], brokers[2])):
                    break
                await trio.sleep(0.05)
        assert all(len(masters) == 1 for masters in by_epoch.values()), by_epoch
        assert (await wait_master(brokers[2], 2)).ext_fields["masterEpoch"] == info.ext_fields["masterEpoch"]
        nursery.cancel_scope.cancel()
