"""RocketMQ-compatible access control: accounts, permissions, white-listed addresses, and which
resources each request touches. Sans-IO: :meth:`AclPolicy.check` answers one request.

Checks, in order (RocketMQ's ``PlainPermissionManager.validate``, with two gaps closed):

1. the peer's address is in ``globalWhiteRemoteAddresses``: allowed, nothing else checked;
2. the request names an account (``AccessKey``): else refused;
3. the peer's address is in the account's ``whiteRemoteAddress``: the signature is not needed,
   else it must match (:mod:`core.remoting.signing`);
4. admin requests need an ``admin: true`` account; an admin account may do everything;
5. every resource the request touches needs the permission its kind asks for: topics from
   ``topicPerms`` (else ``defaultTopicPerm``), groups (``%RETRY%<group>``) from ``groupPerms``
   (else ``defaultGroupPerm``). A permission with DENY refuses.

RocketMQ's 4.x broker lets an account's white-listed address skip the permission check too, and
does not check SEND_BATCH_MESSAGE or QUERY_CONSUMER_OFFSET at all; here a white-listed address
only spares the signature, and both requests are checked.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from core.broker.headers import V2_NAMES
from core.remoting.codes import RequestCode
from core.remoting.command import RemotingCommand
from core.remoting.signing import ACCESS_KEY, signature_matches

# Permission bits (RocketMQ's Permission)
DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERM_NAMES = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
RETRY_PREFIX = "%RETRY%"

# requests that change the broker or other clients' state: admin accounts only
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.TRANSFER_LEADERSHIP,
    17,   # UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (not served; refused here first)
    25,   # UPDATE_BROKER_CONFIG (not served)
    207,  # DELETE_SUBSCRIPTIONGROUP (not served)
    215,  # DELETE_TOPIC_IN_BROKER (not served)
})


def parse_perm(text: str | None) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB`` or ``DENY``; anything else is DENY (as RocketMQ reads it)."""
    return _PERM_NAMES.get((text or "").strip().upper().replace(" ", ""), DENY)


def perm_text(perm: int) -> str:
    return "DENY" if perm & DENY else "|".join(n for n, b in (("PUB", PUB), ("SUB", SUB)) if perm & b) or "DENY"


class AddressPattern:
    """One white-list entry: ``*``, an address, ``a.b.c.*``, ``a.b.c.1-100``, ``a.b.c.{1,2}``
    or a comma list of addresses."""

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        self._any = self.text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")
        self._exact: set[str] = set()
        self._octets: list[set[int] | None] | None = None
        if self._any or not self.text:
            return
        if "," in self.text and "{" not in self.text:
            self._exact = {_normal(a) for a in self.text.split(",") if a.strip()}
            return
        parts = self.text.split(".")
        if len(parts) == 4 and any(p == "*" or "-" in p or p.startswith("{") for p in parts):
            self._octets = [_octet_set(p, self.text) for p in parts]
            return
        self._exact = {_normal(self.text)}

    def matches(self, address: str) -> bool:
        if self._any:
            return True
        if not self.text:
            return False
        if self._octets is not None:
            parts = address.split(".")
            if len(parts) != 4 or not all(p.isdigit() for p in parts):
                return False
            return all(allowed is None or int(p) in allowed for p, allowed in zip(parts, self._octets))
        return _normal(address) in self._exact


def _octet_set(part: str, whole: str) -> set[int] | None:
    """The values one octet of a pattern allows (None: any); each within 0..255."""
    try:
        if part == "*":
            return None
        if part.startswith("{") and part.endswith("}"):
            values = {int(x) for x in part[1:-1].split(",")}
        elif "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            if not 0 <= lo <= hi <= 255:
                raise ValueError
            values = set(range(lo, hi + 1))
        else:
            values = {int(part)}
        if not all(0 <= v <= 255 for v in values):
            raise ValueError
        return values
    except ValueError:
        raise ValueError(f"white-list address {whole!r} is not an address pattern") from None


def _normal(address: str) -> str:
    address = address.strip().strip("[]")
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)  # never in a log line or an error
    admin: bool = False
    white: tuple[AddressPattern, ...] = ()
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)  # keyed by group name (no prefix)

    def owned(self, resource: str) -> int:
        if resource.startswith(RETRY_PREFIX):
            return self.group_perms.get(resource[len(RETRY_PREFIX):], self.default_group_perm)
        return self.topic_perms.get(resource, self.default_topic_perm)

    def refusal(self, resource: str, needed: int) -> str | None:
        """Why this account may not use ``resource`` (a topic, or ``%RETRY%<group>``) with
        permission ``needed``, or ``None`` when it may."""
        owned = self.owned(resource)
        if self.admin or not (owned & DENY or not owned & needed):
            return None
        kind = "group" if resource.startswith(RETRY_PREFIX) else "topic"
        name = resource[len(RETRY_PREFIX):] if kind == "group" else resource
        return (f"ACL: {self.access_key!r} has no {perm_text(needed)} permission on {kind} {name!r} "
                f"(it has {perm_text(owned)})")


@dataclass(frozen=True)
class AclPolicy:
    accounts: dict[str, Account]
    global_white: tuple[AddressPattern, ...] = ()

    def check(self, request: RemotingCommand, remote_ip: str) -> str | None:
        """``None`` when the request may proceed, else why not (the response's remark)."""
        if any(p.matches(remote_ip) for p in self.global_white):
            return None
        access_key = request.ext_fields.get(ACCESS_KEY, "")
        if not access_key:
            return "ACL: the request is not signed (no AccessKey); sign it with an account's keys"
        account = self.accounts.get(access_key)
        if account is None:
            return f"ACL: no account for AccessKey {access_key!r}"
        if not any(p.matches(remote_ip) for p in account.white) and not signature_matches(request,
                                                                                         account.secret_key):
            return f"ACL: signature check failed for AccessKey {access_key!r}"
        if account.admin:
            return None
        if request.code in ADMIN_CODES:
            return f"ACL: request {request.code} needs an admin account; {access_key!r} is not one"
        for resource, needed in request_resources(request):
            if (why := account.refusal(resource, needed)) is not None:
                return why
        return None


def _group(name: str | None) -> str | None:
    return RETRY_PREFIX + name if name else None


def _send_resources(ext: dict[str, str]) -> Iterable[tuple[str | None, int]]:
    topic = ext.get("topic")
    if topic and topic.startswith(RETRY_PREFIX):
        yield topic, SUB  # a consumer sending a message back to its retry topic
    else:
        yield topic, PUB


def request_resources(request: RemotingCommand) -> list[tuple[str, int]]:
    """(resource, permission needed) for each topic or group (``%RETRY%<group>``) the request
    touches; requests not listed touch none (the signature is all they need)."""
    ext = request.ext_fields
    code = request.code
    found: Iterable[tuple[str | None, int]] = ()
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        found = _send_resources({V2_NAMES.get(k, k): v for k, v in ext.items()})
    elif code == RequestCode.SEND_MESSAGE:
        found = _send_resources(ext)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        found = [(_group(ext.get("group")), SUB)]
    elif code == RequestCode.PULL_MESSAGE:
        found = [(ext.get("topic"), SUB), (_group(ext.get("consumerGroup")), SUB)]
    elif code == RequestCode.QUERY_MESSAGE:
        found = [(ext.get("topic"), SUB)]
    elif code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
        found = [(_group(ext.get("consumerGroup")), SUB), (ext.get("topic"), SUB)]
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        found = [(_group(ext.get("consumerGroup")), SUB)]
    elif code == RequestCode.HEART_BEAT:
        found = _heartbeat_resources(request.body)
    return [(name, perm) for name, perm in found if name]


def _heartbeat_resources(body: bytes) -> list[tuple[str | None, int]]:
    try:
        doc = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return []  # the handler answers a bad body
    found: list[tuple[str | None, int]] = []
    for consumer in (doc.get("consumerDataSet") or []) if isinstance(doc, dict) else []:
        if not isinstance(consumer, dict):
            continue
        found.append((_group(str(consumer.get("groupName") or "")), SUB))
        for sub in consumer.get("subscriptionDataSet") or []:
            if isinstance(sub, dict):
                found.append((str(sub.get("topic") or ""), SUB))
    return found
