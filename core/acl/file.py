"""Reading a RocketMQ ``plain_acl.yml`` into an :class:`~core.acl.policy.AclPolicy`, and keeping
it current while a node runs::

  globalWhiteRemoteAddresses:      # these peers need no account at all
    - 10.10.103.*
  accounts:
    - accessKey: RocketMQ          # more than 6 characters, as RocketMQ requires
      secretKey: 12345678
      whiteRemoteAddress: 192.168.0.*   # these peers need not sign (permissions still apply)
      admin: false
      defaultTopicPerm: DENY       # PUB, SUB, PUB|SUB or DENY
      defaultGroupPerm: SUB
      topicPerms: [topicA=DENY, topicB=PUB|SUB]
      groupPerms: [groupA=DENY, groupB=PUB|SUB]

A file that does not parse is refused as a whole, with a message that names the file and the
entry; a running node keeps the policy it had. Brokers and proxies re-read a changed file within
a second (:func:`keep_acl_current`), as RocketMQ does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import trio
import yaml

from core.acl.permissions import parse_perm
from core.acl.policy import Account, AclPolicy, AddressPattern
from core.config import ACL_KEY_LENGTH_MIN
from core.errors import ConfigError

log = logging.getLogger(__name__)

RELOAD_S = 1.0


class AclFileError(Exception):
    """An entry of the file is not what RocketMQ's format allows."""


def load_acl(path: Path) -> AclPolicy:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"ACL file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"ACL file {path} is not YAML: {exc}") from None
    try:
        return parse_acl(doc or {})
    except (AclFileError, ValueError) as exc:
        raise ConfigError(f"ACL file {path}: {exc}") from None


def parse_acl(doc: Any) -> AclPolicy:
    """The policy a parsed document describes; raises :class:`AclFileError` naming the entry."""
    doc = _mapping(doc, "the document")
    white = _patterns(_list(doc, "globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(_list(doc, "accounts")):
        account = _account(_mapping(raw, f"accounts[{i}]"), i)
        if account.access_key in accounts:
            raise AclFileError(f"accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return AclPolicy(accounts, white)


def _account(raw: dict[str, Any], i: int) -> Account:
    where = f"accounts[{i}]"
    access_key = _text(raw.get("accessKey"), f"{where}.accessKey")
    secret_key = _text(raw.get("secretKey"), f"{where}.secretKey")
    if len(access_key) < ACL_KEY_LENGTH_MIN or len(secret_key) < ACL_KEY_LENGTH_MIN:
        raise AclFileError(f"{where}: accessKey and secretKey need at least {ACL_KEY_LENGTH_MIN} characters")
    white_raw = raw.get("whiteRemoteAddress")
    white = _patterns([white_raw] if isinstance(white_raw, str) else _list(raw, "whiteRemoteAddress"),
                      f"{where}.whiteRemoteAddress")
    return Account(
        access_key=access_key, secret_key=secret_key, admin=_flag(raw.get("admin"), f"{where}.admin"), white=white,
        default_topic_perm=parse_perm(_text(raw.get("defaultTopicPerm"), f"{where}.defaultTopicPerm")),
        default_group_perm=parse_perm(_text(raw.get("defaultGroupPerm"), f"{where}.defaultGroupPerm")),
        topic_perms=_perms(raw, "topicPerms", i), group_perms=_perms(raw, "groupPerms", i))


def _perms(raw: dict[str, Any], key: str, i: int) -> dict[str, int]:
    perms = {}
    for entry in _list(raw, key):
        name, sep, perm = _text(entry, f"accounts[{i}].{key}").partition("=")
        if not sep or not name.strip():
            raise AclFileError(f"accounts[{i}].{key}: {entry!r} is not NAME=PERM")
        perms[name.strip()] = parse_perm(perm)
    return perms


def _text(value: Any, what: str) -> str:
    """A scalar as text: YAML reads ``secretKey: 12345678`` as a number, which RocketMQ takes
    as its digits; lists, mappings and booleans are mistakes."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise AclFileError(f"{what} must be text, not {value!r}")


def _flag(value: Any, what: str) -> bool:
    """``true``/``false`` (YAML booleans, or the words): ``admin: "false"`` must not be truthy."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclFileError(f"{what} must be true or false, not {value!r}")


def _patterns(values: list[Any], what: str) -> tuple[AddressPattern, ...]:
    try:
        return tuple(AddressPattern(_text(v, what)) for v in values)
    except ValueError as exc:
        raise AclFileError(f"{what}: {exc}") from None


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise AclFileError(f"{key} must be a list")


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    raise AclFileError(f"{what} must be a mapping")


class AclFile:
    """The policy of an ACL file, re-read when the file changes (RocketMQ reloads it too)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.policy = load_acl(path)
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int]:
        try:
            st = self.path.stat()
        except OSError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_size)

    def reload_if_changed(self) -> bool:
        """Re-read a changed file; a file that no longer parses keeps the old policy (raises)."""
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        self.policy = load_acl(self.path)
        return True

    def keep_current(self) -> None:
        """:meth:`reload_if_changed`, logged: a file that no longer parses leaves the previous
        accounts in force."""
        try:
            if self.reload_if_changed():
                log.info("ACL file %s reloaded", self.path)
        except ConfigError as exc:
            log.error("%s; the previous ACL stays in force", exc)


async def keep_acl_current(acl: AclFile) -> None:
    """Re-read the accounts file when it changes, every :data:`RELOAD_S`, until cancelled."""
    while True:
        await trio.sleep(RELOAD_S)
        acl.keep_current()
