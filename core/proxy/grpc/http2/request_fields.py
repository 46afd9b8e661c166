"""A request's header fields as RFC 9113 §8.2-§8.3 wants them: a request that breaks a rule is
malformed, a stream error of type PROTOCOL_ERROR (§8.1.1), and never reaches a handler.

- names (§8.2.1): not empty; no octet 0x00-0x20, no upper-case letter, none 0x7f-0xff; no colon
  but the one that starts a pseudo-header;
- values (§8.2.1): no NUL, CR or LF; no space or tab at either end;
- connection-specific fields (§8.2.2): ``connection``, ``proxy-connection``, ``keep-alive``,
  ``transfer-encoding``, ``upgrade`` are refused, and ``te`` may only be ``trailers``;
- pseudo-headers (§8.3): only ``:method``, ``:scheme``, ``:authority``, ``:path`` (a response's
  ``:status`` or an unknown one is malformed), each at most once, all before the regular fields;
  ``:method``, ``:scheme`` and a non-empty ``:path`` required (a CONNECT has ``:authority``
  and neither of the other two); a ``host`` that differs from ``:authority`` is refused;
- ``content-length`` (§8.1.1), when present, is digits: the stream's DATA must add up to it
  (the connection counts);
- trailers (§8.1): no pseudo-header at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":authority", b":path"})
CONNECTION_SPECIFIC = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"})
_BAD_NAME = re.compile(rb"[\x00-\x20A-Z\x7f-\xff:]")
_BAD_VALUE_OCTET = re.compile(rb"[\x00\r\n]")
_WHITE = (b" ", b"\t")
FIELDS_REMEMBERED = 256  # well-formed fields a connection keeps, so a repeated one is checked once

Fields = list[tuple[bytes, bytes]]


@dataclass(slots=True)
class Request:
    """A well-formed request's fields: the pseudo-headers, and the rest as text."""

    method: str
    path: str
    metadata: dict[str, str]  # the regular fields, by name (a repeated name: its last value)
    content_length: int  # -1 when absent


class FieldChecker:
    """Checks one connection's requests and trailers. Fields found well-formed are remembered
    with their text (a client repeats most of its metadata on every call), so a repeated one
    costs a lookup."""

    __slots__ = ("_good",)

    def __init__(self) -> None:
        self._good: dict[tuple[bytes, bytes], tuple[str, str]] = {}

    def request(self, fields: Fields) -> Request | str:
        """The request ``fields`` make, or why they are malformed."""
        pseudo: dict[bytes, bytes] = {}
        metadata: dict[str, str] = {}
        regular = False
        good = self._good
        for field in fields:
            name, value = field
            if name[:1] == b":":
                if regular:
                    return f"pseudo-header {_shown(name)} after a regular field"
                if name not in REQUEST_PSEUDO:
                    return f"pseudo-header {_shown(name)} is not a request's"
                if name in pseudo:
                    return f"pseudo-header {_shown(name)} twice"
                if field not in good:
                    if not _value_ok(value):
                        return f"the value of {_shown(name)} has NUL, CR, LF or surrounding white space"
                    if len(good) < FIELDS_REMEMBERED:
                        good[field] = name.decode("latin-1"), value.decode("latin-1")
                pseudo[name] = value
                continue
            regular = True
            text = good.get(field)
            if text is None:
                problem = _field_problem(name, value)
                if problem is not None:
                    return problem
                text = name.decode("latin-1"), value.decode("latin-1")
                if len(good) < FIELDS_REMEMBERED:
                    good[field] = text
            metadata[text[0]] = text[1]
        method = pseudo.get(b":method")
        if method is None:
            return "no :method"
        if method == b"CONNECT":
            if b":scheme" in pseudo or b":path" in pseudo or b":authority" not in pseudo:
                return "a CONNECT has :authority and neither :scheme nor :path"
        elif b":scheme" not in pseudo:
            return "no :scheme"
        elif not pseudo.get(b":path"):
            return "no :path, or an empty one"
        authority = pseudo.get(b":authority")
        if authority is not None and metadata.get("host", authority.decode("latin-1")) != authority.decode("latin-1"):
            return "host differs from :authority"
        length = -1
        if (text_length := metadata.get("content-length")) is not None:
            if not text_length.isdigit() or not text_length.isascii():
                return f"content-length {text_length[:40]!r} is not a number"
            length = int(text_length)
        return Request(method.decode("latin-1"), pseudo.get(b":path", b"").decode("latin-1"), metadata, length)

    def trailers(self, fields: Fields) -> str | None:
        """Why ``fields`` are not well-formed trailers, or None."""
        for name, value in fields:
            if name[:1] == b":":
                return f"pseudo-header {_shown(name)} in trailers"
            problem = _field_problem(name, value)
            if problem is not None:
                return problem
        return None


def _field_problem(name: bytes, value: bytes) -> str | None:
    if not name or _BAD_NAME.search(name):
        return f"field name {_shown(name)} is empty, upper-case or has a forbidden octet"
    if name in CONNECTION_SPECIFIC:
        return f"connection-specific field {_shown(name)}"
    if name == b"te" and value != b"trailers":
        return f"te: {_shown(value)}, not trailers"
    if not _value_ok(value):
        return f"the value of {_shown(name)} has NUL, CR, LF or surrounding white space"
    return None


def _value_ok(value: bytes) -> bool:
    return not (value[:1] in _WHITE or value[-1:] in _WHITE or _BAD_VALUE_OCTET.search(value))


def _shown(text: bytes) -> str:
    return repr(text[:40].decode("latin-1"))
