"""Pure codecs and readers for RocketMQ's wire and disk layouts (no I/O concurrency)."""
