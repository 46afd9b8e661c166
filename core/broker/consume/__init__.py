"""Consuming: PULL and long polling, offsets, filters, queue locks, assignments, clients' own requests."""
