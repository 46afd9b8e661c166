"""How a request header's fields are read. RocketMQ sends every header field as a string in
``extFields``; a declared header type (:mod:`core.remoting.request_headers`) is a frozen
dataclass whose attributes each name the field they are read from, and how:

```
text("consumerGroup")          a string, required (missing or empty: refused)
text("topic", None)            a string, or the default when missing or empty
number("queueId", bits=32)     an integer within Java's int (bits=64: long), required
number("delayLevel", 0, ...)   the same, or the default when missing or empty
boolean("isForce")             "true" or "1" (any case) is True, anything else False
declared("extraInfo", read)    whatever ``read`` makes of the fields (a receipt handle)
```

:meth:`RequestHeader.of` reads them all; a field that is missing or malformed raises
:class:`HeaderFieldError`, whose message the broker answers with (SYSTEM_ERROR). Numbers are
read as RocketMQ's clients write them (C++ sends numbers and "0"/"1" for booleans, Java
"true"/"false"), within their Java type: a value out of range is refused here, not found later
by a struct that cannot pack it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar, cast

from core.remoting.command import RemotingCommand

WIRE = "wire"  # field metadata: the ext field an attribute is read from
READ = "read"  # field metadata: how (a function of the ext fields)
_REQUIRED: Any = object()  # a declarator's default meaning "the field must be there"

Reader = Callable[[Mapping[str, str]], object]
H = TypeVar("H")


class HeaderFieldError(ValueError):
    """A required header field is missing or malformed."""


def as_int(ext: Mapping[str, str], name: str, default: int | None = None, *, bits: int = 64) -> int:
    """Field ``name`` as a signed integer of ``bits`` bits (Java's long, or int with 32)."""
    raw = ext.get(name)
    if raw is None or raw == "":
        if default is None:
            raise HeaderFieldError(f"the request lacks the field {name}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HeaderFieldError(f"field {name}={raw[:40]!r} is not an integer") from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise HeaderFieldError(f"field {name}={raw[:40]} is out of range for a {bits}-bit integer")
    return value


def as_bool(ext: Mapping[str, str], name: str) -> bool:
    return ext.get(name, "").lower() in ("1", "true")


def declared(name: str, read: Reader) -> Any:
    """An attribute read from field ``name`` by ``read`` (which raises HeaderFieldError)."""
    return dataclasses.field(metadata={WIRE: name, READ: read})


def text(name: str, default: str | None = _REQUIRED) -> Any:
    """An attribute read from the string field ``name`` (see the module's docstring)."""
    def read(ext: Mapping[str, str]) -> str | None:
        value = ext.get(name)
        if value:
            return value
        if default is _REQUIRED:
            raise HeaderFieldError(f"the request lacks the field {name}")
        return default
    return declared(name, read)


def number(name: str, default: int | None = _REQUIRED, *, bits: int = 64) -> Any:
    """An attribute read from the integer field ``name`` (see the module's docstring)."""
    def read(ext: Mapping[str, str]) -> int | None:
        if default is _REQUIRED or ext.get(name):
            return as_int(ext, name, bits=bits)
        return default
    return declared(name, read)


def boolean(name: str) -> Any:
    """An attribute read from the boolean field ``name``."""
    return declared(name, lambda ext: as_bool(ext, name))


class RequestHeader:
    """The base of declared header types: each attribute is read from the field its declarator
    names. Types on hot paths (sends, pulls) and the POP family's, which check fields against
    each other, override :meth:`of` and read the same fields by hand."""

    __slots__ = ()

    @classmethod
    def of(cls, request: RemotingCommand) -> Self:
        """The header of ``request``; raises :class:`HeaderFieldError`."""
        return parse_declared(cls, request.ext_fields)


def parse_declared(header_type: type[H], ext: Mapping[str, str]) -> H:
    """``header_type`` read from ``ext`` by its attributes' declarators."""
    make = cast(Callable[..., H], header_type)
    return make(**{f.name: f.metadata[READ](ext) for f in dataclasses.fields(cast(Any, header_type))})


def wire_names(header_type: type) -> dict[str, str]:
    """Each attribute of a declared header type and the field it is read from."""
    return {f.name: f.metadata[WIRE] for f in dataclasses.fields(header_type)}
