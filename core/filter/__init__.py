"""Message filters of subscriptions: RocketMQ's SQL92 selector over message properties
(sans-IO: no broker, store or network imports)."""
