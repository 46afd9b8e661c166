"""The proxy: a stateless front door that 4.x clients use as their name server and broker,
following the cluster's masters and raft leaders itself (RocketMQ 5's remoting proxy)."""
