"""Operator requests: topics and groups, runtime info, messages by id or key, consumer administration."""
