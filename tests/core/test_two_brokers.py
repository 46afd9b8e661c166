"""Two brokers in one process share nothing by accident: each holds what it needs (its keys,
its source address, its name checks, its POP turns, its clock), so a second node in the
process, as a test or an embedding runs it, neither sees nor changes the first one's state."""

from __future__ import annotations

import dataclasses
import gc
import types
from collections import deque

from core.broker.broker import Broker
from core.client.producer import Message, Producer
from core.client.runtime import open_client
from core.config import AclConfig
from core.remoting.client import RemotingClient, open_remoting_client
from core.remoting.codes import ResponseCode
from tests.core.cluster_harness import start_cluster
from tests.core.test_pop import pop_request
from tests.test_house_layout import ROOMS
from tests.test_house_state import immutable

KEYS = AclConfig(access_key="broker-a-admin", secret_key="a-secret-of-a")


def reachable(root: object) -> dict[int, object]:
    """Every mutable object of ours reachable from ``root``: through our own objects' fields,
    containers, bound methods and partials. Library objects (trio's, sockets) are not walked:
    what they hold is theirs."""
    seen: dict[int, object] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        if isinstance(obj, types.MethodType):
            stack.append(obj.__self__)
            continue
        if immutable(obj) and not isinstance(obj, (tuple, frozenset, types.MappingProxyType)):
            continue
        if isinstance(obj, (dict, types.MappingProxyType)):
            children = [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            children = list(obj)
        elif type(obj).__module__.split(".")[0] in ROOMS:
            children = list(getattr(obj, "__dict__", {}).values())
            children += [getattr(obj, s) for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())
                         if isinstance(s, str) and hasattr(obj, s)]
        else:
            continue
        if not immutable(obj):
            seen[id(obj)] = obj
        stack.extend(children)
    return seen


async def test_two_brokers_in_one_process_share_no_state(nursery, tmp_path):
    signed = await start_cluster(nursery, tmp_path / "a")
    signed.config = dataclasses.replace(signed.config, acl=KEYS)  # keys to sign with, ACL itself off
    plain = await start_cluster(nursery, tmp_path / "b")
    a = await signed.start_broker(host="127.0.0.12")
    b = await plain.start_broker()
    for cluster in (signed, plain):
        async with open_client(cluster.namesrv) as client:
            await Producer(client, "TwoProducer").send(Message("TwoTopic", b"x"))
    async with open_remoting_client() as raw:  # a POP that finds messages takes a revive queue turn
        popped = await raw.invoke(a.address, pop_request("TwoTopic"))
    assert popped.code == ResponseCode.SUCCESS

    gc.collect()
    brokers = {broker.address: broker for broker in gc.get_objects() if type(broker) is Broker}
    broker_a, broker_b = brokers[a.address], brokers[b.address]

    held_a, held_b = reachable(broker_a), reachable(broker_b)
    assert len(held_a) > 100 and len(held_b) > 100  # the walk reaches the brokers' parts
    shared = [type(held_a[i]).__qualname__ for i in held_a.keys() & held_b.keys()]
    assert shared == []

    clients_a = [o for o in held_a.values() if type(o) is RemotingClient]
    clients_b = [o for o in held_b.values() if type(o) is RemotingClient]
    assert clients_a and clients_b
    assert {(c.source_host, c.credentials.access_key if c.credentials else None) for c in clients_a} == {
        ("127.0.0.12", KEYS.access_key)}
    assert {(c.source_host, c.credentials) for c in clients_b} == {(None, None)}
    to_namesrv = clients_a[0].connected(signed.namesrv[0])
    assert to_namesrv is not None and to_namesrv.stream.socket.getsockname()[0] == "127.0.0.12"
    assert repr(broker_a.pop_revive_turns) == "count(1)" and repr(broker_b.pop_revive_turns) == "count(0)"
    assert broker_a.names is not broker_b.names
