"""``host:port`` addresses, the form every node, route and config names a peer by; the one
parser every layer uses::

    "127.0.0.1:10911"  ->  ("127.0.0.1", 10911)
    "[::1]:10911"      ->  ("::1", 10911)        brackets dropped
    "broker-a:0"       ->  ("broker-a", 0)        port 0: bind a free one
"""

from __future__ import annotations

import ipaddress

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port``; ValueError when the port is missing or not a port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"not host:port: {address!r}")
    return host.strip("[]"), int(port)


def join_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def shifted(address: str, by: int) -> str:
    """The same host, ``by`` ports on: a broker's HA port is its port + 1, a proxy's doors follow
    its port."""
    host, port = split_address(address)
    return join_address(host, port + by)


def is_wildcard(host: str) -> bool:
    """Whether a listen host means every address (peers must be told a real one)."""
    return host in WILDCARD_HOSTS


def own_loopback(address: str) -> str | None:
    """The host of ``address`` when it is a loopback address of its own (127.0.0.12, not
    127.0.0.1): a node listening there starts its outgoing connections there too, so peers and
    fault drills can tell it apart."""
    try:
        host = split_address(address)[0]
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if ip.is_loopback and host != "127.0.0.1" else None
