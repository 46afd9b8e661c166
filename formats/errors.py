"""Errors raised by the pure codecs and readers of ``formats``."""

from __future__ import annotations


class FormatError(ValueError):
    """Bytes that do not follow a RocketMQ layout."""


class RecordError(FormatError):
    """A stored message record that fails a structural or CRC check.

    ``reason`` is a short machine-friendly phrase ("bad magic", "body crc mismatch", ...).
    """

    def __init__(self, reason: str, offset: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{reason}{where}")


class CompressionError(FormatError):
    """A body whose compression type is unknown or whose bytes do not decompress."""


class DecompressedTooLargeError(CompressionError):
    """A compressed body that inflates past the limit its reader set."""
