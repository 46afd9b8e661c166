"""The door to the handlers: the request table, the names requests carry, errors as response codes."""
