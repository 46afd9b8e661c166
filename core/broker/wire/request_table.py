"""The broker's request table (RocketMQ's processor registration in BrokerController): each
request code and the function that answers it, the one place that maps a code to a handler.

A request's path from the door to its handler::

    connection (core/remoting/server.py: one reader per client, frames decoded)
      -> Broker.process (core/broker/broker.py: ACL, the header parsed once with the code's
         declared type from core/remoting/request_headers.py, names checked: wire/request_names.py)
      -> this table: code -> handler, handed to the Broker by the server (core/servers/broker.py)
      -> handler(broker, header, request, conn), e.g. produce/send.py's handle_send

The broker module knows none of its handlers; each handler types its broker as a Protocol of the
members it uses (SendingBroker, PullingBroker, ...), and this table, typed with the Broker
itself, is where mypy checks that the Broker is each of them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.broker.admin import admin, consumer_admin
from core.broker.admin.query import handle_query_message
from core.broker.broker import Handler
from core.broker.consume import assignments, client_requests
from core.broker.consume.pull import handle_pull
from core.broker.pop import acks, processor
from core.broker.pop.revive import when_pop_ready
from core.broker.produce.send import handle_send
from core.broker.produce.send_back import handle_send_back
from core.broker.timers.recall import handle_recall
from core.broker.transactions.end_transaction import handle_end_transaction
from core.remoting.codes import RequestCode

HANDLERS: Mapping[int, Handler] = MappingProxyType({
    RequestCode.SEND_MESSAGE: handle_send,
    RequestCode.SEND_MESSAGE_V2: handle_send,
    RequestCode.SEND_BATCH_MESSAGE: lambda b, h, r, c: handle_send(b, h, r, c, batch=True),
    RequestCode.PULL_MESSAGE: handle_pull,
    RequestCode.POP_MESSAGE: when_pop_ready(processor.handle_pop),
    RequestCode.ACK_MESSAGE: when_pop_ready(acks.handle_ack),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: when_pop_ready(acks.handle_change_invisible),
    RequestCode.BATCH_ACK_MESSAGE: when_pop_ready(acks.handle_batch_ack),
    RequestCode.NOTIFICATION: when_pop_ready(processor.handle_notification),
    RequestCode.CONSUMER_SEND_MSG_BACK: handle_send_back,
    RequestCode.END_TRANSACTION: handle_end_transaction,
    RequestCode.RECALL_MESSAGE: handle_recall,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_and_create_subscription_group,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.all_subscription_groups,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: admin.delete_subscription_group,
    RequestCode.QUERY_ASSIGNMENT: assignments.query_assignment,
    RequestCode.SET_MESSAGE_REQUEST_MODE: assignments.set_message_request_mode,
    RequestCode.LOCK_BATCH_MQ: client_requests.lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: client_requests.unlock_batch,
    RequestCode.HEART_BEAT: client_requests.heartbeat,
    RequestCode.CHECK_CLIENT_CONFIG: client_requests.check_client_config,
    RequestCode.UNREGISTER_CLIENT: client_requests.unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: client_requests.consumer_list,
    RequestCode.QUERY_CONSUMER_OFFSET: client_requests.query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: client_requests.update_consumer_offset,
    RequestCode.GET_MAX_OFFSET: client_requests.max_offset,
    RequestCode.GET_MIN_OFFSET: client_requests.min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: client_requests.search_offset,
    RequestCode.GET_EARLIEST_MSG_STORETIME: client_requests.earliest_store_time,
    RequestCode.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: admin.all_topic_config,
    RequestCode.GET_ALL_CONSUMER_OFFSET: admin.all_consumer_offsets,
    RequestCode.VIEW_MESSAGE_BY_ID: admin.view_message,
    RequestCode.QUERY_MESSAGE: handle_query_message,
    RequestCode.GET_BROKER_RUNTIME_INFO: admin.runtime_info,
    RequestCode.TRANSFER_LEADERSHIP: admin.transfer_leadership,
    RequestCode.GET_CONSUME_STATS: consumer_admin.consume_stats,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: consumer_admin.consumer_connection_list,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: consumer_admin.reset_offset,
    RequestCode.GET_CONSUMER_RUNNING_INFO: consumer_admin.consumer_running_info,
})
