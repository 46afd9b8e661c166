"""The broker's config tables on disk: topics, subscription groups, the change journal they grow by."""
