"""Access control as RocketMQ's ``plain_acl.yml`` describes it: accounts and permissions
(:mod:`policy`, its permission bits in :mod:`permissions`), what each request names
(:mod:`requests`), and the file, re-read while a node runs (:mod:`file`). Brokers, the proxy's
remoting door and its gRPC door all judge with these."""
