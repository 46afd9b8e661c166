"""Recall handles: RocketMQ 5's layout both ways, and what does not parse."""

from __future__ import annotations

import base64

import pytest

from formats.recall import RecallHandle, RecallHandleError


def test_a_handle_is_url_safe_base64_of_its_five_fields() -> None:
    handle = RecallHandle("Orders", "broker-a", 1_795_000_000_123, "0102FC00")
    assert base64.urlsafe_b64decode(handle.text()) == b"v1 Orders broker-a 1795000000123 0102FC00"
    assert RecallHandle.parse(handle.text()) == handle


@pytest.mark.parametrize("text", [
    "", "!!!", base64.urlsafe_b64encode(b"v2 T b 1 u").decode(), base64.urlsafe_b64encode(b"v1 T b x u").decode(),
    base64.urlsafe_b64encode(b"v1 T b 1").decode(), "A" * 2000, base64.urlsafe_b64encode(b"\xff\xfe").decode(),
], ids=["empty", "not-base64", "version", "due", "fields", "long", "not-text"])
def test_what_is_not_a_handle_is_refused(text: str) -> None:
    with pytest.raises(RecallHandleError):
        RecallHandle.parse(text)
