"""DLedger-style raft replication: a sans-IO core (election, entry pushing, quorum acks) driven
by trio tasks in a broker and by a seeded simulator in tests."""
