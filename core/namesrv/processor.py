"""Name server request handling: registration, routes, cluster info, KV config; and the
controller's requests (controller mode), handed to the controller it hosts once the ACL (when
on) admitted them: a valid signature for every controller request, an admin account for those
that change its state (RocketMQ's controller checks nothing)."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import Any

import orjson

from core.acl.file import AclFile
from core.addresses import split_address
from core.clock import now_ms
from core.namesrv.controller import HostedController
from core.namesrv.kv_config import KVConfig
from core.namesrv.route_table import RouteTable
from core.remoting.codes import RequestCode, ResponseCode
from core.remoting.command import RemotingCommand
from core.remoting.connection import Connection
from core.remoting.processor import Reply
from core.topic_names import queue_nums_problem, shown, topic_problem

log = logging.getLogger(__name__)


def json_body(doc: object) -> bytes:
    """Standard JSON (quoted keys) for every body the name server sends."""
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)


class NameServerProcessor:
    def __init__(self, routes: RouteTable, kv: KVConfig, clock: Callable[[], int] = now_ms, *,
                 controller: HostedController | None = None, acl: AclFile | None = None) -> None:
        self.routes = routes
        self.kv = kv
        self.clock = clock
        self.controller = controller
        self.acl = acl
        self.acl_refusals = 0
        self._handlers: dict[int, Callable[[RemotingCommand, Connection], RemotingCommand]] = {
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.PUT_KV_CONFIG: self._put_kv,
            RequestCode.GET_KV_CONFIG: self._get_kv,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._kv_namespace,
        }

    def process(self, request: RemotingCommand, conn: Connection) -> Reply:
        if self.controller is not None and request.code in self.controller.codes:
            return self._to_controller(self.controller, request, conn)
        handler = self._handlers.get(request.code)
        if handler is None:
            # stock name servers stay silent here and the C++ client times out: answer
            return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                 f" request type {request.code} not supported")
        return handler(request, conn)

    def connection_closed(self, conn: Connection) -> None:
        for addr in self.routes.remove_connection(conn):
            log.info("broker %s removed: its connection closed", addr)
        if self.controller is not None:
            self.controller.connection_closed(conn)

    def _to_controller(self, controller: HostedController, request: RemotingCommand, conn: Connection) -> Reply:
        if self.acl is not None:
            self.acl.keep_current()
            ip = split_address(conn.remote)[0] if ":" in conn.remote else ""
            refused = self.acl.policy.check(request, ip)
            if refused is not None:
                self.acl_refusals += 1
                log.warning("refused controller request %d from %s: %s", request.code, conn.remote, refused)
                return request.reply(ResponseCode.NO_PERMISSION, refused)
        return controller.process(request, conn)

    # ------------------------------------------------------------------ brokers

    def _register_broker(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = request.ext_fields
        missing = [k for k in ("brokerName", "brokerAddr", "clusterName", "brokerId") if not ext.get(k)]
        if missing:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"REGISTER_BROKER lacks {', '.join(missing)}")
        crc = ext.get("bodyCrc32", "0")
        if crc not in ("", "0") and int(crc) != zlib.crc32(request.body) & 0x7FFFFFFF:
            return request.reply(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if ext.get("compressed") == "true":
            return request.reply(ResponseCode.SYSTEM_ERROR, "compressed registration bodies are not supported")
        try:
            broker_id = int(ext["brokerId"])
            body: dict[str, Any] = orjson.loads(request.body) if request.body else {}
            wrapper = body.get("topicConfigSerializeWrapper") or {}
            topics = wrapper.get("topicConfigTable") or {}
            version = wrapper.get("dataVersion") or {}
            if not isinstance(topics, dict) or not isinstance(version, dict):
                raise ValueError("topicConfigTable and dataVersion must be objects")
            topics = self._servable(ext["brokerName"], topics)
        except (ValueError, TypeError, orjson.JSONDecodeError, AttributeError) as exc:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"bad REGISTER_BROKER body: {exc}")
        result = self.routes.register(
            cluster=ext["clusterName"], broker_name=ext["brokerName"], broker_addr=ext["brokerAddr"],
            broker_id=broker_id, ha_addr=ext.get("haServerAddr", ""), topic_configs=topics,
            data_version=version, now_ms=self.clock(), connection=conn,
            incremental=ext.get("incremental") == "true",
        )
        out = {"wantFull": "true"} if result.want_full else {}
        if result.master_addr:
            out["masterAddr"] = result.master_addr
        if result.ha_addr:
            out["haServerAddr"] = result.ha_addr
        return request.reply(ResponseCode.SUCCESS, ext_fields=out)

    @staticmethod
    def _servable(broker_name: str, topics: dict[str, Any]) -> dict[str, Any]:
        """The registered topics a route may name: a valid topic name, queue counts a broker
        could have (they size every client's queue lists). Others are logged and left out."""
        servable = {}
        for topic, cfg in topics.items():
            if not isinstance(cfg, dict):
                raise ValueError(f"topicConfigTable[{shown(topic)}] must be an object")
            problem = topic_problem(topic) or queue_nums_problem(
                int(cfg.get("readQueueNums", 0)), int(cfg.get("writeQueueNums", 0)), int(cfg.get("perm", 6)))
            if problem:
                log.warning("broker %s registered topic %s, left out of routes: %s", shown(broker_name),
                            shown(topic), problem)
                continue
            servable[topic] = cfg
        return servable

    def _unregister_broker(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = request.ext_fields
        try:
            dropped = self.routes.unregister(cluster=ext.get("clusterName", ""), broker_name=ext["brokerName"],
                                             broker_addr=ext["brokerAddr"], broker_id=int(ext["brokerId"]),
                                             connection=conn)
        except (KeyError, ValueError) as exc:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"bad UNREGISTER_BROKER: {exc}")
        if not dropped:
            log.warning("UNREGISTER_BROKER %s from %s ignored: the broker registered over another connection",
                        shown(ext["brokerAddr"]), conn.remote)
            return request.reply(ResponseCode.SYSTEM_ERROR, f"broker {shown(ext['brokerAddr'])} was registered "
                                 f"by another connection; only it may unregister")
        return request.reply(ResponseCode.SUCCESS)

    def _query_data_version(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            theirs = orjson.loads(request.body) if request.body else {}
        except orjson.JSONDecodeError:
            theirs = {}
        ours = self.routes.data_version(request.ext_fields.get("brokerAddr", ""))
        changed = ours is None or ours != theirs
        return request.reply(ResponseCode.SUCCESS, ext_fields={"changed": "true" if changed else "false"},
                             body=json_body(ours or {}))

    # ------------------------------------------------------------------ clients

    def _route(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = request.ext_fields.get("topic", "")
        route = self.routes.route(topic)
        if route is None:
            return request.reply(ResponseCode.TOPIC_NOT_EXIST,
                                 f"No topic route info in name server for the topic: {topic}")
        return request.reply(ResponseCode.SUCCESS, body=json_body(route))

    def _cluster_info(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, body=json_body(self.routes.cluster_info()))

    def _topic_list(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, body=json_body({"topicList": self.routes.topic_list()}))

    # ------------------------------------------------------------------ KV config

    def _put_kv(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = request.ext_fields
        if not ext.get("namespace") or not ext.get("key") or "value" not in ext:
            return request.reply(ResponseCode.SYSTEM_ERROR, "PUT_KV_CONFIG needs namespace, key and value")
        self.kv.put(ext["namespace"], ext["key"], ext["value"])
        return request.reply(ResponseCode.SUCCESS)

    def _get_kv(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        ns, key = request.ext_fields.get("namespace", ""), request.ext_fields.get("key", "")
        value = self.kv.get(ns, key)
        if value is None:
            return request.reply(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return request.reply(ResponseCode.SUCCESS, ext_fields={"value": value})

    def _delete_kv(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.kv.delete(request.ext_fields.get("namespace", ""), request.ext_fields.get("key", ""))
        return request.reply(ResponseCode.SUCCESS)

    def _kv_namespace(self, request: RemotingCommand, conn: Connection) -> RemotingCommand:
        ns = request.ext_fields.get("namespace", "")
        table = self.kv.namespace(ns)
        if table is None:
            return request.reply(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return request.reply(ResponseCode.SUCCESS, body=json_body({"table": table}))
