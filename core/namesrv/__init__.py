"""The name server: route tables, broker liveness, KV config."""
