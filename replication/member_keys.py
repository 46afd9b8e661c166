"""The keys a node proves its membership with, and checks others' against (from ``[acl]``).

With ``[acl] enabled``, every HA and raft connection starts with the handshake of
:mod:`replication.membership`: the connecting node signs with ``[acl] access_key`` /
``secret_key`` (an admin account), the accepting node looks that account up in the ACL file,
re-read when it changes as the broker re-reads it. With ACL off there is no handshake.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from core.acl.file import AclFile
from core.config import Config
from core.remoting.signing import Credentials
from replication.membership import NONCE_SIZE, Acceptor, Connector, Identity, MembershipError


class Membership:
    """One node's side of the handshakes: the ACL file's accounts and the node's own keys."""

    def __init__(self, acl: AclFile, credentials: Credentials | None) -> None:
        self.acl = acl
        self.credentials = credentials

    @classmethod
    def from_config(cls, config: Config) -> Membership | None:
        """The node's membership keys, or None with ACL off (ports open to whoever connects)."""
        if not config.acl.enabled:
            return None
        return cls(AclFile(config.acl_file), config.acl.credentials())

    def __repr__(self) -> str:
        return f"Membership(acl={str(self.acl.path)!r}, credentials={self.credentials!r})"

    def acceptor(self, purpose: bytes, me: Identity, admits: Callable[[Identity], str | None]) -> Acceptor:
        """A fresh acceptor for one incoming connection, with the accounts as the file says now."""
        self.acl.keep_current()
        return Acceptor(purpose, me, self.acl.policy.accounts, admits, secrets.token_bytes(NONCE_SIZE))

    def connector(self, purpose: bytes, me: Identity, expect: Identity) -> Connector:
        """A fresh connector for one outgoing connection to ``expect``."""
        if self.credentials is None:
            raise MembershipError("[acl] is enabled but has no access_key/secret_key: this node cannot prove "
                                  "it belongs to its group (set an admin account's keys there)")
        return Connector(purpose, self.credentials, me, expect, secrets.token_bytes(NONCE_SIZE))
