"""Request signatures as RocketMQ's ACL computes them (client and broker alike).

The signed content is the values of every extField except ``Signature``, ordered by field name
(byte order, as Java's TreeMap and C++'s std::map order them), concatenated without separators,
then the body::

  content   = value(k1) + value(k2) + ... + body        k1 < k2 < ... ; "Signature" left out
  Signature = base64(HMAC-SHA1(secret key, content))

Field values are signed as the broker reads them: text, with JSON numbers in decimal. The stock
C++ client adds ``AccessKey``, ``OnsChannel`` and ``Signature`` to every request, credentials or
not (an empty access key and a signature made with an empty secret).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from core.remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
CHANNEL = "OnsChannel"


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str

    def __repr__(self) -> str:  # keep the secret out of logs
        return f"Credentials(access_key={self.access_key!r})"


def signed_content(ext_fields: dict[str, str], body: bytes) -> bytes:
    values = "".join(ext_fields[name] for name in sorted(ext_fields) if name != SIGNATURE)
    return values.encode() + body


def signature(secret_key: str, content: bytes) -> str:
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def sign(cmd: RemotingCommand, credentials: Credentials) -> None:
    """Add ``AccessKey`` and ``Signature`` to a request about to be sent."""
    cmd.ext_fields[ACCESS_KEY] = credentials.access_key
    cmd.ext_fields.pop(SIGNATURE, None)
    cmd.ext_fields[SIGNATURE] = signature(credentials.secret_key, signed_content(cmd.ext_fields, cmd.body))


def signature_matches(cmd: RemotingCommand, secret_key: str) -> bool:
    given = cmd.ext_fields.get(SIGNATURE, "")
    expected = signature(secret_key, signed_content(cmd.ext_fields, cmd.body))
    return hmac.compare_digest(given.encode(), expected.encode())
