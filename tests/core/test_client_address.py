"""The address a client names itself by (its client id, the first field of its message ids): the
one its name server sees, not whatever the host name resolves to."""

from __future__ import annotations

import trio

from core.client.producer import Message, Producer
from core.client.runtime import ClientRuntime, local_ip_towards
from formats.properties import UNIQ_KEY


def test_the_source_address_towards_the_name_server_is_this_clients_address() -> None:
    assert local_ip_towards("127.0.0.1:9876") == "127.0.0.1"
    assert local_ip_towards("no-such-host.invalid:9876") == "127.0.0.1"  # unresolvable: loopback
    assert local_ip_towards("not an address") == "127.0.0.1"


def test_a_client_connecting_from_a_chosen_address_names_itself_by_it() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            runtime = ClientRuntime(nursery, ["127.0.0.1:1"], source_host="127.0.0.12")
            props = Producer(runtime, "AddressGroup")._properties(Message("T", b"x"))
            assert runtime.client_id.startswith("127.0.0.12@")
            assert props[UNIQ_KEY].startswith("7F00000C")  # 127.0.0.12 packed, RocketMQ's id layout
            assert runtime.remoting.source_host == "127.0.0.12"
            other = ClientRuntime(nursery, ["127.0.0.1:1"])  # the same process, no chosen address
            assert other.client_id.startswith("127.0.0.1@") and other.remoting.source_host is None

    trio.run(main)
