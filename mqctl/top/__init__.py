"""``mqctl top`` and ``mqctl metrics``: the cluster read from its nodes' metrics endpoints."""
