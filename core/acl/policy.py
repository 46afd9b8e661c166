"""RocketMQ-compatible access control: accounts, permissions and white-listed addresses.
Sans-IO: :meth:`AclPolicy.check` answers one request (a broker asks it in two steps,
:meth:`AclPolicy.admit` before it parses the header, then the permissions of what the header
names), :meth:`AclPolicy.refusal` one account's use of some resources (the gRPC door asks that
for each RPC).

Checks, in order (RocketMQ's ``PlainPermissionManager.validate``, with two gaps closed):

1. the peer's address is in ``globalWhiteRemoteAddresses``: allowed, nothing else checked;
2. the request names an account (``AccessKey``): else refused;
3. the peer's address is in the account's ``whiteRemoteAddress``: the signature is not needed,
   else it must match (:mod:`core.remoting.signing`);
4. admin requests need an ``admin: true`` account; an admin account may do everything;
5. every resource the request touches needs the permission its kind asks for: topics from
   ``topicPerms`` (else ``defaultTopicPerm``), groups (``%RETRY%<group>``) from ``groupPerms``
   (else ``defaultGroupPerm``). A permission with DENY refuses.

Which topics and groups each request touches is :mod:`core.acl.requests`' table, read from the
header as the handler gets it (:mod:`core.remoting.request_headers`). RocketMQ's 4.x
broker lets an account's white-listed address skip the permission check too; here a
white-listed address only spares the signature.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.acl.permissions import DENY, RETRY_PREFIX, perm_text
from core.acl.requests import ADMIN_CODES, Resource, request_resources
from core.remoting.command import RemotingCommand
from core.remoting.signing import ACCESS_KEY, signature_matches


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

    def check(self, request: RemotingCommand, remote_ip: str, header: object | None = None) -> str | None:
        """``None`` when the request may proceed, else why not (the response's remark).
        ``header`` is the request's header parsed with its code's declared type; without it
        the header is parsed here (the proxy's door judges requests it only forwards), and one
        that does not parse names nothing: the broker refuses it, after checking the signature."""
        refused, account = self.admit(request, remote_ip)
        if refused is not None or account is None:
            return refused
        return self.refusal(account, request_resources(request, header))

    def admit(self, request: RemotingCommand, remote_ip: str) -> tuple[str | None, Account | None]:
        """Steps 1-4 (address, account, signature, admin codes): ``(why not, None)`` when
        refused, else ``(None, the account whose permissions the request's resources need)``,
        the account ``None`` when they need none (a white-listed peer, an admin account)."""
        if self.white_listed(remote_ip):
            return None, None
        access_key = request.ext_fields.get(ACCESS_KEY, "")
        if not access_key:
            return "ACL: the request is not signed (no AccessKey); sign it with an account's keys", None
        account = self.accounts.get(access_key)
        if account is None:
            return f"ACL: no account for AccessKey {access_key!r}", None
        if not any(p.matches(remote_ip) for p in account.white) and not signature_matches(request,
                                                                                         account.secret_key):
            return f"ACL: signature check failed for AccessKey {access_key!r}", None
        if account.admin:
            return None, None
        if request.code in ADMIN_CODES:
            return f"ACL: request {request.code} needs an admin account; {access_key!r} is not one", None
        return None, account

    def white_listed(self, remote_ip: str) -> bool:
        return any(p.matches(remote_ip) for p in self.global_white)

    def checked_refusal(self, request: RemotingCommand, remote_ip: str, resources: Iterable[Resource]) -> str | None:
        """For a request :meth:`check` let through: why its account may not use ``resources``
        as well (what a handler finds only once it has read the store), or ``None``."""
        if self.white_listed(remote_ip):
            return None
        account = self.accounts.get(request.ext_fields.get(ACCESS_KEY, ""))
        if account is None:
            return "ACL: the account was removed"
        return self.refusal(account, resources)

    @staticmethod
    def refusal(account: Account, resources: Iterable[Resource]) -> str | None:
        """Why ``account`` may not use every one of ``resources`` (topic or ``%RETRY%<group>``,
        permission needed), or ``None``: the one permission test of brokers, proxy and gRPC door."""
        for resource, needed in resources:
            if (why := account.refusal(resource, needed)) is not None:
                return why
        return None
