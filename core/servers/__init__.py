"""The servers that run one node each: a broker, a name server, a proxy, assembled from the
rooms below and the plugins (the top layer of core/)."""
