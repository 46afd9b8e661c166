"""Transactional messages: halves and decisions, the service that checks them, END_TRANSACTION."""
