"""Prometheus metrics of every node: the catalogue of names, the counting cores the hot paths
feed (plain integers, per request or batch), and the HTTP endpoint that renders them with
prometheus_client when scraped."""
