"""The proxy's gRPC door: HTTP/2 and gRPC framing on trio, and the RocketMQ 5 RPCs."""
