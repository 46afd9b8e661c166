"""Who a RocketMQ 5 client is: its id, and with ACL on, the account its signed metadata proves.

Every call carries ``x-mq-client-id`` and, from a client given keys, ``authorization``:

```
 MQv2-HMAC-SHA1 Credential=<AccessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>
 <hex> = lower-case hex of HMAC-SHA1(key = SecretKey, data = the x-mq-date-time header's text)
```

The account is looked up in the same accounts file as the brokers'; the proxy then signs what it
sends upstream for the client with that account's keys, so the brokers check it again. The
date header is not compared with the clock: the 5.x SDKs format local time with a literal ``Z``,
so a skew window would refuse clients in other time zones (RocketMQ's proxy does not check it
either). A captured header can therefore be replayed for as long as the account exists.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from core.acl.permissions import SUB, group_resource
from core.acl.policy import AclPolicy
from core.proxy.grpc.messages import Refused
from core.remoting.signing import Credentials
from formats.rocketmq_v2 import messaging_pb2 as pb

CLIENT_ID = "x-mq-client-id"
DATE_TIME = "x-mq-date-time"
AUTHORIZATION = "authorization"
SCHEME = "MQv2-HMAC-SHA1"
CLIENT_ID_LENGTH_MAX = 256


@dataclass(frozen=True, slots=True)
class Caller:
    """One call's client: its id, address and (ACL on) the account it signed as."""

    client_id: str
    peer_host: str
    credentials: Credentials | None = None
    language: str = ""
    version: str = ""


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, signature hex) of an ``authorization`` header, or :class:`Refused`."""
    scheme, _, rest = value.partition(" ")
    if scheme != SCHEME:
        raise Refused(pb.UNAUTHORIZED, f"authorization scheme must be {SCHEME}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, _, val = part.strip().partition("=")
        fields[key] = val
    access_key = fields.get("Credential", "").split("/", 1)[0]
    signature = fields.get("Signature", "")
    if not access_key or not signature:
        raise Refused(pb.UNAUTHORIZED, "authorization lacks a Credential or a Signature")
    return access_key, signature


def caller_of(metadata: Mapping[str, str], peer_host: str, policy: AclPolicy | None) -> Caller:
    """The caller of a call with ``metadata``, checked against ``policy`` when ACL is on."""
    client_id = metadata.get(CLIENT_ID, "").strip()
    if not client_id or len(client_id) > CLIENT_ID_LENGTH_MAX or not client_id.isprintable():
        raise Refused(pb.CLIENT_ID_REQUIRED, "x-mq-client-id is missing, blank or not printable")
    credentials = None
    if policy is not None and not any(p.matches(peer_host) for p in policy.global_white):
        header = metadata.get(AUTHORIZATION, "")
        if not header:
            raise Refused(pb.UNAUTHORIZED, "ACL is on: sign the client's requests with an account's keys")
        access_key, signature = parse_authorization(header)
        account = policy.accounts.get(access_key)
        if account is None:
            raise Refused(pb.UNAUTHORIZED, f"no account for AccessKey {access_key[:64]!r}")
        expected = hmac.new(account.secret_key.encode(), metadata.get(DATE_TIME, "").encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(expected, signature.lower()):
            raise Refused(pb.UNAUTHORIZED, f"signature check failed for AccessKey {access_key[:64]!r}")
        credentials = Credentials(account.access_key, account.secret_key)
    return Caller(client_id, peer_host, credentials, metadata.get("x-mq-language", ""),
                  metadata.get("x-mq-client-version", ""))


def check_permission(policy: AclPolicy | None, caller: Caller, *, topic: str | None = None,
                     group: str | None = None, topic_perm: int = SUB) -> None:
    """:class:`Refused` (FORBIDDEN, as RocketMQ's proxy answers an authorization failure)
    unless the caller's account has ``topic_perm`` (either bit, when it has two) on ``topic``
    and SUB on ``group``."""
    if policy is None or caller.credentials is None:
        return
    account = policy.accounts.get(caller.credentials.access_key)
    if account is None:
        raise Refused(pb.UNAUTHORIZED, "the account was removed")
    needed = [(topic, topic_perm)] if topic else []
    if group:
        needed.append((group_resource(group), SUB))
    if (why := policy.refusal(account, needed)) is not None:
        raise Refused(pb.FORBIDDEN, why)
