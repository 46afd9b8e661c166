"""RocketMQ 4.x remoting: frame codec, commands, and trio connections, server and client."""
