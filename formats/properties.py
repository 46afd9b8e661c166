"""Message properties string: ``key \\x01 value \\x02`` repeated, with a trailing ``\\x02``.

```
 K E Y S 01 k 1 02 T A G S 01 T a g A 02 ...
 |name|  sep|val|end|                   (NAME_VALUE_SEPARATOR = 0x01, PROPERTY_SEPARATOR = 0x02)
```
Decoding is tolerant like RocketMQ's: malformed pairs are skipped. Encoding refuses a name or
value holding either separator: it would plant other properties (a client's text becoming
``UNIQ_KEY``, ``DELAY`` or ``REAL_TOPIC``), so nothing is encoded that decodes differently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from formats.errors import FormatError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTIES_SIZE_MAX = 32767  # int16 length on disk

# Well-known keys (RocketMQ MessageConst).
KEYS = "KEYS"
TAGS = "TAGS"
WAIT = "WAIT"
DELAY = "DELAY"
UNIQ_KEY = "UNIQ_KEY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
CLUSTER = "CLUSTER"
# timer messages (RocketMQ 5): deliver at an absolute time, or after a delay from the store time
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"  # when a held timer message is due (set by the broker)
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"  # a recall marker: the timer message with this UNIQ_KEY is not delivered
KEY_SEPARATOR = " "


class PropertySeparatorError(FormatError):
    """A property name or value holds a separator character."""


def encode_properties(props: Mapping[str, str]) -> str:
    """The wire/disk string for ``props``, in insertion order; :class:`PropertySeparatorError`
    when a name or value holds a separator."""
    if not props:
        return ""
    text = "\x02".join(map("\x01".join, props.items())) + "\x02"
    # each pair adds exactly one of each separator: any more came from a name or a value
    if text.count(NAME_VALUE_SEPARATOR) != len(props) or text.count(PROPERTY_SEPARATOR) != len(props):
        bad = next(k for k, v in props.items() if any(c in k + v for c in "\x01\x02"))
        raise PropertySeparatorError(f"property {bad[:64]!r}: a name or value may not hold \\x01 or \\x02")
    return text


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties string; pairs without a separator or with an empty name are skipped."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out


class PropertiesText(Mapping[str, str]):
    """A properties string read as a mapping, looking a name up without splitting the rest:
    what a filter asks of each record it scans. Gives what :func:`decode_properties` would
    (the last pair of a name wins) for names without separator characters."""

    __slots__ = ("_decoded", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._decoded: dict[str, str] | None = None

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        text = self.text
        if not name:
            return default
        at = text.rfind(PROPERTY_SEPARATOR + name + NAME_VALUE_SEPARATOR)
        if at >= 0:
            at += len(name) + 2
        elif text.startswith(name + NAME_VALUE_SEPARATOR):
            at = len(name) + 1
        else:
            return default
        end = text.find(PROPERTY_SEPARATOR, at)
        return text[at:] if end < 0 else text[at:end]

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def _all(self) -> dict[str, str]:
        if self._decoded is None:
            self._decoded = decode_properties(self.text)
        return self._decoded

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def message_keys(props: Mapping[str, str]) -> list[str]:
    """The KEYS property split on whitespace, empty pieces dropped."""
    raw = props.get(KEYS)
    return raw.split() if raw else []


def index_keys(props: Mapping[str, str]) -> list[str]:
    """Every key a record is found by: each of its KEYS, then its UNIQ_KEY."""
    raw, uniq = props.get(KEYS), props.get(UNIQ_KEY)
    if not raw:
        return [uniq] if uniq else []
    keys = raw.split()
    if uniq:
        keys.append(uniq)
    return keys
