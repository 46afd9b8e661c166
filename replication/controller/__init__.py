"""Controller mode (RocketMQ 5's RIP-44): a controller elects a broker group's master from its
in-sync replicas; epochs fence the old one."""
