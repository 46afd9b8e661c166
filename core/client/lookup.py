"""Message lookups (RocketMQ's MQAdminImpl): view one message by its offset msgId, and query a
topic by key or by UNIQ_KEY on every broker of its route.

An offset msgId names the broker that stored the message and where (formats.msgid), so a view
goes straight there with VIEW_MESSAGE_BY_ID. A key or UNIQ_KEY can be on any broker of the
topic: QUERY_MESSAGE goes to one node of each broker group (the master when it is up), and the
answers are merged. Both kinds of id are 32 hex characters with IPv4 brokers, so
:func:`find_by_id` tries the reading the route makes likelier first, then the other.
"""

from __future__ import annotations

import logging

import trio

from core.client.runtime import ClientError, ClientRuntime
from core.errors import RemotingError
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from formats.errors import FormatError, RecordError
from formats.msgid import decode_offset_msg_id, encode_offset_msg_id
from formats.record import MessageRecord, decode_record, decode_records

log = logging.getLogger(__name__)

DEFAULT_MAX_NUM = 32  # what Java's admin asks for
END_OF_TIME_MS = 2**63 - 1
UNIQUE_KEY_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
VIEW_TIMEOUT_S = 3.0
QUERY_TIMEOUT_S = 5.0


class MessageNotFoundError(ClientError):
    """No broker holds the message asked for."""


def offset_msg_id(rec: MessageRecord) -> str:
    """The broker's msgId of a stored record: its store host and CommitLog offset."""
    return encode_offset_msg_id(rec.store_host[0], rec.store_host[1], rec.phys_offset)


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def view_message(client: ClientRuntime, msg_id: str, *, timeout_s: float = VIEW_TIMEOUT_S) -> MessageRecord:
    """The message an offset msgId names, from the broker that stored it.

    Raises :class:`ClientError` for a malformed id or an unreachable broker, and
    :class:`MessageNotFoundError` when the broker has no message starting there.
    """
    try:
        where = decode_offset_msg_id(msg_id)
    except FormatError as exc:
        raise ClientError(f"{msg_id!r} is not an offset msgId: {exc}") from None
    if not 0 < where.port < 65536:
        raise ClientError(f"{msg_id!r} is not an offset msgId: it names port {where.port}")
    address = _address(where.host, where.port)
    cmd = RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(where.phys_offset)})
    try:
        resp = await client.invoke(address, cmd, timeout_s)
    except RemotingError as exc:
        raise ClientError(f"broker {address} (from msgId {msg_id}) did not answer: {exc}") from None
    if resp.code != ResponseCode.SUCCESS:
        raise MessageNotFoundError(f"no message {msg_id} on broker {address}: {resp.remark or f'code {resp.code}'}")
    try:
        return decode_record(resp.body)
    except RecordError as exc:
        raise ClientError(f"broker {address} answered msgId {msg_id} with a bad record: {exc}") from None


async def query_messages(
    client: ClientRuntime,
    topic: str,
    key: str,
    *,
    unique: bool = False,
    max_num: int = DEFAULT_MAX_NUM,
    begin_ms: int = 0,
    end_ms: int = END_OF_TIME_MS,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> list[MessageRecord]:
    """Messages of ``topic`` with ``key`` among their KEYS (``unique``: whose UNIQ_KEY is
    ``key``) stored between ``begin_ms`` and ``end_ms``, from every broker of the topic; the
    newest ``max_num``, oldest first. Empty when none matches.

    Raises :class:`ClientError` when the topic has no route, or when nothing was found and a
    broker could not be asked (the message may be there).
    """
    route = await client.route(topic)
    if route is None:
        raise ClientError(f"topic {topic} does not exist (no route on the name servers)")
    ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin_ms),
           "endTimestamp": str(end_ms)}
    if unique:
        ext[UNIQUE_KEY_QUERY_FLAG] = "true"
    found: list[MessageRecord] = []
    errors: list[str] = []

    async def ask(address: str) -> None:
        try:
            resp = await client.invoke(address, RemotingCommand(code=RequestCode.QUERY_MESSAGE,
                                                                ext_fields=dict(ext)), timeout_s)
        except RemotingError as exc:
            errors.append(f"{address}: {exc}")
            return
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return
        if resp.code != ResponseCode.SUCCESS:
            errors.append(f"{address}: {resp.remark or f'code {resp.code}'}")
            return
        try:
            found.extend(decode_records(resp.body))
        except RecordError as exc:
            errors.append(f"{address}: bad records in the answer: {exc}")

    async with trio.open_nursery() as nursery:
        for name in sorted(route.brokers):
            address = route.any_address(name)
            if address is not None:
                nursery.start_soon(ask, address)

    # The index matches hashes of KEYS and UNIQ_KEY alike: keep what was asked for.
    matching = [r for r in found if (r.uniq_key == key if unique else key in r.keys)]
    unique_records = {offset_msg_id(r): r for r in matching}  # a record once, whichever node said it
    out = sorted(unique_records.values(), key=lambda r: (r.store_timestamp, r.phys_offset))[-max_num:]
    if errors:
        if not out:
            raise ClientError(f"query of topic {topic} by key {key} failed: {'; '.join(errors)}")
        log.warning("query of topic %s by key %s: some brokers failed: %s", topic, key, "; ".join(errors))
    return out


async def find_by_id(
    client: ClientRuntime,
    msg_id: str,
    topic: str | None = None,
    *,
    begin_ms: int = 0,
    end_ms: int = END_OF_TIME_MS,
    max_num: int = DEFAULT_MAX_NUM,
) -> list[MessageRecord]:
    """The message(s) ``msg_id`` names: an offset msgId (no topic needed) or, given ``topic``,
    a UNIQ_KEY (a resent message is stored more than once under one UNIQ_KEY).

    Raises :class:`ClientError` for an id that is neither, and :class:`MessageNotFoundError`
    when no broker has it.
    """
    if len(msg_id) not in (32, 56) or not _is_hex(msg_id):
        raise ClientError(f"{msg_id!r} is neither an offset msgId (32 or 56 hex characters) nor a UNIQ_KEY "
                          "(32 hex characters)")
    if topic is None or len(msg_id) != 32:
        try:
            return [await view_message(client, msg_id)]
        except ClientError as exc:  # with no topic, it cannot be looked up as a UNIQ_KEY
            raise MessageNotFoundError(str(exc)) from None
    route = await client.route(topic)
    if route is None:
        raise ClientError(f"topic {topic} does not exist (no route on the name servers)")
    topic_name = topic
    try:
        where = decode_offset_msg_id(msg_id)
    except FormatError:  # a UNIQ_KEY's last 8 bytes often read as a negative offset
        where = None
    addresses = {a for ids in route.brokers.values() for a in ids.values()}
    stored_here = where is not None and _address(where.host, where.port) in addresses
    failures: list[str] = []

    async def as_offset_id() -> list[MessageRecord]:
        try:
            return [await view_message(client, msg_id)]
        except ClientError as exc:
            failures.append(f"as an offset msgId: {exc}")
            return []

    async def as_uniq_key() -> list[MessageRecord]:
        try:
            found = await query_messages(client, topic_name, msg_id, unique=True, max_num=max_num,
                                         begin_ms=begin_ms, end_ms=end_ms)
        except ClientError as exc:
            failures.append(f"as a UNIQ_KEY: {exc}")
            return []
        if not found:
            failures.append(f"as a UNIQ_KEY: no message of topic {topic_name} has it")
        return found

    attempts = (as_offset_id, as_uniq_key) if stored_here else (as_uniq_key,) if where is None \
        else (as_uniq_key, as_offset_id)
    for attempt in attempts:
        found = await attempt()
        if found:
            return found
    raise MessageNotFoundError(f"no message {msg_id}: " + "; ".join(failures))
