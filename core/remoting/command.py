"""Remoting commands and their frames (sans-IO).

A frame, big-endian:

```
 [length:4]        4 + header length + body length (not counting itself)
 [header word:4]   (serialize type << 24) | header length; 0 = JSON, 1 = ROCKETMQ binary
 [header]          JSON text, or the binary layout below
 [body]            the rest
```

ROCKETMQ binary header:

```
 [code:2][language:1][version:2][opaque:4][flag:4]
 [remark length:4][remark]                     length 0 = no remark
 [ext length:4] then per entry [key length:2][key][value length:4][value]
```

JSON headers carry ``code``, ``language`` (name), ``version``, ``opaque``, ``flag``, ``remark``
and ``extFields`` (a string-to-string map; the C++ client sends some values as numbers, which
are turned into strings here). Replies use the serialize type of the request.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from types import MappingProxyType

import orjson

from core.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, VERSION, LanguageCode, SerializeType

FRAME_SIZE_MAX_DEFAULT = 16 * 1024 * 1024
_FRAME_HEAD = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_STR_ONLY = frozenset({str})
_LANGUAGE_NAMES = MappingProxyType({code.value: code.name for code in LanguageCode})


class FrameError(Exception):
    """The byte stream cannot be framed any more: the connection must close."""


class HeaderError(Exception):
    """A frame whose header is unusable. ``opaque`` is known when the header got that far."""

    def __init__(self, reason: str, opaque: int | None = None, code: int | None = None) -> None:
        super().__init__(reason)
        self.opaque = opaque
        self.code = code


@dataclass(slots=True)
class RemotingCommand:
    """One request or response."""

    code: int
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    language: str = "PYTHON"
    version: int = VERSION
    serialize_type: int = SerializeType.JSON
    # the whole frame as it arrived, when the decoder keeps frames (the proxy passes them on)
    frame: bytes = field(default=b"", compare=False, repr=False)
    # when the request was read (perf_counter), for its latency: set only where it is measured
    arrived: float = field(default=0.0, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def reply(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
              body: bytes = b"") -> RemotingCommand:
        """The response to this request."""
        return RemotingCommand(
            code=int(code), ext_fields=ext_fields or {}, body=body, opaque=self.opaque,
            flag=FLAG_RESPONSE, remark=remark, language="JAVA", serialize_type=self.serialize_type,
        )

    def field(self, name: str, default: str | None = None) -> str | None:
        return self.ext_fields.get(name, default)


def _str_value(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return orjson.dumps(value).decode()


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    header: dict[str, object] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    return orjson.dumps(header, option=orjson.OPT_SORT_KEYS)


def encode_frame(cmd: RemotingCommand) -> bytes:
    """The whole frame of ``cmd``."""
    return b"".join(frame_parts(cmd))


def frame_parts(cmd: RemotingCommand) -> tuple[bytes, bytes, bytes]:
    """The frame of ``cmd`` as its length words, header and body, for a writer that appends
    them to its buffer: a large body is then copied once, not again into a joined frame."""
    header = encode_header(cmd)
    word = (int(cmd.serialize_type) << 24) | len(header)
    return _FRAME_HEAD.pack(4 + len(header) + len(cmd.body), word), header, cmd.body


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    language = LanguageCode[cmd.language].value if cmd.language in LanguageCode.__members__ else 7
    parts = [_BIN_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode()
    parts.append(_I32.pack(len(remark)) + remark)
    ext = bytearray()
    for k, v in cmd.ext_fields.items():
        kb, vb = k.encode(), v.encode()
        ext += _I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
    parts.append(_I32.pack(len(ext)) + bytes(ext))
    return b"".join(parts)


def decode_header(raw: bytes, serialize_type: int) -> RemotingCommand:
    """A command (without body) from its header bytes; raises :class:`HeaderError`."""
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(raw)
    if serialize_type != SerializeType.JSON:
        raise HeaderError(f"unknown serialize type {serialize_type}")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HeaderError(f"header is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not a JSON object")
    opaque = doc.get("opaque")
    code = doc.get("code")
    flag = doc.get("flag", 0)
    if type(opaque) is not int:  # type(), not isinstance: a bool is not a number here
        opaque = None
        if type(code) is not int:
            raise HeaderError("header has no integer code")
        raise HeaderError("header has no integer opaque", None, code)
    if type(code) is not int:
        raise HeaderError("header has no integer code", opaque)
    if type(flag) is not int:
        raise HeaderError("header flag is not an integer", opaque, code)
    ext = doc.get("extFields") or {}
    if type(ext) is not dict:
        raise HeaderError("extFields is not an object", opaque, code)
    if not set(map(type, ext.values())) <= _STR_ONLY:  # the C++ client sends some as numbers
        ext = {k: sv for k, v in ext.items() if (sv := _str_value(v)) is not None}
    remark = doc.get("remark")
    version = doc.get("version", 0)
    language = doc.get("language", "OTHER")
    return RemotingCommand(
        code, ext, b"", opaque, flag,
        remark if type(remark) is str and remark else None,
        language if type(language) is str else "OTHER",
        version if type(version) is int else 0,
        SerializeType.JSON,
    )


def _decode_binary_header(raw: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
        pos = _BIN_FIXED.size
        (remark_len,) = _I32.unpack_from(raw, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(raw):
            raise HeaderError("binary header remark length out of range", opaque, code)
        remark = raw[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(raw, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(raw):
            raise HeaderError("binary header ext length out of range", opaque, code)
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = _I16.unpack_from(raw, pos)
            pos += 2
            key = raw[pos : pos + klen].decode()
            pos += klen
            (vlen,) = _I32.unpack_from(raw, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise HeaderError("binary header field runs past its table", opaque, code)
            ext[key] = raw[pos : pos + vlen].decode()
            pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise HeaderError(f"bad binary header: {exc}") from None
    return RemotingCommand(
        code=code, ext_fields=ext, opaque=opaque, flag=flag, remark=remark,
        language=_LANGUAGE_NAMES.get(language, "OTHER"), version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


class FrameDecoder:
    """Turns a byte stream into commands. Holds at most one partial frame (bounded by
    ``frame_size_max``)."""

    def __init__(self, frame_size_max: int = FRAME_SIZE_MAX_DEFAULT, *, keep_frames: bool = False) -> None:
        self.frame_size_max = frame_size_max
        self.keep_frames = keep_frames  # each command also carries its frame's bytes
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def partial_frame_bytes(self) -> int:
        """The declared size of the frame being received (0: none begun, or its length unread)."""
        if len(self._buf) < 4:
            return 0
        return 4 + int(_I32.unpack_from(self._buf, 0)[0])

    def feed(self, data: bytes | bytearray, frames_max: int = 1 << 30) -> list[RemotingCommand | HeaderError]:
        """Commands completed by ``data``, at most ``frames_max`` of them (feed ``b""`` for the
        rest); a :class:`HeaderError` stands in for a frame whose header was unusable (the stream
        itself is still in step). Raises :class:`FrameError` when the stream cannot be framed."""
        self._buf += data
        out: list[RemotingCommand | HeaderError] = []
        buf = self._buf
        with memoryview(buf) as view:  # slices copied once (a bytearray slice is copied twice)
            pos = self._frames(buf, view, out, frames_max)
        if pos:
            del buf[:pos]
        return out

    def _frames(self, buf: bytearray, view: memoryview, out: list[RemotingCommand | HeaderError],
                frames_max: int) -> int:
        """Decode the whole frames at the start of ``buf`` into ``out``, at most ``frames_max``;
        returns where the first one not decoded begins."""
        pos = 0
        while len(buf) - pos >= 4 and len(out) < frames_max:
            (length,) = _I32.unpack_from(buf, pos)
            if length < 4 or length > self.frame_size_max:
                raise FrameError(f"frame length {length} outside 4..{self.frame_size_max}")
            if len(buf) - pos - 4 < length:
                break
            (word,) = _I32.unpack_from(buf, pos + 4)
            serialize_type = (word >> 24) & 0xFF
            header_len = word & 0xFFFFFF
            if header_len > length - 4:
                raise FrameError(f"header length {header_len} exceeds frame length {length}")
            start = pos + 8
            header = view[start : start + header_len].tobytes()
            try:
                cmd = decode_header(header, serialize_type)
            except HeaderError as exc:
                out.append(exc)
            else:
                cmd.body = view[start + header_len : pos + 4 + length].tobytes()
                if self.keep_frames:
                    cmd.frame = view[pos : pos + 4 + length].tobytes()
                out.append(cmd)
            pos += 4 + length
        return pos
