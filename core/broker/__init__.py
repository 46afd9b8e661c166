"""The broker: topics, offsets, clients, long polling, request processing, registration."""
