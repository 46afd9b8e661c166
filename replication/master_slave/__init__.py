"""RocketMQ's classic master-slave HA: HAService and HAConnection on the master, HAClient on
the slave, GroupTransferService for sync sends."""
