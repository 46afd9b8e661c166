"""POP consumption (RocketMQ 5): the request headers (:mod:`headers`), POP and NOTIFICATION
(:mod:`processor`), acks and changes of invisible time (:mod:`acks`), FIFO batches
(:mod:`order`), and the revive service that redelivers what was not acked (:mod:`revive`, its
bookkeeping :mod:`ledger`)."""
